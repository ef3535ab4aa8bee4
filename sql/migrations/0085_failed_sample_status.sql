-- analytics.sample_status said mention_status 'analysing' for a sample whose collection failed
-- (its analysis layer stays 'pending': there is no answer to analyse), while the report, the CSV,
-- the JSON, brand_metrics.failed_samples (0068) and domain.words.evidence_status say it failed.
-- One word for it everywhere: 'failed'. An analyst waiting on 'analysing' waited for an analysis
-- that never comes. The columns are unchanged (the views built on this one stay).
CREATE OR REPLACE VIEW analytics.sample_status WITH (security_invoker = true) AS
SELECT s.sample_id, s.run_id, s.tenant_id, s.question_revision, s.question_index,
       s.platform, s.device, s.channel, s.region, s.mode, s.repeat_index, s.analysis_state,
       a.revision AS answer_revision, a.captured_at,
       a.validity AS validity_judged, a.validity_reason,
       vd.verdict AS validity_reviewed,
       coalesce(vd.verdict, a.validity) AS validity,
       CASE
         WHEN s.analysis_state = 'accepted' AND coalesce(vd.verdict, a.validity) = 'valid'
           THEN 'known'
         -- no answer stored, none to come (analysis_after_evidence keeps it 'pending')
         WHEN s.collection_state = 'failed' THEN 'failed'
         WHEN s.analysis_state = 'pending' THEN 'analysing'
         WHEN s.analysis_state = 'review' THEN 'in_review'
         ELSE 'excluded'
       END AS mention_status,
       ac.detector_version, ac.answer_revision AS analysed_revision,
       s.collection_state
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.captured_at, a1.validity, a1.validity_reason
                       FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
  LEFT JOIN geo.analysis_current ac ON ac.sample_id = s.sample_id;
