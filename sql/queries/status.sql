-- name: layer_counts
-- The one place sample states are counted (R7). Scope: a run, optionally one channel and/or
-- one question revision. One row per (layer, state) plus reason rows.
SELECT 'submission' AS layer, submission_state AS state, count(*) AS n FROM geo.samples
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
   AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
 GROUP BY 2
UNION ALL
SELECT 'collection', collection_state, count(*) FROM geo.samples
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
   AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
 GROUP BY 2
UNION ALL
SELECT 'evidence', evidence_state, count(*) FROM geo.samples
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
   AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
 GROUP BY 2
UNION ALL
SELECT 'analysis', analysis_state, count(*) FROM geo.samples
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
   AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
 GROUP BY 2
UNION ALL
SELECT 'evidence_reason', coalesce(evidence_reason, 'UNSPECIFIED'), count(*) FROM geo.samples
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
   AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
   AND evidence_state IN ('partial', 'failed')
 GROUP BY 2
UNION ALL
SELECT 'failure_reason', coalesce(collection_reason, 'UNSPECIFIED'), count(*) FROM geo.samples
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
   AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
   AND collection_state = 'failed'
 GROUP BY 2;

-- name: partition_keys
-- Every (run, channel) partition of a run with its sample count.
SELECT channel, count(*) AS n FROM geo.samples WHERE run_id = %(run_id)s GROUP BY channel ORDER BY channel;

-- name: terminal_partitions
-- Of the given (run, channel) pairs, those whose every sample is terminal in the collection layer.
SELECT s.run_id, s.channel
FROM geo.samples s
JOIN unnest(%(run_ids)s::text[], %(channels)s::text[]) AS p(run_id, channel)
  ON s.run_id = p.run_id AND s.channel = p.channel
GROUP BY s.run_id, s.channel
HAVING bool_and(s.collection_state IN ('completed', 'failed'));

-- name: question_counts
-- Per question revision of a run: counts by collection state (for question-level status).
SELECT question_revision, question_index, collection_state AS state, count(*) AS n
FROM geo.samples WHERE run_id = %(run_id)s
GROUP BY 1, 2, 3 ORDER BY question_index;
