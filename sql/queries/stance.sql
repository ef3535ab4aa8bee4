-- Stance per mention (issue 37 item 5; migration 0048). Written by geo_pipeline.analysis.run
-- beside the mention rows, and by geo_pipeline.analysis.stance for a new stance version.

-- name: copy
COPY geo.mention_stances (sample_id, detector_version, answer_revision, brand, stance_version,
                          stance, attributes)
FROM STDIN;

-- name: missing
-- Current analyses of a run with a mentioned brand but no stance of this stance version: the
-- answer text of the analysed revision and its mentioned brands.
SELECT ac.sample_id, ac.detector_version, ac.answer_revision, a.raw_text,
       q.text AS question, array_agg(m.brand ORDER BY m.brand) AS brands
  FROM geo.samples s
  JOIN geo.question_revisions q ON q.question_revision = s.question_revision
  JOIN geo.analysis_current ac ON ac.sample_id = s.sample_id
  JOIN geo.answers a ON a.sample_id = ac.sample_id AND a.revision = ac.answer_revision
  JOIN geo.mentions m
    ON m.sample_id = ac.sample_id AND m.detector_version = ac.detector_version
   AND m.answer_revision = ac.answer_revision AND m.mentioned
 WHERE s.run_id = %(run_id)s
   AND NOT EXISTS (SELECT 1 FROM geo.mention_stances ms
                    WHERE ms.sample_id = m.sample_id AND ms.detector_version = m.detector_version
                      AND ms.answer_revision = m.answer_revision AND ms.brand = m.brand
                      AND ms.stance_version = %(stance_version)s)
 GROUP BY ac.sample_id, ac.detector_version, ac.answer_revision, a.raw_text, q.text
 ORDER BY ac.sample_id;
