-- Honest numbers: question-clustered intervals for every rate pooled over questions, their
-- effective sample sizes beside the raw n, change detection with false-discovery-rate control,
-- and brand trends. The existing columns keep their meaning (mention_rate_lower/upper stay
-- Wilson on the raw n); the new columns are the ones to read. The functions below compute the
-- same numbers as geo_pipeline/domain/stats.py; a test holds them equal.

-- ---------------------------------------------------------------- statistics (= domain/stats.py)
-- P(|Z| >= |z|): Numerical Recipes' Chebyshev fit of erfc, fractional error < 1.2e-7
-- (PostgreSQL 15 has no erfc).
CREATE FUNCTION analytics.normal_two_sided_p(z double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT least(1.0, t * exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
           0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
           1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))))
    FROM (SELECT abs(z) / sqrt(2.0) AS x) a
    CROSS JOIN LATERAL (SELECT 1.0 / (1.0 + 0.5 * a.x) AS t) b
$$;

-- P(|T| >= |t|) for Student's t with integer df >= 1, exact (Abramowitz & Stegun 26.7.3-4).
CREATE FUNCTION analytics.t_two_sided_p(t double precision, df integer)
RETURNS double precision LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  theta double precision;
  s double precision;
  c2 double precision;
  term double precision;
  total double precision;
  inside double precision;
BEGIN
  IF t IS NULL OR df IS NULL OR df < 1 THEN
    RETURN NULL;
  END IF;
  IF df > 100000 THEN
    RETURN analytics.normal_two_sided_p(t);
  END IF;
  theta := atan(abs(t) / sqrt(df));
  s := sin(theta);
  c2 := cos(theta) ^ 2;
  IF df % 2 = 1 THEN
    term := cos(theta);
    total := term;
    FOR k IN 3 .. df - 2 BY 2 LOOP
      term := term * c2 * (k - 1) / k;
      total := total + term;
    END LOOP;
    inside := 2.0 / pi() * (theta + CASE WHEN df > 1 THEN s * total ELSE 0.0 END);
  ELSE
    term := 1.0;
    total := 1.0;
    FOR k IN 2 .. df - 2 BY 2 LOOP
      term := term * c2 * (k - 1) / k;
      total := total + term;
    END LOOP;
    inside := s * total;
  END IF;
  RETURN least(1.0, greatest(0.0, 1.0 - inside));
END
$$;

-- The two-sided 5 % critical value of Student's t with df degrees of freedom (bisection).
CREATE FUNCTION analytics.t_critical_95(df integer)
RETURNS double precision LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  lo double precision := 0.0;
  hi double precision := 1.0e4;
  mid double precision;
BEGIN
  IF df IS NULL OR df < 1 THEN
    RETURN NULL;
  END IF;
  FOR i IN 1 .. 100 LOOP
    mid := (lo + hi) / 2;
    IF analytics.t_two_sided_p(mid, df) > 0.05 THEN lo := mid; ELSE hi := mid; END IF;
  END LOOP;
  RETURN (lo + hi) / 2;
END
$$;

-- Kish design effect of the rate x / m pooled over k questions, from the sums over questions
-- of x_q, m_q, x_q^2, x_q*m_q, m_q^2: max(1, V_cluster / V_binomial) with
-- V_cluster = k/(k-1) * sum (x_q - p m_q)^2 / m^2 and V_binomial = p(1-p)/m; 1 for one question.
CREATE FUNCTION analytics.design_effect(k bigint, x double precision, m double precision,
  sxx double precision, sxm double precision, smm double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN k < 2 OR m <= 0 OR (x / m) * (1 - x / m) <= 0 THEN 1.0
    ELSE greatest(1.0,
      (k::float8 / (k - 1) * greatest(0.0, sxx - 2 * (x / m) * sxm + (x / m) ^ 2 * smm) / (m * m))
      / ((x / m) * (1 - x / m) / m))
  END
$$;

-- Wilson bounds of a rate on an effective n, widened for the df of the variance estimate
-- (Korn-Graubard: n* = n_effective * (z / t_df)^2); df = 0 (one question) is plain Wilson.
CREATE FUNCTION analytics.clustered_wilson_lower(rate double precision,
  n_effective double precision, df integer, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n_effective > 0 THEN greatest(0.0,
    (rate + z * z / (2.0 * ns) - z * sqrt(greatest(0.0, rate * (1 - rate)) / ns + z * z / (4.0 * ns * ns)))
    / (1 + z * z / ns)) END
    FROM (SELECT CASE WHEN df >= 1 THEN n_effective * (z / analytics.t_critical_95(df)) ^ 2
                      ELSE n_effective END AS ns) s
$$;

CREATE FUNCTION analytics.clustered_wilson_upper(rate double precision,
  n_effective double precision, df integer, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n_effective > 0 THEN least(1.0,
    (rate + z * z / (2.0 * ns) + z * sqrt(greatest(0.0, rate * (1 - rate)) / ns + z * z / (4.0 * ns * ns)))
    / (1 + z * z / ns)) END
    FROM (SELECT CASE WHEN df >= 1 THEN n_effective * (z / analytics.t_critical_95(df)) ^ 2
                      ELSE n_effective END AS ns) s
$$;

-- ---------------------------------------------------------------- new columns
-- brand_metrics is one question: its effective n is its n (Wilson stays right there).
ALTER TABLE analytics.brand_metrics
  ADD COLUMN n_effective double precision GENERATED ALWAYS AS (n::float8) STORED;

-- channel_brand_metrics pools questions: filled by refresh_analytics (honest.refresh_channel).
ALTER TABLE analytics.channel_brand_metrics
  ADD COLUMN questions integer,                       -- questions with at least one answer in n
  ADD COLUMN design_effect double precision,          -- of mention_rate, >= 1
  ADD COLUMN n_effective double precision,            -- n / design_effect
  ADD COLUMN mention_rate_cluster_lower double precision,  -- question-clustered 95 % interval
  ADD COLUMN mention_rate_cluster_upper double precision,
  ADD COLUMN citation_design_effect double precision,
  ADD COLUMN citation_n_effective double precision,
  ADD COLUMN citation_rate_lower double precision,    -- question-clustered 95 % interval
  ADD COLUMN citation_rate_upper double precision;

-- share_of_voice pools questions: the share of answers naming any tracked brand gets the same.
ALTER TABLE analytics.share_of_voice
  ADD COLUMN questions integer,
  ADD COLUMN share_design_effect double precision,
  ADD COLUMN share_n_effective double precision,      -- answers_mentioning_any_tracked_brand / deff
  ADD COLUMN share_of_answers_lower double precision, -- question-clustered 95 % interval
  ADD COLUMN share_of_answers_upper double precision;

-- The trend views read brand_metrics by monitor and day.
CREATE INDEX brand_metrics_monitor
  ON analytics.brand_metrics (monitor_id, channel, brand, scheduled_for)
  WHERE monitor_id IS NOT NULL AND scheduled_for IS NOT NULL;

-- ---------------------------------------------------------------- live views
-- monitor x channel x brand x day x question: the counts every trend and change is made of.
CREATE VIEW analytics.brand_question_days AS
SELECT m.tenant_id, m.monitor_id, m.channel, m.brand, bool_or(m.is_target) AS is_target,
       m.scheduled_for, m.question_revision,
       sum(m.n)::int AS n, sum(m.mentions)::int AS mentions
  FROM analytics.brand_metrics m
 WHERE m.monitor_id IS NOT NULL AND m.scheduled_for IS NOT NULL
 GROUP BY m.tenant_id, m.monitor_id, m.channel, m.brand, m.scheduled_for, m.question_revision;

-- Change detection per monitor x channel x brand x day, two comparisons: 'day_over_day' (the
-- day against the previous day with data) and 'rolling_7d' (days d-6..d against d-13..d-7).
-- Each question is one cluster across both periods (a paired design): z on the cluster-robust
-- variance with Student's t on questions - 1 df; one question (or no spread) falls back to the
-- pooled binomial variance and the normal distribution (df = 0). Benjamini-Hochberg across the family (monitor, day, comparison):
-- every brand x channel tested that day; flagged = q_value <= fdr_q.
CREATE VIEW analytics.brand_changes AS
WITH days AS (
  SELECT tenant_id, monitor_id, channel, brand, bool_or(is_target) AS is_target, scheduled_for,
         lag(scheduled_for) OVER (PARTITION BY monitor_id, channel, brand ORDER BY scheduled_for)
           AS prev_day
    FROM analytics.brand_question_days
   GROUP BY tenant_id, monitor_id, channel, brand, scheduled_for
), periods AS (
  SELECT d.*, 'day_over_day'::text AS comparison, d.prev_day AS prev_from, d.prev_day AS prev_to,
         d.scheduled_for AS cur_from
    FROM days d WHERE d.prev_day IS NOT NULL
  UNION ALL
  SELECT d.*, 'rolling_7d'::text AS comparison, d.scheduled_for - 13 AS prev_from,
         d.scheduled_for - 7 AS prev_to, d.scheduled_for - 6 AS cur_from
    FROM days d
), per_q AS (
  SELECT p.tenant_id, p.monitor_id, p.channel, p.brand, p.is_target, p.scheduled_for,
         p.comparison, p.prev_from, p.prev_to, q.question_revision,
         coalesce(sum(q.n) FILTER (WHERE q.scheduled_for <= p.prev_to), 0)::float8 AS m1,
         coalesce(sum(q.mentions) FILTER (WHERE q.scheduled_for <= p.prev_to), 0)::float8 AS x1,
         coalesce(sum(q.n) FILTER (WHERE q.scheduled_for >= p.cur_from), 0)::float8 AS m2,
         coalesce(sum(q.mentions) FILTER (WHERE q.scheduled_for >= p.cur_from), 0)::float8 AS x2
    FROM periods p
    JOIN analytics.brand_question_days q
      ON q.monitor_id = p.monitor_id AND q.channel = p.channel AND q.brand = p.brand
     AND q.scheduled_for BETWEEN p.prev_from AND p.scheduled_for
     AND (q.scheduled_for <= p.prev_to OR q.scheduled_for >= p.cur_from)
   GROUP BY p.tenant_id, p.monitor_id, p.channel, p.brand, p.is_target, p.scheduled_for,
            p.comparison, p.prev_from, p.prev_to, q.question_revision
  HAVING sum(q.n) > 0
), with_totals AS (
  SELECT per_q.*,
         sum(m1) OVER w AS tm1, sum(x1) OVER w AS tx1, sum(m2) OVER w AS tm2,
         sum(x2) OVER w AS tx2
    FROM per_q
  WINDOW w AS (PARTITION BY monitor_id, channel, brand, scheduled_for, comparison)
), tests AS (
  SELECT tenant_id, monitor_id, channel, brand, is_target, scheduled_for, comparison,
         prev_from, prev_to, count(*)::int AS questions,
         max(tm1)::int AS prev_n, max(tx1)::int AS prev_mentions,
         max(tm2)::int AS n, max(tx2)::int AS mentions,
         sum(((x2 - tx2 / nullif(tm2, 0) * m2) / nullif(tm2, 0)
              - (x1 - tx1 / nullif(tm1, 0) * m1) / nullif(tm1, 0)) ^ 2) AS u2
    FROM with_totals
   GROUP BY tenant_id, monitor_id, channel, brand, is_target, scheduled_for, comparison,
            prev_from, prev_to
  HAVING max(tm1) > 0 AND max(tm2) > 0
), stats AS (
  SELECT t.*, t.mentions::float8 / t.n AS mention_rate,
         t.prev_mentions::float8 / t.prev_n AS prev_mention_rate,
         CASE WHEN t.questions >= 2 AND t.u2 > 0
              THEN t.questions::float8 / (t.questions - 1) * t.u2
              ELSE pooled * (1 - pooled) * (1.0 / t.prev_n + 1.0 / t.n) END AS variance,
         CASE WHEN t.questions >= 2 AND t.u2 > 0 THEN t.questions - 1 ELSE 0 END AS df
    FROM tests t
    CROSS JOIN LATERAL (SELECT (t.mentions + t.prev_mentions)::float8 / (t.n + t.prev_n)
                          AS pooled) pl
), tested AS (
  SELECT s.*, s.mention_rate - s.prev_mention_rate AS rate_change,
         CASE WHEN s.variance > 0
              THEN (s.mention_rate - s.prev_mention_rate) / sqrt(s.variance) END AS z
    FROM stats s
), with_p AS (
  SELECT t.*,
         CASE WHEN t.z IS NULL THEN NULL
              WHEN t.df >= 1 THEN analytics.t_two_sided_p(t.z, t.df)
              ELSE analytics.normal_two_sided_p(t.z) END AS p_value
    FROM tested t
), ranked AS (
  SELECT w.*,
         count(w.p_value) OVER fam AS family_size,
         row_number() OVER (PARTITION BY w.monitor_id, w.scheduled_for, w.comparison
                            ORDER BY w.p_value NULLS LAST, w.channel, w.brand) AS p_rank
    FROM with_p w
  WINDOW fam AS (PARTITION BY w.monitor_id, w.scheduled_for, w.comparison)
), adjusted AS (
  SELECT r.*,
         CASE WHEN r.p_value IS NOT NULL THEN least(1.0, min(r.family_size * r.p_value / r.p_rank)
           OVER (PARTITION BY r.monitor_id, r.scheduled_for, r.comparison
                 ORDER BY r.p_value DESC NULLS FIRST, r.p_rank DESC
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) END AS q_value
    FROM ranked r
)
SELECT tenant_id, monitor_id, channel, brand, is_target, scheduled_for, comparison,
       prev_from, prev_to, prev_n, prev_mentions, prev_mention_rate,
       n, mentions, mention_rate, rate_change, questions, df, z, p_value,
       'monitor ' || monitor_id || ', ' || scheduled_for || ', ' || comparison
         || ': every brand x channel tested' AS family,
       family_size::int AS family_size, 0.05::float8 AS fdr_q, q_value,
       coalesce(q_value <= 0.05, false) AS flagged
  FROM adjusted;

-- One row per monitor x channel x brand x day: the day's rate with its question-clustered
-- interval and effective n, the rolling 7-day rate (days d-6..d, each question one cluster
-- across the window) with its own, and whether either comparison flagged a change that day.
CREATE VIEW analytics.brand_trends AS
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
       coalesce(c.flagged_rolling_7d, false) AS flagged_rolling_7d
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

-- ---------------------------------------------------------------- ownership and access
-- As 0017 set for every object: owned by geo_owner, views checked as the querying role (so the
-- tables' row-level security applies to analysts), readable by analysts and the service.
ALTER VIEW analytics.brand_question_days OWNER TO geo_owner;
ALTER VIEW analytics.brand_changes OWNER TO geo_owner;
ALTER VIEW analytics.brand_trends OWNER TO geo_owner;
ALTER VIEW analytics.brand_question_days SET (security_invoker = true);
ALTER VIEW analytics.brand_changes SET (security_invoker = true);
ALTER VIEW analytics.brand_trends SET (security_invoker = true);
ALTER FUNCTION analytics.normal_two_sided_p(double precision) OWNER TO geo_owner;
ALTER FUNCTION analytics.t_two_sided_p(double precision, integer) OWNER TO geo_owner;
ALTER FUNCTION analytics.t_critical_95(integer) OWNER TO geo_owner;
ALTER FUNCTION analytics.design_effect(bigint, double precision, double precision,
  double precision, double precision, double precision) OWNER TO geo_owner;
ALTER FUNCTION analytics.clustered_wilson_lower(double precision, double precision, integer,
  double precision) OWNER TO geo_owner;
ALTER FUNCTION analytics.clustered_wilson_upper(double precision, double precision, integer,
  double precision) OWNER TO geo_owner;
GRANT SELECT ON analytics.brand_question_days, analytics.brand_changes, analytics.brand_trends
  TO geo_analyst, geo_service;
-- The refresh fills the clustered columns after its insert: the service may update those only.
GRANT UPDATE (questions, design_effect, n_effective, mention_rate_cluster_lower,
  mention_rate_cluster_upper, citation_design_effect, citation_n_effective, citation_rate_lower,
  citation_rate_upper) ON analytics.channel_brand_metrics TO geo_service;
GRANT UPDATE (questions, share_design_effect, share_n_effective, share_of_answers_lower,
  share_of_answers_upper) ON analytics.share_of_voice TO geo_service;
