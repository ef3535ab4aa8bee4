-- What users see (issue 31, "done when" 4): scraped vs API apart, the fan-out, the citation
-- gap and UI-vs-API agreement, each computed once here and read by every report, export, the
-- Dagster metadata and analysts (docs/analysts.md, "Scraped vs API").
--
-- 1. How each platform of a run was collected, frozen when the run is created (R2): its
--    `access` (api | scraped | browser) and the `engine` it asks (chatgpt_cloro and
--    openai_responses_api both ask 'chatgpt'), from the connector registry of that moment.
CREATE TABLE geo.run_platforms (
  run_id      text NOT NULL REFERENCES geo.runs (run_id) ON DELETE CASCADE,
  tenant_id   text NOT NULL,
  platform    text NOT NULL,
  access      text NOT NULL CHECK (access IN ('api', 'scraped', 'browser')),
  engine      text NOT NULL CHECK (engine <> ''),
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, platform)
);
ALTER TABLE geo.run_platforms OWNER TO geo_owner;
GRANT SELECT, INSERT ON geo.run_platforms TO geo_service;
GRANT SELECT ON geo.run_platforms TO geo_analyst;
ALTER TABLE geo.run_platforms ENABLE ROW LEVEL SECURITY;
CREATE POLICY analyst_tenant ON geo.run_platforms FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));

-- 2. The search queries the engine ran for an answer (its fan-out), as the connector read
--    them, and whether it searched at all. NULL on revisions recorded before this migration
--    (unknown, never "did not search").
ALTER TABLE geo.answers ADD COLUMN search_queries text[], ADD COLUMN web_search_used boolean;

-- 3. One row per answer counted in n (valid, analysis accepted: mention_status 'known'), with
--    its channel's access and engine, whether it searched, its queries, and the monitored
--    brand's facts (from analytics.sample_brand_facts: one definition of "mentioned").
CREATE VIEW analytics.counted_answers WITH (security_invoker = true) AS
SELECT f.tenant_id, f.run_id, f.monitor_id, f.scheduled_for, f.channel, f.platform, f.device,
       f.region, f.mode, f.question_revision, f.question_index, f.repeat_index, f.sample_id,
       st.analysed_revision AS answer_revision,
       coalesce(p.access, 'unknown') AS access, coalesce(p.engine, f.platform) AS engine,
       a.web_search_used AS searched, a.search_queries,
       coalesce(cardinality(a.search_queries), 0) AS query_count,
       f.mentioned AS target_mentioned, f.rank AS target_rank
  FROM analytics.sample_brand_facts f
  JOIN analytics.sample_status st ON st.sample_id = f.sample_id
  JOIN geo.answers a ON a.sample_id = f.sample_id AND a.revision = st.analysed_revision
  LEFT JOIN geo.run_platforms p ON p.run_id = f.run_id AND p.platform = f.platform
 WHERE f.is_target AND f.mention_status = 'known';

-- 4. Fan-out per run x channel x question: answers (n), answers that searched, the queries
--    they ran (all, and distinct after trimming and case folding), and the brand's mentions
--    in answers that searched and in answers that did not.
CREATE VIEW analytics.fan_out WITH (security_invoker = true) AS
WITH per_question AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine,
         question_revision, min(question_index) AS question_index,
         count(*) AS answers,
         count(*) FILTER (WHERE searched) AS answers_searched,
         count(*) FILTER (WHERE searched IS NULL) AS answers_search_unknown,
         sum(query_count) AS queries,
         count(*) FILTER (WHERE searched AND target_mentioned) AS mentions_searched,
         count(*) FILTER (WHERE searched IS FALSE AND target_mentioned) AS mentions_not_searched,
         count(*) FILTER (WHERE searched IS FALSE) AS answers_not_searched
    FROM analytics.counted_answers
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine,
            question_revision
), distinct_q AS (
  SELECT k.run_id, k.channel, k.question_revision,
         count(DISTINCT lower(btrim(q.query))) AS distinct_queries
    FROM analytics.counted_answers k
   CROSS JOIN LATERAL unnest(k.search_queries) AS q(query)
   WHERE btrim(q.query) <> ''
   GROUP BY k.run_id, k.channel, k.question_revision
)
SELECT p.tenant_id, p.run_id, p.monitor_id, p.scheduled_for, p.channel, p.platform, p.access,
       p.engine, p.question_revision, p.question_index, p.answers::int AS answers,
       p.answers_searched::int AS answers_searched,
       p.answers_not_searched::int AS answers_not_searched,
       p.answers_search_unknown::int AS answers_search_unknown,
       p.answers_searched::float8 / p.answers AS share_searched,
       p.queries::int AS queries, coalesce(d.distinct_queries, 0)::int AS distinct_queries,
       p.mentions_searched::int AS mentions_searched,
       p.mentions_not_searched::int AS mentions_not_searched
  FROM per_question p
  LEFT JOIN distinct_q d
    ON d.run_id = p.run_id AND d.channel = p.channel AND d.question_revision = p.question_revision;

-- 5. Fan-out per run x channel: the questions pooled, with THE interval of this project on the
--    share of answers that searched (each question a cluster: analytics.design_effect, then
--    analytics.clustered_wilson_lower/upper; Wilson with one question), and the brand's
--    mention rate among answers that searched and among answers that did not (each with n).
CREATE VIEW analytics.fan_out_channels WITH (security_invoker = true) AS
WITH agg AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine,
         count(*) AS k, sum(answers)::float8 AS m, sum(answers_searched)::float8 AS x,
         sum(answers_searched::float8 * answers_searched) AS sxx,
         sum(answers_searched::float8 * answers) AS sxm,
         sum(answers::float8 * answers) AS smm,
         sum(answers_not_searched) AS answers_not_searched,
         sum(answers_search_unknown) AS answers_search_unknown,
         sum(queries) AS queries, sum(distinct_queries) AS distinct_queries,
         sum(mentions_searched) AS mentions_searched,
         sum(mentions_not_searched) AS mentions_not_searched
    FROM analytics.fan_out
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine
), est AS (
  SELECT a.*, a.x / a.m AS rate,
         a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff
    FROM agg a
)
SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine,
       k::int AS questions, m::int AS answers, x::int AS answers_searched,
       rate AS share_searched, n_eff AS share_searched_n_effective,
       analytics.clustered_wilson_lower(rate, n_eff, (k - 1)::int) AS share_searched_lower,
       analytics.clustered_wilson_upper(rate, n_eff, (k - 1)::int) AS share_searched_upper,
       CASE WHEN k >= 2 THEN 'question-clustered, ' || k || ' questions'
            ELSE 'Wilson, 1 question' END AS share_searched_interval,
       queries::int AS queries, distinct_queries::int AS distinct_queries,
       queries::float8 / m AS queries_per_answer,
       answers_not_searched::int AS answers_not_searched,
       answers_search_unknown::int AS answers_search_unknown,
       mentions_searched::int AS mentions_searched,
       CASE WHEN x > 0 THEN mentions_searched / x END AS mention_rate_searched,
       mentions_not_searched::int AS mentions_not_searched,
       CASE WHEN answers_not_searched > 0
            THEN mentions_not_searched::float8 / answers_not_searched END
         AS mention_rate_not_searched
  FROM est;

-- 6. Citation gap per run x channel x domain: a domain the channel's answers cite in answers
--    that name a competitor, and never in an answer that names the brand. n = the channel's
--    counted answers; the competitors named beside the citing answers; the questions asked.
CREATE VIEW analytics.citation_gap WITH (security_invoker = true) AS
WITH who AS (
  SELECT k.run_id, k.channel, k.sample_id, k.answer_revision, k.question_revision,
         bool_or(f.mentioned) FILTER (WHERE f.is_target) AS names_brand,
         bool_or(f.mentioned) FILTER (WHERE NOT f.is_target) AS names_competitor,
         array_agg(f.brand ORDER BY f.brand_order)
           FILTER (WHERE NOT f.is_target AND f.mentioned) AS competitors
    FROM analytics.counted_answers k
    JOIN analytics.sample_brand_facts f ON f.sample_id = k.sample_id
   GROUP BY k.run_id, k.channel, k.sample_id, k.answer_revision, k.question_revision
), channel_n AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine,
         count(*) AS n
    FROM analytics.counted_answers
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, channel, platform, access, engine
), cited AS (
  SELECT DISTINCT w.run_id, w.channel, w.sample_id, w.question_revision, w.names_brand,
         w.names_competitor, w.competitors, c.registrable_domain AS domain
    FROM who w
    JOIN geo.citations c ON c.sample_id = w.sample_id AND c.revision = w.answer_revision
   WHERE c.relation = 'cited' AND c.registrable_domain IS NOT NULL
), per_domain AS (
  SELECT run_id, channel, domain,
         count(*) FILTER (WHERE names_competitor) AS cited_with_competitor,
         count(*) FILTER (WHERE names_brand) AS cited_with_brand,
         count(DISTINCT question_revision) FILTER (WHERE names_competitor) AS questions
    FROM cited
   GROUP BY run_id, channel, domain
), named AS (
  SELECT c.run_id, c.channel, c.domain, array_agg(DISTINCT b.brand ORDER BY b.brand) AS competitors
    FROM cited c CROSS JOIN LATERAL unnest(c.competitors) AS b(brand)
   WHERE c.names_competitor
   GROUP BY c.run_id, c.channel, c.domain
)
SELECT n.tenant_id, n.run_id, n.monitor_id, n.scheduled_for, n.channel, n.platform, n.access,
       n.engine, d.domain, n.n::int AS n, d.cited_with_competitor::int AS cited_with_competitor,
       d.cited_with_competitor::float8 / n.n AS cited_with_competitor_share,
       d.questions::int AS questions, nm.competitors
  FROM per_domain d
  JOIN channel_n n ON n.run_id = d.run_id AND n.channel = d.channel
  LEFT JOIN named nm ON nm.run_id = d.run_id AND nm.channel = d.channel AND nm.domain = d.domain
 WHERE d.cited_with_competitor > 0 AND d.cited_with_brand = 0;

-- 7. UI-vs-API agreement per run x engine x (scraped or browser channel, API channel): over
--    every pair (an answer of the UI channel, an answer of the API channel) to the same
--    question, the share that agree on whether the brand is mentioned; and, over the pairs
--    where both mention it, the share that give it the same rank. Each question is a cluster
--    (its pairs are not independent): THE interval, as every rate of this schema.
CREATE VIEW analytics.ui_api_agreement WITH (security_invoker = true) AS
WITH side AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, engine, channel, access,
         question_revision, count(*) AS n, count(*) FILTER (WHERE target_mentioned) AS n1
    FROM analytics.counted_answers
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, engine, channel, access,
            question_revision
), ranks AS (
  SELECT run_id, channel, question_revision, target_rank, count(*) AS n
    FROM analytics.counted_answers
   WHERE target_mentioned AND target_rank IS NOT NULL
   GROUP BY run_id, channel, question_revision, target_rank
), per_q AS (
  SELECT u.tenant_id, u.run_id, u.monitor_id, u.scheduled_for, u.engine,
         u.channel AS ui_channel, u.access AS ui_access, a.channel AS api_channel,
         u.question_revision, u.n AS ui_answers, a.n AS api_answers,
         (u.n * a.n)::float8 AS m,
         (u.n1 * a.n1 + (u.n - u.n1) * (a.n - a.n1))::float8 AS x,
         (u.n1 * a.n1)::float8 AS rm,
         coalesce((SELECT sum(ru.n * ra.n) FROM ranks ru
                     JOIN ranks ra ON ra.target_rank = ru.target_rank
                    WHERE ru.run_id = u.run_id AND ru.channel = u.channel
                      AND ru.question_revision = u.question_revision
                      AND ra.run_id = a.run_id AND ra.channel = a.channel
                      AND ra.question_revision = a.question_revision), 0)::float8 AS rx
    FROM side u
    JOIN side a ON a.run_id = u.run_id AND a.engine = u.engine
               AND a.question_revision = u.question_revision AND a.access = 'api'
   WHERE u.access IN ('scraped', 'browser')
), agg AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, engine, ui_channel, ui_access,
         api_channel, count(*) AS k, sum(ui_answers) AS ui_answers,
         sum(api_answers) AS api_answers, sum(m) AS m, sum(x) AS x, sum(x * x) AS sxx,
         sum(x * m) AS sxm, sum(m * m) AS smm,
         count(*) FILTER (WHERE rm > 0) AS rk, sum(rm) AS rm, sum(rx) AS rx,
         sum(rx * rx) AS srxx, sum(rx * rm) AS srxm, sum(rm * rm) AS srmm
    FROM per_q
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, engine, ui_channel, ui_access,
            api_channel
), est AS (
  SELECT a.*, a.x / a.m AS rate,
         a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff,
         CASE WHEN a.rm > 0 THEN a.rx / a.rm END AS rrate,
         CASE WHEN a.rm > 0
              THEN a.rm / analytics.design_effect(a.rk, a.rx, a.rm, a.srxx, a.srxm, a.srmm)
         END AS r_n_eff
    FROM agg a
)
SELECT tenant_id, run_id, monitor_id, scheduled_for, engine, ui_channel, ui_access, api_channel,
       k::int AS questions, ui_answers::int AS ui_answers, api_answers::int AS api_answers,
       m::int AS pairs, x::int AS agreeing_pairs, rate AS agreement, n_eff AS n_effective,
       analytics.clustered_wilson_lower(rate, n_eff, (k - 1)::int) AS agreement_lower,
       analytics.clustered_wilson_upper(rate, n_eff, (k - 1)::int) AS agreement_upper,
       CASE WHEN k >= 2 THEN 'question-clustered, ' || k || ' questions'
            ELSE 'Wilson, 1 question' END AS agreement_interval,
       rk::int AS rank_questions, rm::int AS rank_pairs, rx::int AS rank_agreeing_pairs,
       rrate AS rank_agreement, r_n_eff AS rank_n_effective,
       analytics.clustered_wilson_lower(rrate, r_n_eff, (rk - 1)::int) AS rank_agreement_lower,
       analytics.clustered_wilson_upper(rrate, r_n_eff, (rk - 1)::int) AS rank_agreement_upper,
       CASE WHEN rk >= 2 THEN 'question-clustered, ' || rk || ' questions'
            WHEN rk = 1 THEN 'Wilson, 1 question' END AS rank_agreement_interval
  FROM est;

ALTER VIEW analytics.counted_answers OWNER TO geo_owner;
ALTER VIEW analytics.fan_out OWNER TO geo_owner;
ALTER VIEW analytics.fan_out_channels OWNER TO geo_owner;
ALTER VIEW analytics.citation_gap OWNER TO geo_owner;
ALTER VIEW analytics.ui_api_agreement OWNER TO geo_owner;
GRANT SELECT ON analytics.counted_answers, analytics.fan_out, analytics.fan_out_channels,
  analytics.citation_gap, analytics.ui_api_agreement TO geo_service, geo_analyst;
