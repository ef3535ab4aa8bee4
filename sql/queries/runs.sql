-- name: upsert_tenant
INSERT INTO geo.tenants (tenant_id, name, currency)
VALUES (%(tenant_id)s, %(tenant_id)s, %(currency)s)
ON CONFLICT (tenant_id) DO NOTHING;

-- name: monitor_for_run
-- The monitor a run created with `monitor:` belongs to, locked until the run's transaction ends
-- (issue 37): a run never changes a monitor silently. same_config: the run's config is the one
-- the monitor saved (as written, or the canonical snapshot an older `runs create` saved).
SELECT tenant_id, revision, cron, timezone, retired_at IS NOT NULL AS retired,
       (config = %(config)s::jsonb OR config = %(canonical)s::jsonb) AS same_config
FROM geo.monitors WHERE monitor_id = %(monitor_id)s
FOR UPDATE;

-- name: keep_monitor
-- A monitor's own re-sample (the schedule's job): the monitor exists and its config is what the
-- run was planned from; it is not written back, so an update committed meanwhile (`monitors
-- update`) stays for the next run (issue 37). Still checks the tenant.
SELECT monitor_id FROM geo.monitors
WHERE monitor_id = %(monitor_id)s AND tenant_id = %(tenant_id)s;

-- name: insert_snapshot
INSERT INTO geo.config_snapshots (snapshot_id, tenant_id, config)
VALUES (%(snapshot_id)s, %(tenant_id)s, %(config)s)
ON CONFLICT (snapshot_id) DO NOTHING;

-- name: insert_question_revisions
INSERT INTO geo.question_revisions (question_revision, text)
SELECT * FROM unnest(%(revisions)s::text[], %(texts)s::text[])
ON CONFLICT (question_revision) DO NOTHING;

-- name: insert_quote
INSERT INTO geo.quote_snapshots (quote_id, tenant_id, currency, estimated_max_minor, price_versions)
VALUES (%(quote_id)s, %(tenant_id)s, %(currency)s, %(estimated_max_minor)s, %(price_versions)s)
ON CONFLICT (quote_id) DO NOTHING
RETURNING quote_id;

-- name: insert_quote_line
INSERT INTO geo.quote_lines (quote_id, line_no, platform, price_version, item, mode,
                             unit_price_minor, quantity, amount_minor)
VALUES (%(quote_id)s, %(line_no)s, %(platform)s, %(price_version)s, %(item)s, %(mode)s,
        %(unit_price_minor)s, %(quantity)s, %(amount_minor)s);

-- name: lock_run
-- Serialises concurrent creation of the same run id (re-planning is a no-op, R5).
SELECT pg_advisory_xact_lock(hashtext('geo.run:' || %(run_id)s));

-- name: get_run
SELECT r.*, q.currency, q.estimated_max_minor
FROM geo.runs r JOIN geo.quote_snapshots q USING (quote_id)
WHERE r.run_id = %(run_id)s;

-- name: insert_run
INSERT INTO geo.runs (run_id, tenant_id, monitor_id, snapshot_id, quote_id, scheduled_for,
                      priority, sample_count)
VALUES (%(run_id)s, %(tenant_id)s, %(monitor_id)s, %(snapshot_id)s, %(quote_id)s,
        %(scheduled_for)s, %(priority)s, %(sample_count)s);

-- name: insert_batches
-- Every batch of a run in one statement (a 100,000-sample run has 1,000): the statements of
-- create_run do not grow with the run (issue 39).
INSERT INTO geo.batches (run_id, batch_no, size, platform_counts)
SELECT %(run_id)s, b.batch_no, b.size, b.platform_counts
FROM unnest(%(batch_nos)s::int[], %(sizes)s::int[], %(platform_counts)s::jsonb[])
  AS b(batch_no, size, platform_counts);

-- name: copy_samples
COPY geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision, question_index,
                  platform, device, region, mode, repeat_index, screenshot_policy, priority)
FROM STDIN;

-- name: set_work_mem
-- work_mem for the rest of this transaction (as SET LOCAL), and the value it replaces.
SELECT p.previous, set_config('work_mem', %(value)s, true) AS work_mem
FROM (SELECT current_setting('work_mem') AS previous OFFSET 0) p;

-- name: dispatch_new_run
-- The first dispatch of a run created in this same transaction: no sample can have a hint yet.
-- Every channel is marked dispatched (migration 0012) and gets one collect hint per batch, in
-- plan order (migration 0010). The groups are the run's samples per (channel, platform, batch)
-- as dagster.run_plan_facts read them moments before in this transaction (the plan checks'
-- one pass over the run; issue 39: a second grouped pass cost ~0.06-0.09 s per 100k): the run
-- is not committed, so no other transaction can have added, changed or removed a sample since.
-- Every sample of the run is of the run's tenant (geo.guard_sample_insert).
WITH h AS (
  INSERT INTO geo.outbox (stream, kind, run_id, tenant_id, batch_no, channel, payload)
  SELECT %(collect_prefix)s::text || g.platform, 'collect', %(run_id)s, %(tenant_id)s,
         g.batch_no, g.channel, jsonb_build_object('priority', g.priority, 'samples', g.n)
  FROM unnest(%(batch_nos)s::int[], %(channels)s::text[], %(platforms)s::text[],
              %(priorities)s::int[], %(counts)s::bigint[])
    AS g(batch_no, channel, platform, priority, n)
  ORDER BY g.batch_no, g.channel
  RETURNING run_id, channel
)
INSERT INTO geo.run_dispatches (run_id, channel)
SELECT DISTINCT run_id, channel FROM h
ON CONFLICT DO NOTHING;

-- name: get_snapshot
SELECT config FROM geo.config_snapshots WHERE snapshot_id = %(snapshot_id)s;

-- name: list_runs
SELECT r.run_id, r.tenant_id, r.monitor_id, r.scheduled_for, r.sample_count, r.created_at,
       r.cancel_requested_at, r.closed_at, q.currency, q.estimated_max_minor
FROM geo.runs r JOIN geo.quote_snapshots q USING (quote_id)
WHERE (%(tenant_id)s::text IS NULL OR r.tenant_id = %(tenant_id)s)
ORDER BY r.created_at DESC, r.run_id
LIMIT %(limit)s;

-- name: quote_lines
SELECT platform, price_version, item, mode, unit_price_minor, quantity, amount_minor
FROM geo.quote_lines WHERE quote_id = %(quote_id)s ORDER BY line_no;

-- name: batches
SELECT batch_no, size, platform_counts FROM geo.batches WHERE run_id = %(run_id)s ORDER BY batch_no;

-- name: mark_dispatched
-- The run's channels (or one) may now be worked on (migration 0012). Idempotent.
INSERT INTO geo.run_dispatches (run_id, channel)
SELECT DISTINCT s.run_id, s.channel FROM geo.samples s
WHERE s.run_id = %(run_id)s AND (%(channel)s::text IS NULL OR s.channel = %(channel)s)
ON CONFLICT DO NOTHING;

-- name: dispatch_collect
-- Queue a collect hint for every (batch, channel) of the run (optionally one channel) with
-- never-dispatched samples; returns how many samples the new hints cover. Idempotent: a batch
-- and channel with a hint gets no second one (nor does a sample hinted on its own, as runs
-- dispatched before migration 0010 were).
WITH g AS (
  SELECT s.run_id, s.tenant_id, s.batch_no, s.platform, s.channel, max(s.priority) AS priority,
         count(*) AS n
  FROM geo.samples s
  WHERE s.run_id = %(run_id)s AND (%(channel)s::text IS NULL OR s.channel = %(channel)s)
    AND s.collection_state = 'queued' AND s.attempt_no = 0
    AND NOT EXISTS (SELECT 1 FROM geo.outbox o
                     WHERE o.sample_id = s.sample_id AND o.kind = 'collect')
  GROUP BY s.run_id, s.tenant_id, s.batch_no, s.platform, s.channel
), i AS (
  INSERT INTO geo.outbox (stream, kind, run_id, tenant_id, batch_no, channel, payload)
  SELECT %(collect_prefix)s::text || g.platform, 'collect', g.run_id, g.tenant_id, g.batch_no, g.channel,
         jsonb_build_object('priority', g.priority, 'samples', g.n)
  FROM g
  WHERE NOT EXISTS (SELECT 1 FROM geo.outbox o
                     WHERE o.kind = 'collect' AND o.sample_id IS NULL AND o.run_id = g.run_id
                       AND o.channel = g.channel AND o.batch_no = g.batch_no)
  ORDER BY g.batch_no, g.channel
  RETURNING (payload ->> 'samples')::int AS n
)
SELECT coalesce(sum(n), 0)::int AS n FROM i;
