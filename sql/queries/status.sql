-- name: layer_counts
-- The one place sample states are counted (R7), in one pass over the scope: a run, optionally one
-- channel and/or one question revision. One row per combination of states (a handful), with the
-- reasons that explain missing evidence and failures.
-- invalid_reason: the latest answer judged invalid (in no rate whatever the status), by reason.
SELECT s.submission_state, s.collection_state, s.evidence_state, s.analysis_state,
       -- a failed collection stored no answer: its evidence is failed for the collection's
       -- reason (domain.words.evidence_status reads it 'failed'; issue #34)
       CASE WHEN s.evidence_state IN ('partial', 'failed')
            THEN coalesce(s.evidence_reason, 'UNSPECIFIED')
            WHEN s.collection_state = 'failed'
            THEN coalesce(s.collection_reason, 'COLLECTION_FAILED') END AS evidence_reason,
       CASE WHEN s.collection_state = 'failed'
            THEN coalesce(s.collection_reason, 'UNSPECIFIED') END AS failure_reason,
       CASE WHEN a.validity = 'invalid'
            THEN coalesce(a.validity_reason, 'unspecified') END AS invalid_reason,
       count(*) AS n
FROM geo.samples s
LEFT JOIN LATERAL (
  SELECT validity, validity_reason FROM geo.answers
   WHERE sample_id = s.sample_id ORDER BY revision DESC LIMIT 1
) a ON s.collection_state = 'completed'
WHERE s.run_id = %(run_id)s
  AND (%(channel)s::text IS NULL OR (s.platform, s.device) = (split_part(%(channel)s, '__', 1),
                                                              split_part(%(channel)s, '__', 2)))
  AND (%(question_revision)s::text IS NULL OR s.question_revision = %(question_revision)s)
GROUP BY 1, 2, 3, 4, 5, 6, 7;

-- name: run_cancelled
-- Whether the operator asked to cancel the run (its status must say so, R7).
SELECT cancel_requested_at IS NOT NULL AS cancelled FROM geo.runs WHERE run_id = %(run_id)s;

-- name: partition_keys
-- Every (run, channel) partition of a run with its sample count.
SELECT channel, count(*) AS n FROM geo.samples WHERE run_id = %(run_id)s GROUP BY channel ORDER BY channel;

-- name: terminal_partitions
-- Of the given (run, channel) pairs, those whose every sample is terminal in the collection layer.
SELECT p.run_id, p.channel
FROM unnest(%(run_ids)s::text[], %(channels)s::text[]) AS p(run_id, channel)
JOIN geo.samples s
  ON s.run_id = p.run_id AND s.platform = split_part(p.channel, '__', 1)
 AND s.device = split_part(p.channel, '__', 2)
GROUP BY p.run_id, p.channel
HAVING bool_and(s.collection_state IN ('completed', 'failed'));

-- name: publication_states
-- Of the given (run, channel) pairs: how many samples, how many are terminal in the collection
-- layer, the others by exclusion reason (geo.exclusion_reason), and the run's publish deadline
-- with whether it has passed, by the database's clock. Publishable = every sample terminal, or
-- the deadline passed (decided in geo_pipeline.domain.states.Publication).
SELECT p.run_id, p.channel, d.publish_deadline_at AS deadline_at,
       now() >= d.publish_deadline_at AS deadline_passed,
       coalesce(sum(x.n), 0)::int AS samples,
       coalesce(sum(x.n) FILTER (WHERE x.reason IS NULL), 0)::int AS terminal,
       coalesce(jsonb_object_agg(x.reason, x.n) FILTER (WHERE x.reason IS NOT NULL), '{}'::jsonb)
         AS excluded_reasons
FROM unnest(%(run_ids)s::text[], %(channels)s::text[]) AS p(run_id, channel)
JOIN geo.run_publish_deadlines d ON d.run_id = p.run_id
LEFT JOIN LATERAL (
  SELECT geo.exclusion_reason(s.submission_state, s.collection_state, s.attempt_no) AS reason,
         count(*)::int AS n
  FROM geo.samples s
  WHERE s.run_id = p.run_id AND s.platform = split_part(p.channel, '__', 1)
    AND s.device = split_part(p.channel, '__', 2)
  GROUP BY 1) x ON true
GROUP BY p.run_id, p.channel, d.publish_deadline_at;

-- name: record_publication
-- Records one publication of a (run, channel) partition and, in the same statement (one
-- snapshot of the samples), every sample it excludes with its states and reason.
WITH s AS MATERIALIZED (
  SELECT s.sample_id, s.submission_state, s.collection_state, s.attempt_no,
         geo.exclusion_reason(s.submission_state, s.collection_state, s.attempt_no) AS reason
  FROM geo.samples s
  WHERE s.run_id = %(run_id)s AND s.platform = split_part(%(channel)s, '__', 1)
    AND s.device = split_part(%(channel)s, '__', 2)
), totals AS (
  SELECT count(*)::int AS samples, count(*) FILTER (WHERE reason IS NULL)::int AS included,
         count(*) FILTER (WHERE reason IS NOT NULL)::int AS excluded,
         coalesce((SELECT jsonb_object_agg(reason, n) FROM (
            SELECT reason, count(*)::int AS n FROM s WHERE reason IS NOT NULL GROUP BY reason) r),
          '{}'::jsonb) AS excluded_reasons
  FROM s
), pub AS (
  INSERT INTO geo.partition_publications (run_id, channel, dagster_run_id, basis, deadline_at,
                                          samples, included, excluded, excluded_reasons)
  SELECT %(run_id)s, %(channel)s, %(dagster_run_id)s,
         CASE WHEN t.excluded = 0 THEN 'complete' ELSE 'deadline' END,
         d.publish_deadline_at, t.samples, t.included, t.excluded, t.excluded_reasons
  FROM totals t JOIN geo.run_publish_deadlines d ON d.run_id = %(run_id)s
  RETURNING *
), ins AS (
  INSERT INTO geo.publication_exclusions (publication_id, sample_id, reason, submission_state,
                                          collection_state, attempt_no)
  SELECT pub.publication_id, s.sample_id, s.reason, s.submission_state, s.collection_state,
         s.attempt_no
  FROM s CROSS JOIN pub WHERE s.reason IS NOT NULL
  RETURNING 1
)
SELECT pub.publication_id, pub.run_id, pub.channel, pub.deadline_at,
       now() >= pub.deadline_at AS deadline_passed, pub.samples, pub.included AS terminal,
       pub.excluded_reasons, (SELECT count(*) FROM ins) AS exclusions_recorded
FROM pub;

-- name: deadline_crossed
-- Partitions of recent runs whose publish deadline fell after ``since`` (default: the start of
-- the window) and by now, with samples still open: no completion event announces them. One row
-- with the database's now(), the next call's ``since``.
SELECT now() AS checked_at,
       coalesce(array_agg(x.run_id ORDER BY x.run_id, x.channel), '{}') AS run_ids,
       coalesce(array_agg(x.channel ORDER BY x.run_id, x.channel), '{}') AS channels
FROM (SELECT DISTINCT s.run_id, s.channel
        FROM geo.run_publish_deadlines d
        JOIN geo.samples s ON s.run_id = d.run_id
       WHERE d.created_at >= now() - make_interval(days => %(days)s)
         AND d.publish_deadline_at > coalesce(%(since)s::timestamptz,
                                              now() - make_interval(days => %(days)s))
         AND d.publish_deadline_at <= now()
         AND s.collection_state IN ('queued', 'running')) x;

-- name: republish_due
-- Partitions of recent runs whose latest publication excluded samples of which some have become
-- terminal since: to be published again, even when their completion events were lost.
SELECT p.run_id, p.channel
FROM (SELECT DISTINCT ON (run_id, channel) run_id, channel, included, excluded
        FROM geo.partition_publications
       WHERE published_at >= now() - make_interval(days => %(days)s)
       ORDER BY run_id, channel, publication_id DESC) p
WHERE p.excluded > 0
  AND (SELECT count(*) FROM geo.samples s
        WHERE s.run_id = p.run_id AND s.platform = split_part(p.channel, '__', 1)
          AND s.device = split_part(p.channel, '__', 2)
          AND s.collection_state IN ('completed', 'failed')) > p.included
ORDER BY 1, 2;
