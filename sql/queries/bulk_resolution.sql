-- Bulk resolution of a run's uncertain samples (issue 37): an operator's policy applied to every
-- sample of the run whose upstream acceptance is unknown (R12), each a guarded transition in the
-- log (the actor named by execution.set_actor) and a review decision saying who and why.
-- The acceptance record (geo.upstream_requests) keeps state 'uncertain': what upstream did stays
-- unknown, and is never written down as a fact; the attempt ends 'abandoned'.

-- name: uncertain_of_run
SELECT s.sample_id, s.platform, s.channel, s.attempt_no, s.submission_reason,
       u.idempotency_key, u.sent_at, u.lookups
FROM geo.samples s
LEFT JOIN geo.upstream_requests u ON u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
WHERE s.run_id = %(run_id)s AND s.submission_state = 'uncertain' AND s.collection_state = 'queued'
ORDER BY s.sample_id;

-- name: resubmit
-- Policy accept-possible-second-charge: the sample starts a new attempt under a new idempotency
-- key (never a re-send of the old one); if upstream did take the first, it may charge twice,
-- which reconciliation then shows against the statement.
WITH s AS (
  UPDATE geo.samples s
  SET submission_state = 'planned', submission_reason = %(note)s, next_attempt_at = now()
  WHERE s.sample_id = ANY(%(sample_ids)s) AND s.run_id = %(run_id)s
    AND s.submission_state = 'uncertain' AND s.collection_state = 'queued'
  RETURNING s.sample_id, s.attempt_no, s.run_id, s.tenant_id, s.platform, s.priority
), a AS (
  UPDATE geo.attempts a SET outcome = 'abandoned', finished_at = now()
  FROM s WHERE a.sample_id = s.sample_id AND a.attempt_no = s.attempt_no
), r AS (
  UPDATE geo.upstream_requests u SET resolved_by = %(actor)s
  FROM s WHERE u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
), o AS (
  INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
  SELECT %(collect_prefix)s::text || platform, 'collect', sample_id, run_id, tenant_id,
         jsonb_build_object('priority', priority, 'reason', 'operator')
  FROM s
)
SELECT sample_id FROM s;

-- name: give_up
-- Policy give-up: the sample ends failed (UNCERTAIN_GIVEN_UP), with its completion event so the
-- partition can publish; nothing is re-sent.
WITH s AS (
  UPDATE geo.samples s
  SET submission_state = 'planned', submission_reason = %(note)s,
      collection_state = 'failed', collection_reason = 'UNCERTAIN_GIVEN_UP', completed_at = now()
  WHERE s.sample_id = ANY(%(sample_ids)s) AND s.run_id = %(run_id)s
    AND s.submission_state = 'uncertain' AND s.collection_state = 'queued'
  RETURNING s.sample_id, s.attempt_no, s.run_id, s.tenant_id, s.channel
), a AS (
  UPDATE geo.attempts a SET outcome = 'abandoned', finished_at = now()
  FROM s WHERE a.sample_id = s.sample_id AND a.attempt_no = s.attempt_no
), r AS (
  UPDATE geo.upstream_requests u SET resolved_by = %(actor)s
  FROM s WHERE u.sample_id = s.sample_id AND u.attempt_no = s.attempt_no
), o AS (
  INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload)
  SELECT %(completions_stream)s::text, 'completion', sample_id, run_id, tenant_id,
         jsonb_build_object('channel', channel, 'collection_state', 'failed')
  FROM s
)
SELECT sample_id FROM s;

-- name: decisions
-- One review decision per resolved sample: who, which policy, why.
INSERT INTO geo.review_decisions (sample_id, subject, verdict, note, actor)
SELECT unnest(%(sample_ids)s::text[]), 'acceptance', %(verdict)s, %(note)s, %(actor)s;
