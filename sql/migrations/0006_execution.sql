-- Execution core (issue 4): indexes for fair, per-tenant claims and in-flight caps (R10).
-- Candidates are read per (tenant, platform) oldest-due first and by priority; the running count
-- per tenant is what max_in_flight is compared with.
CREATE INDEX samples_queued_tenant_due ON geo.samples (tenant_id, platform, next_attempt_at)
  WHERE collection_state = 'queued';
CREATE INDEX samples_queued_tenant_priority
  ON geo.samples (tenant_id, platform, priority DESC, next_attempt_at)
  WHERE collection_state = 'queued';
CREATE INDEX samples_running_tenant ON geo.samples (tenant_id, lease_until)
  WHERE collection_state = 'running';
-- The sweeper's "has this sample a live hint?" check reads the newest collect hint per sample.
CREATE INDEX outbox_sample_kind_created ON geo.outbox (sample_id, kind, created_at);
