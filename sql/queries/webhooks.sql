-- Service callbacks (issue 31; migration 0037): one row per upstream task, however many times
-- the service delivered it.

-- name: record_delivery
-- A delivery of (platform, upstream_id): inserted the first time (first = true), counted after.
INSERT INTO geo.webhook_deliveries AS w (platform, upstream_id, idempotency_key, status)
VALUES (%(platform)s, %(upstream_id)s, %(idempotency_key)s, %(status)s)
ON CONFLICT (platform, upstream_id) DO UPDATE
  SET deliveries = w.deliveries + 1, last_received_at = now(), status = EXCLUDED.status
RETURNING (xmax = 0) AS first, deliveries;

-- name: set_outcome
UPDATE geo.webhook_deliveries SET outcome = %(outcome)s
WHERE platform = %(platform)s AND upstream_id = %(upstream_id)s;

-- name: sample_for_key
-- The sample an idempotency key (sample_id:attempt_no) names, if that attempt is its current one.
SELECT s.sample_id, s.attempt_no, s.platform, s.submission_state, s.collection_state,
       s.upstream_id
FROM geo.samples s
WHERE s.sample_id = %(sample_id)s AND s.attempt_no = %(attempt_no)s;

-- name: task_for_key
-- The upstream task a service's callback named for an idempotency key (cloro puts our key in
-- every task body): how a sample whose re-send met a 409 learns its task id.
SELECT upstream_id FROM geo.webhook_deliveries
WHERE platform = %(platform)s AND idempotency_key = %(idempotency_key)s
ORDER BY first_received_at DESC
LIMIT 1;

-- name: wake
-- Wake the worker following this task (geo_pipeline.worker.callbacks LISTENs): the payload is
-- '<protocol>:<upstream id>'; the worker then asks the service itself.
SELECT pg_notify('geo_callbacks', %(payload)s) AS woken;
