-- One truth for every number (issue #34).
--
-- One change-flag rule: analytics.brand_changes (each question one cluster, Benjamini-Hochberg
-- across the day's brand x channel family). analytics.brand_day_over_day flagged a change when
-- the plain two-proportion z on the raw n passed 1.96 -- every test on its own at 5 %, so with a
-- dozen brand x channel tests a day a false "significant" change most weeks -- and its column
-- `significant` read like the answer. It is dropped so it cannot be mistaken; the alert sensor and
-- the analyst doc read analytics.brand_changes (`flagged`, `q_value`).
DROP VIEW analytics.brand_day_over_day;

-- One mention-rate interval for analysts. In analytics.channel_brand_metrics the columns
-- mention_rate_lower/upper held the plain Wilson interval (answers as independent) while the
-- same names in analytics.brand_trends held the question-clustered one. Now the same name means
-- the same thing everywhere: mention_rate_lower/upper is THE interval (clustered by question
-- wherever more than one question is pooled; with one question it is Wilson, the two coincide),
-- the plain Wilson bounds are named as such, and mention_rate_interval says which method a row's
-- interval used (n_effective beside it). Renaming keeps the stored values and the column grants.
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_lower TO mention_rate_wilson_lower;
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_upper TO mention_rate_wilson_upper;
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_cluster_lower TO mention_rate_lower;
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_cluster_upper TO mention_rate_upper;
ALTER TABLE analytics.channel_brand_metrics
  ADD COLUMN mention_rate_interval text GENERATED ALWAYS AS (
    CASE WHEN questions IS NULL THEN NULL
         WHEN questions >= 2 THEN 'question-clustered, ' || questions || ' questions'
         ELSE 'Wilson, 1 question' END) STORED;

-- analytics.brand_trends names the method of its interval too, with the same words (a column
-- appended; the view is otherwise as 0021 made it). CREATE OR REPLACE replaces the view's
-- options, so security_invoker (0021: the tables' row-level security applies to analysts) is
-- stated again here.
CREATE OR REPLACE VIEW analytics.brand_trends WITH (security_invoker = true) AS
WITH win AS (
  SELECT d.tenant_id, d.monitor_id, d.channel, d.brand, d.scheduled_for, w.window_days,
         q.question_revision, sum(q.n)::float8 AS m, sum(q.mentions)::float8 AS x
    FROM (SELECT DISTINCT tenant_id, monitor_id, channel, brand, scheduled_for
            FROM analytics.brand_question_days) d
    CROSS JOIN (VALUES (1), (7)) AS w(window_days)
    JOIN analytics.brand_question_days q
      ON q.monitor_id = d.monitor_id AND q.channel = d.channel AND q.brand = d.brand
     AND q.scheduled_for BETWEEN d.scheduled_for - (w.window_days - 1) AND d.scheduled_for
   GROUP BY d.tenant_id, d.monitor_id, d.channel, d.brand, d.scheduled_for, w.window_days,
            q.question_revision
  HAVING sum(q.n) > 0
), agg AS (
  SELECT tenant_id, monitor_id, channel, brand, scheduled_for, window_days,
         count(*) AS k, sum(x) AS x, sum(m) AS m, sum(x * x) AS sxx, sum(x * m) AS sxm,
         sum(m * m) AS smm
    FROM win
   GROUP BY tenant_id, monitor_id, channel, brand, scheduled_for, window_days
), est AS (
  SELECT a.*, a.x / a.m AS rate, a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm)
           AS n_eff
    FROM agg a
), runs AS (
  SELECT monitor_id, channel, brand, scheduled_for, bool_or(is_target) AS is_target,
         array_agg(run_id ORDER BY run_id) AS run_ids
    FROM analytics.channel_brand_metrics
   WHERE monitor_id IS NOT NULL AND scheduled_for IS NOT NULL
   GROUP BY monitor_id, channel, brand, scheduled_for
)
SELECT d.tenant_id, d.monitor_id, d.channel, d.brand, r.is_target, d.scheduled_for, r.run_ids,
       d.m::int AS n, d.x::int AS mentions, d.k::int AS questions, d.rate AS mention_rate,
       d.m / d.n_eff AS design_effect, d.n_eff AS n_effective,
       analytics.clustered_wilson_lower(d.rate, d.n_eff, (d.k - 1)::int) AS mention_rate_lower,
       analytics.clustered_wilson_upper(d.rate, d.n_eff, (d.k - 1)::int) AS mention_rate_upper,
       s.m::int AS n_7d, s.x::int AS mentions_7d, s.k::int AS questions_7d,
       s.rate AS mention_rate_7d, s.n_eff AS n_effective_7d,
       analytics.clustered_wilson_lower(s.rate, s.n_eff, (s.k - 1)::int) AS mention_rate_7d_lower,
       analytics.clustered_wilson_upper(s.rate, s.n_eff, (s.k - 1)::int) AS mention_rate_7d_upper,
       coalesce(c.flagged_day_over_day, false) AS flagged_day_over_day,
       coalesce(c.flagged_rolling_7d, false) AS flagged_rolling_7d,
       CASE WHEN d.k >= 2 THEN 'question-clustered, ' || d.k || ' questions'
            ELSE 'Wilson, 1 question' END AS mention_rate_interval
  FROM est d
  JOIN est s ON s.monitor_id = d.monitor_id AND s.channel = d.channel AND s.brand = d.brand
   AND s.scheduled_for = d.scheduled_for AND s.window_days = 7
  LEFT JOIN runs r ON r.monitor_id = d.monitor_id AND r.channel = d.channel
   AND r.brand = d.brand AND r.scheduled_for = d.scheduled_for
  LEFT JOIN (SELECT monitor_id, channel, brand, scheduled_for,
                    bool_or(flagged) FILTER (WHERE comparison = 'day_over_day')
                      AS flagged_day_over_day,
                    bool_or(flagged) FILTER (WHERE comparison = 'rolling_7d')
                      AS flagged_rolling_7d
               FROM analytics.brand_changes
              GROUP BY monitor_id, channel, brand, scheduled_for) c
    ON c.monitor_id = d.monitor_id AND c.channel = d.channel AND c.brand = d.brand
   AND c.scheduled_for = d.scheduled_for
 WHERE d.window_days = 1;
