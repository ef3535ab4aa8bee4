-- name: layer_counts
-- The one place sample states are counted (R7), in one pass over the scope: a run, optionally one
-- channel and/or one question revision. One row per combination of states (a handful), with the
-- reasons that explain missing evidence and failures.
SELECT submission_state, collection_state, evidence_state, analysis_state,
       CASE WHEN evidence_state IN ('partial', 'failed')
            THEN coalesce(evidence_reason, 'UNSPECIFIED') END AS evidence_reason,
       CASE WHEN collection_state = 'failed'
            THEN coalesce(collection_reason, 'UNSPECIFIED') END AS failure_reason,
       count(*) AS n
FROM geo.samples
WHERE run_id = %(run_id)s
  AND (%(channel)s::text IS NULL OR (platform, device) = (split_part(%(channel)s, '__', 1),
                                                          split_part(%(channel)s, '__', 2)))
  AND (%(question_revision)s::text IS NULL OR question_revision = %(question_revision)s)
GROUP BY 1, 2, 3, 4, 5, 6;

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

-- name: question_counts
-- Per question revision of a run: counts by collection state (for question-level status).
SELECT question_revision, question_index, collection_state AS state, count(*) AS n
FROM geo.samples WHERE run_id = %(run_id)s
GROUP BY 1, 2, 3 ORDER BY question_index;
