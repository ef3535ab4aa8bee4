-- Question tags (issue 37): every analyst rate broken down by tag, with n and THE interval.
--
-- Tags live in the run's config snapshot (config->'question_tags': {question revision:
-- {topic, intent, persona, market}}, frozen like the questions, R2); a re-tag applies from the
-- next run on. analytics.question_tags unfolds them, one row per (run, question, tag).
CREATE VIEW analytics.question_tags WITH (security_invoker = true) AS
SELECT r.run_id, r.tenant_id, t.question_revision, kv.key AS tag, kv.value AS value
  FROM geo.runs r
  JOIN geo.config_snapshots s ON s.snapshot_id = r.snapshot_id
 CROSS JOIN LATERAL jsonb_each(coalesce(s.config -> 'question_tags', '{}'::jsonb))
       AS t(question_revision, tags)
 CROSS JOIN LATERAL jsonb_each_text(t.tags) AS kv(key, value);

-- Mention rate and citation rate of each brand per run x channel x tag value, from the per-
-- question rows of analytics.brand_metrics. The interval is the project's one: each question a
-- cluster, analytics.design_effect -> effective n, analytics.clustered_wilson_lower/upper
-- (as analytics.brand_trends and channel_brand_metrics; Wilson when one question). A tag value
-- that covers every question of a run therefore shows exactly channel_brand_metrics' numbers.
CREATE VIEW analytics.brand_rates_by_tag WITH (security_invoker = true) AS
WITH per_question AS (
  SELECT m.tenant_id, m.run_id, m.monitor_id, m.scheduled_for, m.channel, m.brand,
         bool_or(m.is_target) AS is_target, t.tag, t.value, m.question_revision,
         sum(m.n)::float8 AS m, sum(m.mentions)::float8 AS x, sum(m.domain_cited)::float8 AS c
    FROM analytics.brand_metrics m
    JOIN analytics.question_tags t
      ON t.run_id = m.run_id AND t.question_revision = m.question_revision
   GROUP BY m.tenant_id, m.run_id, m.monitor_id, m.scheduled_for, m.channel, m.brand, t.tag,
            t.value, m.question_revision
  HAVING sum(m.n) > 0
), agg AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, brand, bool_or(is_target) AS is_target,
         tag, value, count(*) AS k, sum(m) AS m,
         sum(x) AS x, sum(x * x) AS sxx, sum(x * m) AS sxm,
         sum(c) AS c, sum(c * c) AS scc, sum(c * m) AS scm, sum(m * m) AS smm
    FROM per_question
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, channel, brand, tag, value
), est AS (
  SELECT a.*, a.x / a.m AS rate, a.c / a.m AS crate,
         a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff,
         a.m / analytics.design_effect(a.k, a.c, a.m, a.scc, a.scm, a.smm) AS c_n_eff
    FROM agg a
)
SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, brand, is_target, tag, value,
       k::int AS questions, m::int AS n,
       x::int AS mentions, rate AS mention_rate, n_eff AS n_effective,
       analytics.clustered_wilson_lower(rate, n_eff, (k - 1)::int) AS mention_rate_lower,
       analytics.clustered_wilson_upper(rate, n_eff, (k - 1)::int) AS mention_rate_upper,
       c::int AS domain_cited, crate AS citation_rate, c_n_eff AS citation_n_effective,
       analytics.clustered_wilson_lower(crate, c_n_eff, (k - 1)::int) AS citation_rate_lower,
       analytics.clustered_wilson_upper(crate, c_n_eff, (k - 1)::int) AS citation_rate_upper,
       CASE WHEN k >= 2 THEN 'question-clustered, ' || k || ' questions'
            ELSE 'Wilson, 1 question' END AS interval_method
  FROM est;

ALTER VIEW analytics.question_tags OWNER TO geo_owner;
ALTER VIEW analytics.brand_rates_by_tag OWNER TO geo_owner;
GRANT SELECT ON analytics.question_tags, analytics.brand_rates_by_tag TO geo_service, geo_analyst;
