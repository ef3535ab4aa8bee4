-- Queries of the execution core: claims, renewals, fenced completions, the relay and the
-- sweeper. Every write to a claimed sample carries (sample_id, fencing_token, lease_owner)
-- and "still running" in its WHERE: a stale token matches nothing and writes nothing (R11).
-- Batch writes lock their rows by ``s.sample_id = ANY(%(ids)s)`` alone (the primary key),
-- check state, owner and token on the locked rows, then update them joined by sample_id (or by
-- the row address fence_lock returned): with "collection_state = 'running'" in the scan, the
-- planner (which cannot see into unnest) prefers the partial index samples_running_tenant and
-- reads every sample in flight for each batch, and with the id array repeated beside a join it
-- probes the whole array once per row: O(in flight) or O(batch^2) per write, not O(batch).

-- name: set_actor
-- Who the transition log names for this transaction's changes.
SELECT set_config('geo.actor', %(actor)s, true);

-- name: claim_without_jit
-- No JIT for the rest of this transaction (as SET LOCAL; it changes no plan): the claim's plan
-- is priced per tenant with room (each arm's LIMITed scan x the tenants), above jit_above_cost
-- with a few tenants, while it reads ~k rows; compiling it took seconds per claim on 2 cores,
-- ~1,000x its execution (issue 39).
SELECT set_config('jit', 'off', true);

-- name: claim_candidates
-- Due samples of the given platforms, per tenant: the oldest-due and the highest-priority few,
-- with the tenant's free in-flight room. The fair choice among them is made by
-- geo_pipeline.domain.retry.fair_pick (R10). Only claimable samples are candidates (geo.claimable:
-- run confirmed, (run, channel) dispatched, no new submission for a cancelled run, uncertain
-- only where lookup exists, R12), checked before the LIMIT, so a large run that may not run yet
-- never hides the work behind it. The check is a scalar subquery per row, not a lateral join:
-- joined, the planner joined every due sample of the (tenant, platform) with its run and sorted
-- them (one claim of a 100,000-sample run read ~425k buffers, issue 39); as a per-row filter
-- each arm stays an ordered index scan that stops after k claimable rows, so a claim costs
-- ~k rows plus the unclaimable samples that lie ahead of them in that arm's order (each one an
-- index entry, its heap row and a run + dispatch lookup). Accepted samples come with their age
-- since acceptance: the claim takes them first, by fetch deadline (retention - age), where the
-- platform states a result retention (domain.retry.fair_pick).
-- MATERIALIZED: inlined, the per-tenant running count was re-run for every candidate row
-- (500 candidates x 5,000 running = 2.5M index entries read per claim).
WITH t AS MATERIALIZED (
  SELECT tn.tenant_id,
         greatest(0, tn.max_in_flight - (SELECT count(*) FROM geo.samples r
                                         WHERE r.tenant_id = tn.tenant_id
                                           AND r.collection_state = 'running')) AS room
  FROM geo.tenants tn
)
SELECT c.sample_id, c.tenant_id, c.priority, c.platform,
       extract(epoch FROM now() - c.next_attempt_at)::float8 AS waited_s, t.room,
       extract(epoch FROM now() - c.accepted_at)::float8 AS accepted_age_s
FROM t
CROSS JOIN unnest(%(platforms)s::text[]) AS p(platform)
CROSS JOIN LATERAL (
  -- The oldest-due few, read per priority (0-9, samples_priority_check) from the one queue
  -- index samples_queued_tenant_priority: a (tenant, platform, due) index of its own was one
  -- more index entry for every sample a run creates (migration 0069, issue 39).
  (SELECT q.sample_id, q.tenant_id, q.priority, q.platform, q.next_attempt_at, q.accepted_at
   FROM generate_series(9, 0, -1) AS pr(priority)
   CROSS JOIN LATERAL (
     SELECT s.sample_id, s.tenant_id, s.priority, s.platform, s.next_attempt_at, s.accepted_at
     FROM geo.samples s
     WHERE (SELECT c FROM geo.claimable(s.run_id, s.channel, s.platform, s.submission_state,
                                             %(lookup_platforms)s::text[]) c)
       AND s.tenant_id = t.tenant_id AND s.platform = p.platform AND s.priority = pr.priority
       AND s.collection_state = 'queued' AND s.next_attempt_at <= now()
     ORDER BY s.next_attempt_at LIMIT %(k)s) q
   ORDER BY q.next_attempt_at, q.priority DESC LIMIT %(k)s)
  UNION
  (SELECT s.sample_id, s.tenant_id, s.priority, s.platform, s.next_attempt_at, s.accepted_at
   FROM geo.samples s
   WHERE (SELECT c FROM geo.claimable(s.run_id, s.channel, s.platform, s.submission_state,
                                           %(lookup_platforms)s::text[]) c)
     AND s.tenant_id = t.tenant_id AND s.platform = p.platform
     AND s.collection_state = 'queued' AND s.next_attempt_at <= now()
   ORDER BY s.priority DESC, s.next_attempt_at LIMIT %(k)s)
  UNION
  -- Accepted tasks whose result the service keeps only so long: the earliest accepted first
  -- (their fetch deadline; issue 31, index samples_queued_accepted).
  (SELECT s.sample_id, s.tenant_id, s.priority, s.platform, s.next_attempt_at, s.accepted_at
   FROM geo.samples s
   WHERE (SELECT c FROM geo.claimable(s.run_id, s.channel, s.platform, s.submission_state,
                                           %(lookup_platforms)s::text[]) c)
     AND s.tenant_id = t.tenant_id AND s.platform = p.platform
     AND s.collection_state = 'queued' AND s.submission_state = 'accepted'
     AND s.next_attempt_at <= now()
   ORDER BY s.accepted_at LIMIT %(k)s)
) c
WHERE t.room > 0;

-- name: lock_claim_tenants
-- Serialise the claims of one tenant (R10): every claim transaction takes the rows of the
-- tenants it claims for, in tenant_id order (no deadlocks), before the claim statement counts
-- their running samples. Without it two claimers (two workers, or two platform lanes of one)
-- each count the running samples, neither seeing the other's uncommitted claim, and both claim
-- up to the room. Claims of other tenants do not wait. NO KEY UPDATE: the foreign-key checks
-- of inserts naming the tenant (samples, outbox, ledger) take KEY SHARE and are not blocked.
-- ``tenants`` NULL: the tenants of the samples in ``ids``.
SELECT tn.tenant_id
FROM geo.tenants tn
WHERE tn.tenant_id = ANY(coalesce(
        %(tenants)s::text[],
        ARRAY(SELECT s.tenant_id FROM geo.samples s WHERE s.sample_id = ANY(%(ids)s::text[]))))
ORDER BY tn.tenant_id
FOR NO KEY UPDATE OF tn;

-- name: claim
-- Claim the given due samples for one worker (R11): lease from database time, a new fencing
-- token, and for a sample that starts a new attempt the attempt row and the acceptance record
-- ('sending') -- committed BEFORE the request leaves (R9, R12). Runs not confirmed or cancelled
-- get no new submissions; an accepted task of a cancelled run is still followed to its end.
-- Never past a tenant's max_in_flight: its running samples are counted here, in a statement
-- that starts after lock_claim_tenants returned, so every other claim of the tenant has
-- committed and is counted (the candidates' room was read without the lock and may be stale).
-- Where the room is smaller than the ids given (only when claims raced), a tenant's highest
-- priority, oldest-due samples go first, as in the fair pick.
WITH l AS (  -- by primary key only; the state is checked on the locked rows (see the top)
  SELECT s.sample_id, s.run_id, s.tenant_id, s.channel, s.platform, s.submission_state,
         s.collection_state, s.next_attempt_at, s.priority
  FROM geo.samples s
  WHERE s.sample_id = ANY(%(ids)s::text[])
  ORDER BY s.sample_id
  FOR UPDATE OF s SKIP LOCKED
), e AS (
  SELECT l.sample_id, l.tenant_id, l.submission_state AS was,
         extract(epoch FROM now() - l.next_attempt_at)::float8 AS queue_wait_s,
         row_number() OVER (PARTITION BY l.tenant_id
                            ORDER BY l.priority DESC, l.next_attempt_at, l.sample_id) AS rn
  FROM l  -- claimable as the locked row stands, not as the candidates saw it
  CROSS JOIN LATERAL geo.claimable(l.run_id, l.channel, l.platform, l.submission_state,
                                   %(lookup_platforms)s::text[])
  WHERE l.collection_state = 'queued' AND l.next_attempt_at <= now()
), room AS MATERIALIZED (  -- counted once per tenant, not once per claimed row
  SELECT tn.tenant_id,
         tn.max_in_flight - (SELECT count(*) FROM geo.samples r
                             WHERE r.tenant_id = tn.tenant_id
                               AND r.collection_state = 'running') AS room
  FROM geo.tenants tn
  WHERE tn.tenant_id IN (SELECT e.tenant_id FROM e)
), c AS (
  SELECT e.sample_id, e.was, e.queue_wait_s
  FROM e JOIN room ON room.tenant_id = e.tenant_id
  WHERE e.rn <= room.room
), u AS (
  UPDATE geo.samples s
  SET collection_state = 'running', collection_reason = NULL,
      fencing_token = s.fencing_token + 1,
      lease_owner = %(owner)s,
      lease_until = now() + make_interval(secs => %(lease_s)s),
      attempt_no = CASE WHEN c.was = 'planned' THEN s.attempt_no + 1 ELSE s.attempt_no END,
      submission_state = CASE WHEN c.was = 'planned' THEN 'submitting' ELSE s.submission_state END,
      submission_reason = CASE WHEN c.was = 'planned' THEN NULL ELSE s.submission_reason END
  FROM c WHERE s.sample_id = c.sample_id
  RETURNING s.sample_id, s.run_id, s.tenant_id, s.platform, s.device, s.region, s.mode,
            s.channel, s.screenshot_policy, s.question_revision, s.attempt_no, s.fencing_token,
            s.submission_state, s.upstream_id, s.accepted_at, c.was, c.queue_wait_s
), att AS (
  INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id)
  SELECT sample_id, attempt_no, fencing_token, %(owner)s FROM u WHERE was = 'planned'
), req AS (
  INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform)
  SELECT sample_id || ':' || attempt_no, sample_id, attempt_no, platform FROM u
  WHERE was = 'planned'
)
SELECT u.*, q.text AS question, (cs.config ->> 'max_attempts')::int AS max_attempts,
       extract(epoch FROM now() - coalesce(
         -- Waits for an account or an operator (nothing sent) do not spend the time budget.
         (SELECT min(a.started_at) FROM geo.attempts a
           WHERE a.sample_id = u.sample_id AND a.error_class IS DISTINCT FROM 'unavailable'),
         now()))::float8 AS elapsed_s,
       (SELECT count(*) FROM geo.attempts a
         WHERE a.sample_id = u.sample_id AND a.error_class = 'rate_limited')::int AS rate_limited,
       -- Attempts that waited for an account or an operator (nothing sent): no budget spent.
       (SELECT count(*) FROM geo.attempts a
         WHERE a.sample_id = u.sample_id AND a.error_class = 'unavailable')::int AS waited,
       extract(epoch FROM now() - coalesce(u.accepted_at, now()))::float8 AS accepted_age_s,
       -- What the acceptance record says of an attempt taken over (a new attempt's row is
       -- written by this statement and not visible here: NULL means 'prepared').
       ur.state AS req_state,
       extract(epoch FROM now() - ur.sent_at)::float8 AS sent_age_s,
       -- Unexpected worker errors this sample met so far: bounded by the worker (a sample that
       -- keeps crashing its worker ends operator-visible instead of being handed back forever).
       (SELECT count(*) FROM geo.state_transitions t
         WHERE t.sample_id = u.sample_id AND t.layer = 'collection'
           AND t.reason LIKE 'worker_error%%')::int AS worker_errors,
       -- Waits because the browser page had changed (bounded: RetryPolicy.max_layout_waits).
       (SELECT count(*) FROM geo.state_transitions t
         WHERE t.sample_id = u.sample_id AND t.layer = 'collection'
           AND t.reason = 'unavailable:layout_changed')::int AS layout_waits
FROM u
LEFT JOIN geo.upstream_requests ur
  ON ur.sample_id = u.sample_id AND ur.attempt_no = u.attempt_no AND u.was <> 'planned'
JOIN geo.question_revisions q ON q.question_revision = u.question_revision
JOIN geo.runs r ON r.run_id = u.run_id
JOIN geo.config_snapshots cs ON cs.snapshot_id = r.snapshot_id;

-- name: renew
-- Extend the leases a worker still holds, in one statement (R11). A sample missing from the
-- result was taken over (its token moved on) or finished: the worker drops it. ``cancelled``
-- tells the worker to stop following a run the operator cancelled. Rows are locked in
-- sample_id order, like every multi-row writer here, so writers never deadlock.
WITH l AS (
  SELECT s.sample_id, s.fencing_token, s.lease_owner, s.collection_state
  FROM geo.samples s
  WHERE s.sample_id = ANY(%(ids)s::text[])
  ORDER BY s.sample_id
  FOR UPDATE OF s
), o AS (
  SELECT l.sample_id
  FROM l JOIN unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS h(sample_id, token)
    ON l.sample_id = h.sample_id AND l.fencing_token = h.token
  WHERE l.lease_owner = %(owner)s AND l.collection_state = 'running'
)
UPDATE geo.samples s
SET lease_until = now() + make_interval(secs => %(lease_s)s)
FROM o
WHERE s.sample_id = o.sample_id
RETURNING s.sample_id,
          (SELECT r.cancel_requested_at IS NOT NULL FROM geo.runs r
            WHERE r.run_id = s.run_id) AS cancelled;

-- name: record_acceptance
-- Upstream accepted (by response, or found by idempotency-key lookup): record the upstream id
-- on the sample, the acceptance record and the attempt, fenced by the token (R9, R12).
WITH h AS (
  SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::bigint[], %(upstream_ids)s::text[],
                       %(resolved_by)s::text[])
    AS h(sample_id, token, upstream_id, resolved_by)
), l AS (  -- lock in sample_id order (no deadlocks with renewals and completions)
  SELECT s.sample_id, s.fencing_token, s.lease_owner, s.collection_state, s.submission_state
  FROM geo.samples s
  WHERE s.sample_id = ANY(%(ids)s::text[])
  ORDER BY s.sample_id FOR UPDATE OF s
), s AS (
  UPDATE geo.samples s
  SET submission_state = 'accepted', submission_reason = NULL,
      upstream_id = h.upstream_id, accepted_at = now()
  FROM h JOIN l USING (sample_id)
  WHERE s.sample_id = l.sample_id
    AND l.fencing_token = h.token AND l.lease_owner = %(owner)s
    AND l.collection_state = 'running' AND l.submission_state IN ('submitting', 'uncertain')
  RETURNING s.sample_id, s.attempt_no, s.platform, h.upstream_id, h.resolved_by
), r AS (
  UPDATE geo.upstream_requests u
  SET state = 'accepted', upstream_id = s.upstream_id, accepted_at = now(),
      resolved_by = s.resolved_by
  FROM s WHERE u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
), a AS (
  UPDATE geo.attempts a SET outcome = 'accepted'
  FROM s WHERE a.sample_id = s.sample_id AND a.attempt_no = s.attempt_no
)
SELECT sample_id FROM s;

-- name: mark_sent
-- The moment before a request leaves (DESIGN.md section 8): the acceptance record says it was
-- sent, and when; fenced by the token, so a worker that lost its sample sends nothing. Returns
-- the samples that may send. Every re-send under the same key moves sent_at on: "not found" is
-- only trusted once the LAST send is older than any request can live.
WITH h AS (
  SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS h(sample_id, token)
), l AS (
  SELECT s.sample_id, s.attempt_no
  FROM geo.samples s JOIN h ON h.sample_id = s.sample_id
  WHERE s.sample_id = ANY(%(ids)s::text[])
    AND s.fencing_token = h.token AND s.lease_owner = %(owner)s
    AND s.collection_state = 'running' AND s.submission_state IN ('submitting', 'uncertain')
)
UPDATE geo.upstream_requests u
SET state = CASE WHEN u.state IN ('prepared', 'uncertain') THEN 'sending' ELSE u.state END,
    sent_at = now(), sends = u.sends + 1
FROM l
WHERE u.sample_id = l.sample_id AND u.attempt_no = l.attempt_no
  AND u.state IN ('prepared', 'sending', 'uncertain')
RETURNING u.sample_id;

-- name: note_lookup
-- Count a lookup of the acceptance record (what was tried, for `samples uncertain`).
UPDATE geo.upstream_requests SET lookups = lookups + 1, last_lookup_at = now()
WHERE idempotency_key = %(key)s;

-- name: fence_lock
-- Lock the rows of a completion batch that this worker still owns with these tokens. Rows not
-- returned are stale: nothing is written for them (R11). Their run and submission state, which
-- the lock keeps as they are, go to finish (is this a retry of a cancelled run?).
WITH l AS (
  SELECT s.sample_id, s.ctid, s.fencing_token, s.lease_owner, s.collection_state, s.run_id,
         s.submission_state
  FROM geo.samples s
  WHERE s.sample_id = ANY(%(ids)s::text[])
  ORDER BY s.sample_id
  FOR UPDATE OF s
)
SELECT l.sample_id, l.ctid::text AS ctid, l.run_id, l.submission_state
FROM l JOIN unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS h(sample_id, token)
  ON l.sample_id = h.sample_id AND l.fencing_token = h.token
WHERE l.lease_owner = %(owner)s AND l.collection_state = 'running';

-- name: finish
-- The end of an attempt, for a batch of samples, in one statement guarded by the token: the
-- sample's layers (completed / failed / handed back with a due time), the attempt row, the
-- acceptance record, and the outbox rows -- one completion event per sample reaching a terminal
-- collection state, and a screenshot download where one is still pending (R10, R11, R25).
-- An item with acc_upstream_id also records the upstream acceptance that the worker had not
-- written yet (record_acceptance's effects, in the same fenced write).
-- Cancellation is decided here, not by the worker (which hears of a cancel only at its next
-- renewal): an attempt of a cancelled run that would go back to queued + planned -- a retry, a
-- lookup that found nothing -- ends 'failed' with reason CANCELLED and its completion event,
-- as cancel_unsubmitted does. Back in planned, no claim, sweep or later cancel would touch it.
WITH h0 AS (
  SELECT * FROM unnest(
      %(ids)s::text[], %(tokens)s::bigint[], %(sub_to)s::text[], %(col_to)s::text[],
      %(ev_to)s::text[], %(ev_reason)s::text[], %(reason)s::text[], %(delay_s)s::float8[],
      %(outcome)s::text[], %(error_class)s::text[], %(error_detail)s::text[],
      %(retry_after_ms)s::int[], %(req_state)s::text[], %(deep)s::bool[], %(shot)s::bool[],
      %(want_shot)s::bool[], %(acc_upstream_id)s::text[], %(acc_resolved_by)s::text[],
      %(ctids)s::tid[], %(run_ids)s::text[], %(sub_from)s::text[])
    AS h(sample_id, token, sub_to, col_to, ev_to, ev_reason, reason, delay_s, outcome,
         error_class, error_detail, retry_after_ms, req_state, deep, shot, want_shot,
         acc_upstream_id, acc_resolved_by, ctid, run_id, sub_from)
), h AS MATERIALIZED (
  -- run_id and sub_from are what fence_lock read from the rows it locked in this transaction;
  -- the run's cancel is read now, by this statement. MATERIALIZED: inlined, the runs lookup
  -- was repeated for every use of col_to and reason.
  SELECT h0.sample_id, h0.token, h0.sub_to, h0.ev_to, h0.ev_reason, h0.delay_s, h0.outcome,
         h0.error_class, h0.error_detail, h0.retry_after_ms, h0.req_state, h0.deep, h0.shot,
         h0.want_shot, h0.acc_upstream_id, h0.acc_resolved_by, h0.ctid,
         CASE WHEN k.cancel THEN 'failed' ELSE h0.col_to END AS col_to,
         CASE WHEN k.cancel THEN 'CANCELLED' ELSE h0.reason END AS reason
  FROM h0
  JOIN geo.runs r ON r.run_id = h0.run_id
  CROSS JOIN LATERAL (
    SELECT h0.col_to = 'queued' AND h0.acc_upstream_id IS NULL
           AND coalesce(h0.sub_to, h0.sub_from) = 'planned'
           AND r.cancel_requested_at IS NOT NULL AS cancel
  ) k
), s AS (
  UPDATE geo.samples s
  SET submission_state = CASE WHEN h.acc_upstream_id IS NOT NULL THEN 'accepted'
                              ELSE coalesce(h.sub_to, s.submission_state) END,
      submission_reason = CASE WHEN h.acc_upstream_id IS NOT NULL THEN NULL
                               WHEN h.sub_to IS NOT NULL AND h.sub_to <> s.submission_state
                               THEN h.reason ELSE s.submission_reason END,
      upstream_id = coalesce(h.acc_upstream_id, s.upstream_id),
      accepted_at = CASE WHEN h.acc_upstream_id IS NOT NULL THEN now() ELSE s.accepted_at END,
      collection_state = h.col_to,
      collection_reason = CASE WHEN h.col_to = 'completed' THEN NULL ELSE h.reason END,
      evidence_state = coalesce(h.ev_to, s.evidence_state),
      evidence_reason = CASE WHEN h.ev_to IS NOT NULL THEN h.ev_reason
                             ELSE s.evidence_reason END,
      lease_owner = NULL, lease_until = NULL,
      next_attempt_at = CASE WHEN h.col_to = 'queued'
                             THEN now() + make_interval(secs => h.delay_s)
                             ELSE s.next_attempt_at END,
      completed_at = CASE WHEN h.col_to IN ('completed', 'failed') THEN now()
                          ELSE s.completed_at END
  FROM h
  -- finish_batch ran fence_lock in this transaction: these rows are locked (so their address,
  -- ctid, cannot change) and were running under this owner and token; owner and token are
  -- checked again, "running" is implied. finish_batch checks every locked row was written.
  WHERE s.ctid = h.ctid AND s.sample_id = h.sample_id AND s.fencing_token = h.token
    AND s.lease_owner = %(owner)s
    AND (h.acc_upstream_id IS NULL OR s.submission_state IN ('submitting', 'uncertain'))
  RETURNING s.sample_id, s.run_id, s.tenant_id, s.channel, s.platform, s.attempt_no,
            s.collection_state, h.outcome, h.error_class, h.error_detail, h.retry_after_ms,
            h.req_state, h.deep, h.shot, h.want_shot, h.acc_upstream_id, h.acc_resolved_by
), a AS (
  UPDATE geo.attempts a
  SET outcome = coalesce(s.outcome, a.outcome),
      finished_at = CASE WHEN s.outcome IS NOT NULL THEN now() ELSE a.finished_at END,
      error_class = coalesce(s.error_class, a.error_class),
      error_detail = coalesce(s.error_detail, a.error_detail),
      retry_after_ms = coalesce(s.retry_after_ms, a.retry_after_ms),
      deep_thinking_used = coalesce(s.deep, a.deep_thinking_used),
      screenshot_used = coalesce(s.shot, a.screenshot_used)
  FROM s WHERE a.sample_id = s.sample_id AND a.attempt_no = s.attempt_no
), r AS (
  UPDATE geo.upstream_requests u
  SET state = CASE WHEN s.acc_upstream_id IS NOT NULL THEN 'accepted' ELSE s.req_state END,
      upstream_id = coalesce(s.acc_upstream_id, u.upstream_id),
      accepted_at = CASE WHEN s.acc_upstream_id IS NOT NULL THEN now() ELSE u.accepted_at END,
      resolved_by = coalesce(s.acc_resolved_by, u.resolved_by, 'response')
  FROM s
  WHERE u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
    AND (s.acc_upstream_id IS NOT NULL OR (s.req_state IS NOT NULL AND u.state <> 'accepted'))
), o AS (
  INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
  SELECT %(completions_stream)s::text, 'completion', s.sample_id, s.run_id, s.tenant_id,
         jsonb_build_object('channel', s.channel, 'collection_state', s.collection_state)
  FROM s WHERE s.collection_state IN ('completed', 'failed')
  UNION ALL
  SELECT %(screenshot_prefix)s::text || s.platform, 'screenshot', s.sample_id, s.run_id, s.tenant_id,
         jsonb_build_object('attempt_no', s.attempt_no)
  FROM s WHERE s.want_shot AND s.collection_state = 'completed'
)
SELECT sample_id, collection_state FROM s;

-- name: outbox_batch
-- The relay's next unpublished rows, locked so two relays never publish the same batch at once.
SELECT outbox_id, stream, kind, sample_id, run_id, tenant_id, batch_no, channel, payload,
       created_at
FROM geo.outbox
WHERE published_at IS NULL
ORDER BY outbox_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: outbox_mark
UPDATE geo.outbox SET published_at = now() WHERE outbox_id = ANY(%(ids)s::bigint[]);

-- name: sweep_expired
-- Leases that ran out (the worker died or stalled past its lease): hand the sample back to the
-- queue and queue a hint, in one statement. The token is not touched here; the next claim
-- raises it, so the stalled worker's late writes are rejected (R11).
WITH x AS (
  SELECT sample_id FROM geo.samples
  WHERE collection_state = 'running' AND lease_until < now()
  ORDER BY lease_until LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
), s AS (
  UPDATE geo.samples s
  SET collection_state = 'queued', collection_reason = 'lease_expired',
      lease_owner = NULL, lease_until = NULL, next_attempt_at = now()
  FROM x WHERE s.sample_id = x.sample_id
  RETURNING s.sample_id, s.run_id, s.tenant_id, s.platform, s.priority
)
INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
SELECT %(collect_prefix)s::text || platform, 'collect', sample_id, run_id, tenant_id,
       jsonb_build_object('priority', priority, 'reason', 'lease_expired')
FROM s
RETURNING sample_id;

-- name: sweep_unhinted
-- Queued samples that are due but have no recent hint (Redis lost or trimmed it, or a retry
-- came due): queue a new hint. A lost message delays a sample, never loses it (section 4).
-- One hint per (run, channel, batch), like the planner's (migration 0010): a hint only wakes
-- a lane, which claims what is due and fair from PostgreSQL, so a 100,000-sample run whose
-- hints were lost gets ~2,000 outbox rows and stream entries, not 100,000. Returns how many
-- samples each new hint covers.
WITH g AS (
  SELECT s.run_id, s.tenant_id, s.batch_no, s.platform, s.channel,
         max(s.priority) AS priority, count(*) AS n, min(s.next_attempt_at) AS due
  FROM geo.samples s  -- never hint what may not be claimed (not dispatched, ...)
  CROSS JOIN LATERAL geo.claimable(s.run_id, s.channel, s.platform, s.submission_state,
                                   %(lookup_platforms)s::text[])
  WHERE s.collection_state = 'queued'
    AND s.next_attempt_at <= now() - make_interval(secs => %(grace_s)s)
    AND NOT EXISTS (SELECT 1 FROM geo.outbox o  -- a live hint of its own (lease expired, ...)
                    WHERE o.sample_id = s.sample_id AND o.kind = 'collect'
                      AND o.created_at > now() - make_interval(secs => %(hint_ttl_s)s))
  GROUP BY s.run_id, s.tenant_id, s.batch_no, s.platform, s.channel
)
INSERT INTO geo.outbox (stream, kind, run_id, tenant_id, batch_no, channel, payload)
SELECT %(collect_prefix)s::text || g.platform, 'collect', g.run_id, g.tenant_id, g.batch_no, g.channel,
       jsonb_build_object('priority', g.priority, 'samples', g.n, 'reason', 'sweep')
FROM g
WHERE NOT EXISTS (SELECT 1 FROM geo.outbox o  -- the live hint of its batch and channel
                   WHERE o.kind = 'collect' AND o.sample_id IS NULL AND o.run_id = g.run_id
                     AND o.channel = g.channel AND o.batch_no = g.batch_no
                     AND o.created_at > now() - make_interval(secs => %(hint_ttl_s)s))
ORDER BY g.due, g.run_id, g.batch_no, g.channel
LIMIT %(limit)s
RETURNING (payload ->> 'samples')::int AS n;

-- name: sweep_cancelled
-- The safety net behind the cancel: unsubmitted samples (queued, planned) of a cancelled run
-- fail with reason CANCELLED, each with its completion event, as cancel_unsubmitted does.
-- Claims never take them, so anything that puts a sample back to planned after the cancel (an
-- operator's "never accepted" verdict, a writer that does not decide cancellation itself)
-- would otherwise keep the run open and its reservation held forever. Only runs not closed
-- yet are read: such a sample keeps its run from closing, so this finds every one of them.
WITH x AS (
  SELECT s.sample_id
  FROM geo.runs r JOIN geo.samples s ON s.run_id = r.run_id
  WHERE r.cancel_requested_at IS NOT NULL AND r.closed_at IS NULL
    AND s.collection_state = 'queued' AND s.submission_state = 'planned'
  ORDER BY s.sample_id
  LIMIT %(limit)s
  FOR UPDATE OF s SKIP LOCKED
), s AS (
  UPDATE geo.samples s
  SET collection_state = 'failed', collection_reason = 'CANCELLED', completed_at = now()
  FROM x
  WHERE s.sample_id = x.sample_id
    AND s.collection_state = 'queued' AND s.submission_state = 'planned'
  RETURNING s.sample_id, s.run_id, s.tenant_id, s.channel
)
INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
SELECT %(completions_stream)s::text, 'completion', sample_id, run_id, tenant_id,
       jsonb_build_object('channel', channel, 'collection_state', 'failed')
FROM s
RETURNING sample_id;

-- name: set_late_evidence_states
-- set_late_evidence_state for a batch of late screenshots, in one statement (issue 33): each
-- completed sample's evidence layer and reason as recording decided them. A reason alone may
-- change (a pending screenshot the platform now says is unavailable, or one refused for its
-- size), so the sweeper stops asking for it and a person sees why.
UPDATE geo.samples s
SET evidence_state = u.state, evidence_reason = u.reason
FROM unnest(%(sample_ids)s::text[], %(states)s::text[], %(reasons)s::text[])
     AS u(sample_id, state, reason)
WHERE s.sample_id = u.sample_id AND s.collection_state = 'completed'
  AND (s.evidence_state IS DISTINCT FROM u.state OR s.evidence_reason IS DISTINCT FROM u.reason)
RETURNING s.sample_id;

-- name: sweep_screenshots
-- Required screenshots still pending a day at most after their sample completed, with no
-- screenshot hint for ttl seconds (Redis lost or trimmed it): queue a new hint. The screenshot
-- lane drops a hint for a sample it is already waiting on, and archiving is idempotent.
INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
SELECT %(screenshot_prefix)s::text || s.platform, 'screenshot', s.sample_id, s.run_id, s.tenant_id,
       jsonb_build_object('attempt_no', s.attempt_no, 'reason', 'sweep')
FROM geo.samples s
WHERE s.evidence_reason = 'SCREENSHOT_PENDING' AND s.evidence_state = 'partial'
  AND s.collection_state = 'completed'
  AND s.completed_at > now() - interval '1 day'
  AND s.completed_at < now() - make_interval(secs => %(ttl_s)s)
  AND NOT EXISTS (SELECT 1 FROM geo.outbox o
                  WHERE o.sample_id = s.sample_id AND o.kind = 'screenshot'
                    AND o.created_at > now() - make_interval(secs => %(ttl_s)s))
ORDER BY s.completed_at
LIMIT %(limit)s
RETURNING sample_id;

-- name: uncertain_count
SELECT count(*)::int AS n FROM geo.samples WHERE submission_state = 'uncertain';

-- name: record_dead_letter
INSERT INTO geo.dead_letters (stream, message_id, event_id, sample_id, deliveries, reason)
VALUES (%(stream)s, %(message_id)s, %(event_id)s, %(sample_id)s, %(deliveries)s, %(reason)s)
ON CONFLICT (stream, message_id) DO NOTHING;

-- name: cancel_run
-- Record the operator's intent to cancel (R16, R24): no new submissions from now on.
UPDATE geo.runs SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE run_id = %(run_id)s
RETURNING run_id, cancel_requested_at;

-- name: cancel_unsubmitted
-- Samples of a cancelled run that never reached upstream fail locally with reason CANCELLED,
-- each with its completion event. Accepted ones are followed to their end (never refunded here).
WITH s AS (
  UPDATE geo.samples s
  SET collection_state = 'failed', collection_reason = 'CANCELLED', completed_at = now()
  WHERE s.run_id = %(run_id)s AND s.collection_state = 'queued'
    AND s.submission_state = 'planned'
  RETURNING s.sample_id, s.run_id, s.tenant_id, s.channel
)
INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
SELECT %(completions_stream)s::text, 'completion', sample_id, run_id, tenant_id,
       jsonb_build_object('channel', channel, 'collection_state', 'failed')
FROM s
RETURNING sample_id;

-- name: submitting_of_run
-- Samples of a run whose request may be on its way (claimed for a new attempt, acceptance not
-- recorded yet): the cancel cannot say whether upstream has them. Their worker ends them
-- CANCELLED if the request turns out not accepted (finish), or follows the task if it was.
SELECT sample_id, platform, attempt_no, collection_state, lease_owner, lease_until
FROM geo.samples
WHERE run_id = %(run_id)s AND submission_state = 'submitting'
  AND collection_state IN ('queued', 'running')
ORDER BY sample_id;

-- name: accepted_of_run
-- Accepted, unfinished tasks of a run: what a cancel asks upstream to stop.
SELECT sample_id, platform, upstream_id FROM geo.samples
WHERE run_id = %(run_id)s AND submission_state = 'accepted'
  AND collection_state IN ('queued', 'running');

-- name: list_uncertain
-- Samples whose acceptance is unknown, with what was tried (R12).
SELECT s.sample_id, s.run_id, s.tenant_id, s.platform, s.attempt_no, s.submission_reason,
       u.idempotency_key, u.state AS request_state, u.sent_at, u.lookups, u.last_lookup_at
FROM geo.samples s
LEFT JOIN geo.upstream_requests u ON u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
WHERE s.submission_state = 'uncertain'
  AND (%(run_id)s::text IS NULL OR s.run_id = %(run_id)s)
ORDER BY u.sent_at NULLS LAST, s.sample_id
LIMIT %(limit)s;

-- name: resolve_accepted
-- Operator verdict "upstream accepted it, with this id": a guarded transition in the log; the
-- sample is queued again so a worker follows the task to its end.
WITH s AS (
  UPDATE geo.samples s
  SET submission_state = 'accepted', submission_reason = %(note)s,
      upstream_id = %(upstream_id)s, accepted_at = now(), next_attempt_at = now()
  WHERE s.sample_id = %(sample_id)s AND s.submission_state = 'uncertain'
    AND s.collection_state = 'queued'
  RETURNING s.sample_id, s.attempt_no, s.run_id, s.tenant_id, s.platform, s.priority
), r AS (
  UPDATE geo.upstream_requests u
  SET state = 'accepted', upstream_id = %(upstream_id)s, accepted_at = now(),
      resolved_by = %(actor)s
  FROM s WHERE u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
), a AS (
  UPDATE geo.attempts a SET outcome = 'accepted'
  FROM s WHERE a.sample_id = s.sample_id AND a.attempt_no = s.attempt_no
), o AS (
  INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
  SELECT %(collect_prefix)s::text || platform, 'collect', sample_id, run_id, tenant_id,
         jsonb_build_object('priority', priority, 'reason', 'operator')
  FROM s
)
SELECT sample_id FROM s;

-- name: resolve_not_accepted
-- Operator verdict "upstream never took it": the attempt is closed as not accepted and the
-- sample may start a new attempt (a new idempotency key, never a re-send of the old one).
WITH s AS (
  UPDATE geo.samples s
  SET submission_state = 'planned', submission_reason = %(note)s, next_attempt_at = now()
  WHERE s.sample_id = %(sample_id)s AND s.submission_state = 'uncertain'
    AND s.collection_state = 'queued'
  RETURNING s.sample_id, s.attempt_no, s.run_id, s.tenant_id, s.platform, s.priority
), r AS (
  UPDATE geo.upstream_requests u SET state = 'not_accepted', resolved_by = %(actor)s
  FROM s WHERE u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
), a AS (
  UPDATE geo.attempts a SET outcome = 'not_accepted', finished_at = now()
  FROM s WHERE a.sample_id = s.sample_id AND a.attempt_no = s.attempt_no
), o AS (
  INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
  SELECT %(collect_prefix)s::text || platform, 'collect', sample_id, run_id, tenant_id,
         jsonb_build_object('priority', priority, 'reason', 'operator')
  FROM s
)
SELECT sample_id FROM s;

-- name: review_decision
INSERT INTO geo.review_decisions (sample_id, subject, verdict, note, actor)
VALUES (%(sample_id)s, 'acceptance', %(verdict)s, %(note)s, %(actor)s);

-- name: sample_summary
-- One sample's ids and layers (the screenshot lane; operator messages).
SELECT s.sample_id, s.run_id, s.tenant_id, s.platform, s.upstream_id, s.attempt_no,
       s.submission_state, s.evidence_state, s.collection_state, s.screenshot_policy
FROM geo.samples s WHERE s.sample_id = %(sample_id)s;

-- name: set_late_evidence_state
-- A screenshot that arrived after the text moves the evidence layer (partial -> stored); the
-- collection result is never touched (R21). Guarded by the transition trigger like every move.
UPDATE geo.samples
SET evidence_state = %(state)s, evidence_reason = %(reason)s
WHERE sample_id = %(sample_id)s AND collection_state = 'completed'
  AND evidence_state IS DISTINCT FROM %(state)s
RETURNING sample_id;
