-- Brand analysis: running the mention detector over stored answers, refreshing the analyst
-- tables, and the review queue. Loaded as Q("analysis.<name>").

-- name: set_actor
-- Names the analyser or operator in geo.state_transitions.actor for this transaction.
SELECT set_config('geo.actor', %(actor)s, true);

-- name: tune
-- For this transaction: no JIT (compiling the refresh's plan cost more than running it: 9 s of
-- 17 s at 20,000 samples) and enough memory to aggregate in hash tables instead of sorting.
SELECT set_config('jit', 'off', true), set_config('work_mem', '128MB', true);

-- name: candidate_ids
-- Samples of a run to analyse (R6): evidence stored or partial, with an answer, and either
-- analysis pending or no result yet for this detector version and the latest answer revision.
-- One pass over the run; the chunks below lock and re-check their share of these ids.
SELECT s.sample_id
  FROM geo.samples s
  CROSS JOIN LATERAL (SELECT a1.revision FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                       ORDER BY a1.revision DESC LIMIT 1) a
 WHERE s.run_id = %(run_id)s
   AND (%(channel)s::text IS NULL OR s.channel = %(channel)s)
   AND s.evidence_state IN ('stored', 'partial')
   AND (s.analysis_state = 'pending'
        OR NOT EXISTS (SELECT 1 FROM geo.analysis_results r
                        WHERE r.sample_id = s.sample_id
                          AND r.detector_version = %(detector_version)s
                          AND r.answer_revision = a.revision))
 ORDER BY s.sample_id;

-- name: lock_chunk
-- One chunk of candidate_ids, locked so that two analysers split the work instead of doubling
-- it. Locking only: the re-check is the next statement (candidates), whose snapshot is taken
-- after these locks are held. Re-checking here would not do: a row another analyser concluded
-- and committed while this statement ran is re-checked by PostgreSQL against its new version,
-- but the NOT EXISTS over analysis_results still reads this statement's older snapshot, so the
-- finished sample would qualify again (CI saw 23 analyses of 20 samples).
SELECT s.sample_id
  FROM geo.samples s
 WHERE s.sample_id = ANY(%(sample_ids)s::text[])
 ORDER BY s.sample_id
 FOR UPDATE OF s SKIP LOCKED;

-- name: candidates
-- The chunk's locked samples that still need analysis, read after the locks were taken
-- (lock_chunk): another analyser may have finished some before this one locked them.
SELECT s.sample_id, s.analysis_state, a.revision AS answer_revision, a.raw_text,
       coalesce(vd.verdict, a.validity) AS validity, a.validity_reason,
       q.text AS question  -- its echo in the answer is not a mention (issue 34)
  FROM geo.samples s
  JOIN geo.question_revisions q ON q.question_revision = s.question_revision
  CROSS JOIN LATERAL (SELECT a1.revision, a1.raw_text, a1.validity, a1.validity_reason
                        FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                       ORDER BY a1.revision DESC LIMIT 1) a
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
 WHERE s.sample_id = ANY(%(sample_ids)s::text[])
   AND s.evidence_state IN ('stored', 'partial')
   AND (s.analysis_state = 'pending'
        OR NOT EXISTS (SELECT 1 FROM geo.analysis_results r
                        WHERE r.sample_id = s.sample_id
                          AND r.detector_version = %(detector_version)s
                          AND r.answer_revision = a.revision))
 ORDER BY s.sample_id;

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
-- The analysis verdict of each sample ({sample_id: [state, reason]}), only from pending (a
-- concurrent writer cannot be overwritten) and only after its evidence (the
-- analysis_after_evidence constraint holds too). The rows are found by primary key (= ANY) and
-- the verdict looked up per row: no join whose plan depends on fresh statistics (a join with
-- unnest() on a just-reopened run took minutes).
UPDATE geo.samples s
   SET analysis_state = p.v -> s.sample_id ->> 0, analysis_reason = p.v -> s.sample_id ->> 1
  FROM (SELECT %(verdicts)s::jsonb AS v) p
 WHERE s.sample_id = ANY(%(sample_ids)s::text[]) AND s.analysis_state = 'pending'
   AND s.evidence_state IN ('stored', 'partial');

-- name: analyze_tables
-- After a large analysis: fresh planner statistics for the refresh that follows.
ANALYZE geo.samples, geo.answers, geo.analysis_results, geo.analysis_current, geo.mentions;

-- name: waiting_counts
-- What analyse_run could not analyse yet, for its summary.
-- A sample whose collection failed has no answer to wait for: in neither count.
SELECT count(*) FILTER (WHERE s.evidence_state NOT IN ('stored', 'partial')
                          AND s.collection_state <> 'failed') AS evidence_not_ready,
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

-- name: refresh_insert_tables
-- One statement fills brand_metrics, channel_brand_metrics, share_of_voice and source_domains
-- (data-modifying CTEs over one computation of the run's sample_status). Work is proportional to samples + known mention rows: brand-independent counts come
-- from one row per sample (analytics.sample_status), mention counts from geo.mentions of the
-- samples whose mentions are known. Rates count only those answers (valid, analysis accepted)
-- and sit beside their n; invalid, analysing and in-review answers have their own columns.
WITH st AS MATERIALIZED (
  SELECT v.sample_id, v.run_id, v.tenant_id, v.channel, v.platform, v.device, v.region, v.mode,
         v.question_revision, v.question_index, v.validity, v.mention_status,
         v.detector_version, v.analysed_revision, v.answer_revision, v.collection_state
    FROM analytics.sample_status v
   WHERE (%(run_id)s::text IS NULL OR v.run_id = %(run_id)s)
), cell AS (
  SELECT run_id, tenant_id, channel, platform, device, region, mode, question_revision,
         question_index,
         count(*)::int AS samples,
         count(*) FILTER (WHERE validity = 'valid')::int AS valid_samples,
         count(*) FILTER (WHERE validity = 'invalid')::int AS invalid_samples,
         -- a failed collection stored no answer: the view says 'failed', not 'analysing'
         -- (issue #34)
         count(*) FILTER (WHERE mention_status = 'analysing'
                            AND validity IS DISTINCT FROM 'invalid')::int AS analysing_samples,
         count(*) FILTER (WHERE mention_status = 'failed'
                            AND validity IS DISTINCT FROM 'invalid')::int AS failed_samples,
         -- an invalid answer a person is to confirm is counted once: as invalid (issue #34)
         count(*) FILTER (WHERE mention_status = 'in_review'
                            AND validity IS DISTINCT FROM 'invalid')::int AS review_samples,
         count(*) FILTER (WHERE collection_state IN ('queued', 'running'))::int
           AS collecting_samples,
         count(*) FILTER (WHERE mention_status = 'known')::int AS n
    FROM st
   GROUP BY run_id, tenant_id, channel, platform, device, region, mode, question_revision,
            question_index
), km AS MATERIALIZED (
  SELECT st.run_id, st.channel, st.region, st.mode, st.question_revision, st.sample_id,
         m.brand, m.mentioned, m.mention_count, m.rank, m.domain_cited, m.domain_retrieved
    FROM st
    JOIN geo.mentions m ON m.sample_id = st.sample_id
     AND m.detector_version = st.detector_version AND m.answer_revision = st.analysed_revision
   WHERE st.mention_status = 'known'
     -- A brand neither mentioned nor cited adds nothing to any sum below; n comes from cell.
     AND (m.mentioned OR m.domain_cited OR m.domain_retrieved)
), cell_brand AS (
  -- Cell counts x tracked brands, and the known mention rows, summed by one GROUP BY over a
  -- UNION ALL: no join between aggregates whose row estimates the planner cannot know (a
  -- misestimated join here cost minutes on a 100,000-sample run).
  SELECT u.run_id, u.channel, u.region, u.mode, u.question_revision, u.brand,
         max(u.tenant_id) AS tenant_id, max(u.platform) AS platform, max(u.device) AS device,
         max(u.question_index) AS question_index, bool_or(u.is_target) AS is_target,
         sum(u.samples)::int AS samples, sum(u.valid_samples)::int AS valid_samples,
         sum(u.invalid_samples)::int AS invalid_samples,
         sum(u.analysing_samples)::int AS analysing_samples,
         sum(u.collecting_samples)::int AS collecting_samples,
         sum(u.failed_samples)::int AS failed_samples,
         sum(u.review_samples)::int AS review_samples, sum(u.n)::int AS n,
         count(*) FILTER (WHERE u.mentioned)::int AS mentions,
         sum(u.rank) FILTER (WHERE u.mentioned) AS rank_sum,
         count(*) FILTER (WHERE u.domain_cited)::int AS cited,
         count(*) FILTER (WHERE u.domain_retrieved)::int AS retrieved
    FROM (SELECT c.run_id, c.channel, c.region, c.mode, c.question_revision, b.brand,
                 c.tenant_id, c.platform, c.device, c.question_index, b.is_target,
                 c.samples, c.valid_samples, c.invalid_samples, c.analysing_samples,
                 c.collecting_samples, c.failed_samples, c.review_samples, c.n,
                 NULL::boolean AS mentioned,
                 NULL::int AS rank,
                 NULL::boolean AS domain_cited, NULL::boolean AS domain_retrieved
            FROM cell c JOIN analytics.run_brands b ON b.run_id = c.run_id
          UNION ALL
          SELECT km.run_id, km.channel, km.region, km.mode, km.question_revision, km.brand,
                 NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0,
                 km.mentioned, km.rank, km.domain_cited, km.domain_retrieved
            FROM km) u
   GROUP BY u.run_id, u.channel, u.region, u.mode, u.question_revision, u.brand
  HAVING bool_or(u.is_target) IS NOT NULL
), metrics AS MATERIALIZED (
  SELECT cb.*, r.monitor_id, r.scheduled_for
    FROM cell_brand cb JOIN geo.runs r ON r.run_id = cb.run_id
), ins_cell AS (
  INSERT INTO analytics.brand_metrics
    (run_id, tenant_id, monitor_id, scheduled_for, channel, platform, device, region, mode,
     question_revision, question_index, brand, is_target, samples, valid_samples,
     invalid_samples, analysing_samples, collecting_samples, failed_samples, review_samples, n,
     mentions, mention_rate, mention_rate_lower, mention_rate_upper, avg_rank, domain_cited,
     citation_rate, domain_retrieved)
  SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, device, region, mode,
         question_revision, question_index, brand, is_target, samples, valid_samples,
         invalid_samples, analysing_samples, collecting_samples, failed_samples, review_samples,
         n, mentions,
         mentions::float8 / nullif(n, 0),
         analytics.wilson_lower(mentions, n), analytics.wilson_upper(mentions, n),
         rank_sum::float8 / nullif(mentions, 0),
         cited, cited::float8 / nullif(n, 0), retrieved
    FROM metrics
  RETURNING 1
), chan AS (
  SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target,
         sum(samples)::int AS samples, sum(valid_samples)::int AS valid_samples,
         sum(invalid_samples)::int AS invalid_samples,
         sum(analysing_samples)::int AS analysing_samples,
         sum(collecting_samples)::int AS collecting_samples,
         sum(failed_samples)::int AS failed_samples,
         sum(review_samples)::int AS review_samples, sum(n)::int AS n,
         sum(mentions)::int AS mentions, sum(rank_sum) AS rank_sum, sum(cited)::int AS cited
    FROM metrics
   GROUP BY run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target
), ins_chan AS (
  INSERT INTO analytics.channel_brand_metrics
    (run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target, samples,
     valid_samples, invalid_samples, analysing_samples, collecting_samples, failed_samples,
     review_samples, n,
     -- the interval analysts read, mention_rate_lower/upper, is set by honest.refresh_channel
     mentions, mention_rate, mention_rate_wilson_lower, mention_rate_wilson_upper, avg_rank,
     domain_cited,
     citation_rate)
  SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand, is_target,
         samples, valid_samples, invalid_samples, analysing_samples, collecting_samples,
         failed_samples, review_samples, n,
         mentions, mentions::float8 / nullif(n, 0),
         analytics.wilson_lower(mentions, n), analytics.wilson_upper(mentions, n),
         rank_sum::float8 / nullif(mentions, 0), cited, cited::float8 / nullif(n, 0)
    FROM chan
  RETURNING 1
), per_answer AS (
  SELECT run_id, channel, region, mode, sample_id, bool_or(mentioned) AS any_brand,
         sum(mention_count)::int AS all_mentions
    FROM km GROUP BY run_id, channel, region, mode, sample_id
), sov_any AS (
  SELECT run_id, channel, region, mode,
         count(*) FILTER (WHERE any_brand)::int AS answers_any,
         sum(all_mentions)::int AS all_mentions
    FROM per_answer GROUP BY run_id, channel, region, mode
), sov_cell AS (
  -- Every join below is at the cell grain (a few rows per run x channel), never per sample,
  -- so a stale row estimate cannot turn it into a slow nested loop.
  SELECT c.run_id, c.channel, c.region, c.mode, sum(c.n)::int AS n,
         coalesce(max(sa.answers_any), 0) AS answers_any,
         coalesce(max(sa.all_mentions), 0) AS all_mentions
    FROM cell c
    LEFT JOIN sov_any sa ON sa.run_id = c.run_id AND sa.channel = c.channel
         AND sa.region = c.region AND sa.mode = c.mode
   GROUP BY c.run_id, c.channel, c.region, c.mode
  HAVING sum(c.n) > 0
), sov AS (
  -- The same UNION ALL shape as cell_brand, at the run x channel x region x mode grain.
  SELECT u.run_id, u.channel, u.region, u.mode, u.brand, bool_or(u.is_target) AS is_target,
         max(u.n) AS n, max(u.answers_any) AS answers_any, max(u.all_mentions) AS all_mentions,
         count(*) FILTER (WHERE u.mentioned)::int AS answers_brand,
         coalesce(sum(u.mention_count), 0)::int AS brand_mentions
    FROM (SELECT sc.run_id, sc.channel, sc.region, sc.mode, b.brand, b.is_target, sc.n,
                 sc.answers_any, sc.all_mentions, NULL::boolean AS mentioned,
                 NULL::int AS mention_count
            FROM sov_cell sc JOIN analytics.run_brands b ON b.run_id = sc.run_id
          UNION ALL
          SELECT km.run_id, km.channel, km.region, km.mode, km.brand, NULL, NULL, NULL, NULL,
                 km.mentioned, km.mention_count
            FROM km) u
   GROUP BY u.run_id, u.channel, u.region, u.mode, u.brand
  HAVING max(u.n) > 0 AND bool_or(u.is_target) IS NOT NULL
), ins_sov AS (
  INSERT INTO analytics.share_of_voice
    (run_id, monitor_id, scheduled_for, channel, region, mode, brand, is_target, n,
     answers_mentioning_brand, answers_mentioning_any_tracked_brand,
     share_of_answers_mentioning_any_brand, brand_mentions, all_tracked_mentions,
     share_of_all_tracked_mentions)
  SELECT v.run_id, r.monitor_id, r.scheduled_for, v.channel, v.region, v.mode, v.brand,
         v.is_target, v.n, v.answers_brand, v.answers_any,
         v.answers_brand::float8 / nullif(v.answers_any, 0),
         v.brand_mentions, v.all_mentions,
         v.brand_mentions::float8 / nullif(v.all_mentions, 0)
    FROM sov v JOIN geo.runs r ON r.run_id = v.run_id
  RETURNING 1
), va AS (
  -- Source domains: citations of the latest revision of every valid answer, per engine.
  SELECT sample_id, run_id, platform, answer_revision FROM st WHERE validity = 'valid'
), va_total AS (
  SELECT run_id, platform, count(*)::int AS valid_answers FROM va GROUP BY run_id, platform
), dom AS (
  SELECT va.run_id, va.platform, c.registrable_domain, c.relation, count(*)::int AS citations,
         count(DISTINCT va.sample_id)::int AS answers
    FROM va
    JOIN geo.citations c ON c.sample_id = va.sample_id AND c.revision = va.answer_revision
   WHERE c.registrable_domain IS NOT NULL
   GROUP BY va.run_id, va.platform, c.registrable_domain, c.relation
), ins_dom AS (
  INSERT INTO analytics.source_domains
    (run_id, monitor_id, scheduled_for, platform, registrable_domain, relation, citations,
     answers, valid_answers, answer_rate)
  SELECT dom.run_id, r.monitor_id, r.scheduled_for, dom.platform, dom.registrable_domain,
         dom.relation, dom.citations, dom.answers, t.valid_answers,
         dom.answers::float8 / t.valid_answers
    FROM dom
    JOIN va_total t ON t.run_id = dom.run_id AND t.platform = dom.platform
    JOIN geo.runs r ON r.run_id = dom.run_id
  RETURNING 1
)
SELECT (SELECT count(*) FROM ins_cell) AS brand_metrics,
       (SELECT count(*) FROM ins_chan) AS channel_brand_metrics,
       (SELECT count(*) FROM ins_sov) AS share_of_voice,
       (SELECT count(*) FROM ins_dom) AS source_domains;

-- name: refresh_delete_source_domains
DELETE FROM analytics.source_domains WHERE (%(run_id)s::text IS NULL OR run_id = %(run_id)s);

-- name: review_queue
-- Every sample waiting for a person: analysis in review; an answer kept raw
-- after a parse failure (R13); a validity verdict flagged as doubtful (truncated); evidence
-- refused for its size. One row per
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
  UNION ALL
  -- Evidence refused for its size (issue 33, GEO_EVIDENCE_RECORD_MAX_BYTES): an answer
  -- collected with nothing of it stored (failed), or a screenshot refused with the answer or
  -- later (partial, or stored where the policy did not need it); the reason names the record,
  -- its size and the cap.
  SELECT s.sample_id, 'evidence_too_large', 'evidence: ' || s.evidence_reason
    FROM geo.samples s
   WHERE (%(run_id)s::text IS NULL OR s.run_id = %(run_id)s)
     AND s.evidence_reason LIKE '%%RECORD_TOO_LARGE%%'
     AND NOT EXISTS (SELECT 1 FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity')
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

-- name: refresh_brand_rollup
-- After a run's rows were rewritten: the stored trends and changes of the days its day can
-- change (analytics.refresh_brand_rollup, sql/migrations/0049_brand_rollup.sql; the run's day,
-- the 13 after it and each channel x brand's next day with data). With no run: every monitor's
-- rows from scratch. A run outside a monitor changes none.
SELECT CASE WHEN %(run_id)s::text IS NULL THEN analytics.rebuild_brand_rollup()
            ELSE (SELECT coalesce(sum(analytics.refresh_brand_rollup(r.monitor_id,
                                                                      r.scheduled_for)), 0)
                    FROM geo.runs r WHERE r.run_id = %(run_id)s) END::int AS rows;
