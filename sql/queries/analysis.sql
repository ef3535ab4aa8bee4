-- Brand analysis (issue 6): running the mention detector over stored answers, refreshing the
-- analyst tables, and the review queue. Loaded as Q("analysis.<name>").

-- name: set_actor
-- Names the analyser or operator in geo.state_transitions.actor for this transaction.
SELECT set_config('geo.actor', %(actor)s, true);

-- name: candidates
-- The next chunk of samples of a run to analyse (R6): evidence stored or partial, with an
-- answer, and either analysis pending or no result yet for this detector version and the
-- latest answer revision. Locked so that two analysers split the work instead of doubling it.
SELECT s.sample_id, s.analysis_state, a.revision AS answer_revision, a.raw_text,
       coalesce(vd.verdict, a.validity) AS validity, a.validity_reason
  FROM geo.samples s
  CROSS JOIN LATERAL (SELECT a1.revision, a1.raw_text, a1.validity, a1.validity_reason
                        FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                       ORDER BY a1.revision DESC LIMIT 1) a
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
 WHERE s.run_id = %(run_id)s
   AND (%(channel)s::text IS NULL OR s.channel = %(channel)s)
   AND s.evidence_state IN ('stored', 'partial')
   AND s.sample_id > %(after)s
   AND (s.analysis_state = 'pending'
        OR NOT EXISTS (SELECT 1 FROM geo.analysis_results r
                        WHERE r.sample_id = s.sample_id
                          AND r.detector_version = %(detector_version)s
                          AND r.answer_revision = a.revision))
 ORDER BY s.sample_id
 LIMIT %(limit)s
 FOR UPDATE OF s SKIP LOCKED;

-- name: citations_for
-- Citations of the given answer revisions (sample_ids[i] at revisions[i]).
SELECT c.sample_id, c.relation, c.registrable_domain, c.normalized_url
  FROM geo.citations c
  JOIN unnest(%(sample_ids)s::text[], %(revisions)s::int[]) AS k(sample_id, revision)
    ON c.sample_id = k.sample_id AND c.revision = k.revision
 ORDER BY c.sample_id, c.ordinal;

-- name: delete_results
-- Re-analysing the same answer revision with the same detector version replaces that result
-- (its mentions go by cascade); results of other versions and revisions stay as history.
DELETE FROM geo.analysis_results r
 USING unnest(%(sample_ids)s::text[], %(revisions)s::int[]) AS k(sample_id, revision)
 WHERE r.sample_id = k.sample_id AND r.answer_revision = k.revision
   AND r.detector_version = %(detector_version)s;

-- name: copy_results
COPY geo.analysis_results (sample_id, detector_version, answer_revision, state, reason)
FROM STDIN;

-- name: copy_mentions
COPY geo.mentions (sample_id, detector_version, answer_revision, brand, is_target, mentioned,
                   mention_count, first_offset, rank, first_block, position_bucket,
                   domain_cited, domain_retrieved, ambiguous)
FROM STDIN;

-- name: set_current
INSERT INTO geo.analysis_current (sample_id, detector_version, answer_revision)
SELECT * FROM unnest(%(sample_ids)s::text[], %(detector_version)s::text[], %(revisions)s::int[])
ON CONFLICT (sample_id) DO UPDATE
  SET detector_version = excluded.detector_version, answer_revision = excluded.answer_revision;

-- name: reopen
-- A sample analysed before (by an older detector, or of an older answer revision) goes back to
-- pending first: the guarded transitions allow accepted/review/failed -> pending -> new state.
UPDATE geo.samples SET analysis_state = 'pending', analysis_reason = %(reason)s
 WHERE sample_id = ANY(%(sample_ids)s::text[]) AND analysis_state <> 'pending';

-- name: conclude
-- The analysis verdict of each sample, only from pending (a concurrent writer cannot be
-- overwritten) and only after its evidence (the analysis_after_evidence constraint holds too).
UPDATE geo.samples s SET analysis_state = v.state, analysis_reason = v.reason
  FROM unnest(%(sample_ids)s::text[], %(states)s::text[], %(reasons)s::text[])
       AS v(sample_id, state, reason)
 WHERE s.sample_id = v.sample_id AND s.analysis_state = 'pending'
   AND s.evidence_state IN ('stored', 'partial');

-- name: waiting_counts
-- What analyse_run could not analyse yet, for its summary.
SELECT count(*) FILTER (WHERE s.evidence_state NOT IN ('stored', 'partial')) AS evidence_not_ready,
       count(*) FILTER (WHERE s.evidence_state IN ('stored', 'partial')
                          AND NOT EXISTS (SELECT 1 FROM geo.answers a
                                           WHERE a.sample_id = s.sample_id)) AS no_answer
  FROM geo.samples s
 WHERE s.run_id = %(run_id)s AND (%(channel)s::text IS NULL OR s.channel = %(channel)s)
   AND s.analysis_state = 'pending';

-- name: refresh_delete_brand_metrics
DELETE FROM analytics.brand_metrics WHERE (%(run_id)s::text IS NULL OR run_id = %(run_id)s);

-- name: refresh_delete_channel_brand_metrics
DELETE FROM analytics.channel_brand_metrics
 WHERE (%(run_id)s::text IS NULL OR run_id = %(run_id)s);

-- name: refresh_delete_share_of_voice
DELETE FROM analytics.share_of_voice WHERE (%(run_id)s::text IS NULL OR run_id = %(run_id)s);

-- name: refresh_insert_brand_tables
-- One statement fills brand_metrics, channel_brand_metrics and share_of_voice from one scan of
-- the run's sample x brand facts (data-modifying CTEs share the materialised `f`).
-- Rates count only answers whose mentions are known (valid, analysis accepted) and sit beside
-- their n; invalid, analysing and in-review answers are counted in their own columns.
WITH f AS MATERIALIZED (
  SELECT * FROM analytics.sample_brand_facts v
   WHERE (%(run_id)s::text IS NULL OR v.run_id = %(run_id)s)
), cell AS (
  SELECT f.run_id, f.tenant_id, f.monitor_id, f.scheduled_for, f.channel, f.platform, f.device,
         f.region, f.mode, f.question_revision, f.question_index, f.brand, f.is_target,
         count(*)::int AS samples,
         count(*) FILTER (WHERE f.validity = 'valid')::int AS valid_samples,
         count(*) FILTER (WHERE f.validity = 'invalid')::int AS invalid_samples,
         count(*) FILTER (WHERE f.mention_status = 'analysing'
                            AND f.validity IS DISTINCT FROM 'invalid')::int AS analysing_samples,
         count(*) FILTER (WHERE f.mention_status = 'in_review')::int AS review_samples,
         count(*) FILTER (WHERE f.mention_status = 'known')::int AS n,
         count(*) FILTER (WHERE f.mentioned)::int AS mentions,
         sum(f.rank) FILTER (WHERE f.mentioned) AS rank_sum,
         count(*) FILTER (WHERE f.domain_cited)::int AS cited,
         count(*) FILTER (WHERE f.domain_retrieved)::int AS retrieved
    FROM f
   GROUP BY f.run_id, f.tenant_id, f.monitor_id, f.scheduled_for, f.channel, f.platform,
            f.device, f.region, f.mode, f.question_revision, f.question_index, f.brand,
            f.is_target
), ins_cell AS (
  INSERT INTO analytics.brand_metrics
    (run_id, tenant_id, monitor_id, scheduled_for, channel, platform, device, region, mode,
     question_revision, question_index, brand, is_target, samples, valid_samples,
     invalid_samples, analysing_samples, review_samples, n, mentions, mention_rate,
     mention_rate_lower, mention_rate_upper, avg_rank, domain_cited, citation_rate,
     domain_retrieved)
  SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, device, region, mode,
         question_revision, question_index, brand, is_target, samples, valid_samples,
         invalid_samples, analysing_samples, review_samples, n, mentions,
         mentions::float8 / nullif(n, 0),
         analytics.wilson_lower(mentions, n), analytics.wilson_upper(mentions, n),
         rank_sum::float8 / nullif(mentions, 0),
         cited, cited::float8 / nullif(n, 0), retrieved
    FROM cell
  RETURNING 1
), chan AS (
  SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target,
         sum(samples)::int AS samples, sum(valid_samples)::int AS valid_samples,
         sum(invalid_samples)::int AS invalid_samples,
         sum(analysing_samples)::int AS analysing_samples,
         sum(review_samples)::int AS review_samples, sum(n)::int AS n,
         sum(mentions)::int AS mentions, sum(rank_sum) AS rank_sum, sum(cited)::int AS cited
    FROM cell
   GROUP BY run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target
), ins_chan AS (
  INSERT INTO analytics.channel_brand_metrics
    (run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target, samples,
     valid_samples, invalid_samples, analysing_samples, review_samples, n, mentions,
     mention_rate, mention_rate_lower, mention_rate_upper, avg_rank, domain_cited, citation_rate)
  SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target,
         samples, valid_samples, invalid_samples, analysing_samples, review_samples, n,
         mentions, mentions::float8 / nullif(n, 0),
         analytics.wilson_lower(mentions, n), analytics.wilson_upper(mentions, n),
         rank_sum::float8 / nullif(mentions, 0), cited, cited::float8 / nullif(n, 0)
    FROM chan
  RETURNING 1
), per_answer AS (
  SELECT sample_id, bool_or(mentioned) AS any_brand, sum(mention_count)::int AS all_mentions
    FROM f WHERE f.mention_status = 'known' GROUP BY sample_id
), sov AS (
  SELECT f.run_id, f.monitor_id, f.scheduled_for, f.channel, f.region, f.mode, f.brand,
         f.is_target,
         count(*)::int AS n,
         count(*) FILTER (WHERE f.mentioned)::int AS answers_mentioning_brand,
         count(*) FILTER (WHERE p.any_brand)::int AS answers_mentioning_any,
         sum(f.mention_count)::int AS brand_mentions,
         sum(p.all_mentions)::int AS all_tracked_mentions
    FROM f JOIN per_answer p ON p.sample_id = f.sample_id
   GROUP BY f.run_id, f.monitor_id, f.scheduled_for, f.channel, f.region, f.mode, f.brand,
            f.is_target
), ins_sov AS (
  INSERT INTO analytics.share_of_voice
    (run_id, monitor_id, scheduled_for, channel, region, mode, brand, is_target, n,
     answers_mentioning_brand, answers_mentioning_any_tracked_brand,
     share_of_answers_mentioning_any_brand, brand_mentions, all_tracked_mentions,
     share_of_all_tracked_mentions)
  SELECT run_id, monitor_id, scheduled_for, channel, region, mode, brand, is_target, n,
         answers_mentioning_brand, answers_mentioning_any,
         answers_mentioning_brand::float8 / nullif(answers_mentioning_any, 0),
         brand_mentions, all_tracked_mentions,
         brand_mentions::float8 / nullif(all_tracked_mentions, 0)
    FROM sov
  RETURNING 1
)
SELECT (SELECT count(*) FROM ins_cell) AS brand_metrics,
       (SELECT count(*) FROM ins_chan) AS channel_brand_metrics,
       (SELECT count(*) FROM ins_sov) AS share_of_voice;

-- name: refresh_delete_source_domains
DELETE FROM analytics.source_domains WHERE (%(run_id)s::text IS NULL OR run_id = %(run_id)s);

-- name: refresh_insert_source_domains
-- Citations of the latest revision of every valid answer, per engine (platform).
WITH va AS (
  SELECT f.sample_id, f.run_id, f.monitor_id, f.scheduled_for, f.platform, f.answer_revision
    FROM analytics.sample_facts f
   WHERE (%(run_id)s::text IS NULL OR f.run_id = %(run_id)s) AND f.validity = 'valid'
), tot AS (
  SELECT run_id, platform, count(*)::int AS valid_answers FROM va GROUP BY run_id, platform
)
INSERT INTO analytics.source_domains
  (run_id, monitor_id, scheduled_for, platform, registrable_domain, relation, citations,
   answers, valid_answers, answer_rate)
SELECT va.run_id, va.monitor_id, va.scheduled_for, va.platform, c.registrable_domain,
       c.relation, count(*)::int, count(DISTINCT va.sample_id)::int, tot.valid_answers,
       count(DISTINCT va.sample_id)::float8 / tot.valid_answers
  FROM va
  JOIN geo.citations c ON c.sample_id = va.sample_id AND c.revision = va.answer_revision
  JOIN tot ON tot.run_id = va.run_id AND tot.platform = va.platform
 WHERE c.registrable_domain IS NOT NULL
 GROUP BY va.run_id, va.monitor_id, va.scheduled_for, va.platform, c.registrable_domain,
          c.relation, tot.valid_answers;

-- name: review_queue
-- Every sample waiting for a person (issue 6 point 4): analysis in review; an answer kept raw
-- after a parse failure (R13); a validity verdict flagged as doubtful (truncated). One row per
-- sample and reason, with a pointer to its evidence. Parse failures and doubtful verdicts leave
-- the queue once a reviewer recorded a decision about them.
WITH latest AS (
  SELECT DISTINCT ON (a.sample_id) a.sample_id, a.revision, a.validity, a.validity_reason
    FROM geo.answers a JOIN geo.samples s USING (sample_id)
   WHERE (%(run_id)s::text IS NULL OR s.run_id = %(run_id)s)
   ORDER BY a.sample_id, a.revision DESC
), items AS (
  SELECT s.sample_id, 'analysis' AS subject, coalesce(s.analysis_reason, 'review') AS reason
    FROM geo.samples s
   WHERE (%(run_id)s::text IS NULL OR s.run_id = %(run_id)s) AND s.analysis_state = 'review'
  UNION ALL
  SELECT s.sample_id, 'parse_failure',
         concat_ws('; ', 'collection: ' || s.collection_reason,
                   'evidence: ' || s.evidence_reason, 'analysis: ' || s.analysis_reason)
    FROM geo.samples s
   WHERE (%(run_id)s::text IS NULL OR s.run_id = %(run_id)s)
     AND (s.collection_reason ILIKE '%%unparseable%%' OR s.evidence_reason ILIKE '%%unparseable%%'
          OR s.analysis_reason ILIKE '%%unparseable%%')
     AND s.analysis_state <> 'review'
     AND NOT EXISTS (SELECT 1 FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject IN ('parse_failure', 'validity'))
  UNION ALL
  SELECT l.sample_id, 'validity', 'doubtful validity: ' || l.validity_reason
    FROM latest l JOIN geo.samples s USING (sample_id)
   WHERE l.validity = 'invalid' AND l.validity_reason IN ('truncated')
     AND s.analysis_state <> 'review'
     AND NOT EXISTS (SELECT 1 FROM geo.review_decisions d
                      WHERE d.sample_id = l.sample_id AND d.subject = 'validity')
)
SELECT i.sample_id, s.run_id, s.channel, s.region, s.mode, s.question_index, s.repeat_index,
       i.subject, i.reason, s.collection_state, s.evidence_state, s.analysis_state,
       l.revision AS answer_revision, l.validity,
       (SELECT o.storage_key FROM geo.evidence_objects o
         WHERE o.sample_id = i.sample_id AND o.kind IN ('answer_raw', 'response_raw')
         ORDER BY o.revision DESC, o.kind LIMIT 1) AS evidence_key,
       s.updated_at
  FROM items i
  JOIN geo.samples s USING (sample_id)
  LEFT JOIN latest l USING (sample_id)
 ORDER BY s.updated_at, i.sample_id, i.subject
 LIMIT %(limit)s;

-- name: sample_for_review
SELECT s.sample_id, s.run_id, s.analysis_state, s.evidence_state, s.collection_reason,
       s.analysis_reason
  FROM geo.samples s WHERE s.sample_id = %(sample_id)s
   FOR UPDATE;

-- name: insert_decision
INSERT INTO geo.review_decisions (sample_id, subject, verdict, note, actor)
VALUES (%(sample_id)s, %(subject)s, %(verdict)s, %(note)s, %(actor)s)
RETURNING decision_id, decided_at;

-- name: resolve_analysis
-- A reviewer's verdict on an analysis in review: the guarded transition review -> accepted or
-- review -> failed, logged with the operator as actor (SET LOCAL geo.actor).
UPDATE geo.samples SET analysis_state = %(state)s, analysis_reason = %(reason)s
 WHERE sample_id = %(sample_id)s AND analysis_state = %(from_state)s
RETURNING sample_id, analysis_state;
