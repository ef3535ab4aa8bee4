-- A new sample entered five indexes; each entry is part of every run's creation (issue 39:
-- index inserts were ~58 % of the backend's CPU in a 100,000-sample COPY). Two of them only
-- repeated what a third holds:
--   samples_queued_tenant_due (tenant_id, platform, next_attempt_at) WHERE queued: the claim's
--     oldest-due candidates now read samples_queued_tenant_priority once per priority (0-9,
--     samples_priority_check) and merge (execution.claim_candidates);
--   samples_due (next_attempt_at) WHERE queued or running: the sweeper (sweep_unhinted) and
--     wake_waiting read the queued rows from samples_queued_tenant_priority, the backlog gauge
--     (ops.backlog_by_platform) a BitmapOr of it and samples_running_tenant.
-- A fresh sample now enters the primary key, samples_run_channel and one queue index.
DROP INDEX geo.samples_queued_tenant_due;
DROP INDEX geo.samples_due;
