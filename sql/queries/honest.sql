-- Question-clustered intervals of the analyst tables (sql/migrations/0021_honest_numbers.sql),
-- filled by refresh_analytics right after its insert, in the same transaction.
-- Loaded as Q("honest.<name>").

-- name: refresh_channel
-- channel_brand_metrics pools questions (and their regions and modes): each question is one
-- cluster. Its per-question counts come from brand_metrics of the same refresh.
WITH per_q AS (
  SELECT run_id, channel, brand, question_revision,
         sum(n)::float8 AS m, sum(mentions)::float8 AS x, sum(domain_cited)::float8 AS c
    FROM analytics.brand_metrics
   WHERE (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
   GROUP BY run_id, channel, brand, question_revision
  HAVING sum(n) > 0
), agg AS (
  SELECT run_id, channel, brand, count(*) AS k, sum(m) AS m, sum(m * m) AS smm,
         sum(x) AS x, sum(x * x) AS sxx, sum(x * m) AS sxm,
         sum(c) AS c, sum(c * c) AS scc, sum(c * m) AS scm
    FROM per_q GROUP BY run_id, channel, brand
), est AS (
  SELECT a.*, a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff,
         a.m / analytics.design_effect(a.k, a.c, a.m, a.scc, a.scm, a.smm) AS c_eff
    FROM agg a
)
UPDATE analytics.channel_brand_metrics t
   SET questions = e.k::int,
       design_effect = e.m / e.n_eff,
       n_effective = e.n_eff,
       mention_rate_lower = analytics.clustered_wilson_lower(e.x / e.m, e.n_eff, (e.k - 1)::int),
       mention_rate_upper = analytics.clustered_wilson_upper(e.x / e.m, e.n_eff, (e.k - 1)::int),
       citation_design_effect = e.m / e.c_eff,
       citation_n_effective = e.c_eff,
       citation_rate_lower = analytics.clustered_wilson_lower(e.c / e.m, e.c_eff, (e.k - 1)::int),
       citation_rate_upper = analytics.clustered_wilson_upper(e.c / e.m, e.c_eff, (e.k - 1)::int)
  FROM est e
 WHERE t.run_id = e.run_id AND t.channel = e.channel AND t.brand = e.brand;

-- name: refresh_share_of_voice
-- share_of_answers_mentioning_any_brand = answers naming the brand / answers naming any tracked
-- brand, pooled over questions: a ratio estimator clustered by question, the same design effect
-- with the answers naming any brand as each question's denominator.
WITH st AS MATERIALIZED (
  SELECT v.sample_id, v.run_id, v.channel, v.region, v.mode, v.question_revision,
         v.detector_version, v.analysed_revision
    FROM analytics.sample_status v
   WHERE (%(run_id)s::text IS NULL OR v.run_id = %(run_id)s) AND v.mention_status = 'known'
), any_q AS (
  SELECT st.run_id, st.channel, st.region, st.mode, st.question_revision,
         count(*)::float8 AS a
    FROM st
   WHERE EXISTS (SELECT 1 FROM geo.mentions m
                  WHERE m.sample_id = st.sample_id AND m.detector_version = st.detector_version
                    AND m.answer_revision = st.analysed_revision AND m.mentioned)
   GROUP BY st.run_id, st.channel, st.region, st.mode, st.question_revision
), per_q AS (
  SELECT b.run_id, b.channel, b.region, b.mode, b.brand, b.question_revision,
         b.mentions::float8 AS x, q.a
    FROM analytics.brand_metrics b
    JOIN any_q q ON q.run_id = b.run_id AND q.channel = b.channel AND q.region = b.region
     AND q.mode = b.mode AND q.question_revision = b.question_revision
   WHERE (%(run_id)s::text IS NULL OR b.run_id = %(run_id)s)
), est AS (
  SELECT run_id, channel, region, mode, brand, count(*) AS k, sum(x) AS x, sum(a) AS a,
         analytics.design_effect(count(*), sum(x), sum(a), sum(x * x), sum(x * a), sum(a * a))
           AS deff
    FROM per_q GROUP BY run_id, channel, region, mode, brand
)
UPDATE analytics.share_of_voice t
   SET questions = e.k::int,
       share_design_effect = e.deff,
       share_n_effective = e.a / e.deff,
       share_of_answers_lower = analytics.clustered_wilson_lower(e.x / e.a, e.a / e.deff, (e.k - 1)::int),
       share_of_answers_upper = analytics.clustered_wilson_upper(e.x / e.a, e.a / e.deff, (e.k - 1)::int)
  FROM est e
 WHERE t.run_id = e.run_id AND t.channel = e.channel AND t.region = e.region
   AND t.mode = e.mode AND t.brand = e.brand;
