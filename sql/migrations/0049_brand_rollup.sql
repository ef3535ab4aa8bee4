-- The analyst's trends and changes of a monitor, kept per (monitor, channel, brand, day) by the
-- refresh instead of recomputed from the whole history on every query (issue 39).
--
-- analytics.brand_changes and analytics.brand_trends (0021, 0030) were live views over
-- analytics.brand_metrics: every query, even "the changes flagged on one day", computed every
-- day of the monitor's history (the lag over all days, each day's 14-day windows, the
-- Benjamini-Hochberg families), because no day filter can pass a window function. Measured on 2
-- cores: the day's changes 11 s at 100k samples of history, 78 s at 1M; the report's 30-day
-- trend over 60 s at 25k. Partitioning brand_metrics by day does not help: the views still read
-- every partition.
--
-- Now the same computation (the views' SQL, unchanged but for the days it is asked for) is
-- a pair of functions over a list of days, analytics.brand_changes_of and
-- analytics.brand_trends_of; analytics.refresh_brand_rollup(monitor, day), called by
-- refresh_analytics after it rewrites a run's rows, recomputes the days whose numbers the run's
-- day can change and stores them in analytics.brand_day_changes and analytics.brand_day_trends:
--   - the day itself and the 13 days after it (the rolling comparison of day d reads d-13..d;
--     the 7-day trend reads d-6..d);
--   - for each channel x brand, the first day with data after it (its day-over-day comparison
--     is against the previous day with data, however far back);
--   - every row of those days (the Benjamini-Hochberg family is the day's every brand x
--     channel, so the q-values are recomputed over the family's stored p-values).
-- The views keep their names and columns and now read the stored rows: analysts, the report,
-- the alerts and the Grafana brand dashboard get the same numbers in time that depends on the
-- days they ask for, not on the history's length. The refresh's own cost is bounded by the days
-- above, whatever the history (bench/_scale_analysis.py; geo_pipeline_tests/integration/
-- analysis/test_brand_rollup.py proves the stored rows equal what the old views return).

-- Reading a monitor's days (rather than a channel x brand's) needs the day second in an index.
CREATE INDEX brand_metrics_monitor_day ON analytics.brand_metrics (monitor_id, scheduled_for)
  WHERE monitor_id IS NOT NULL AND scheduled_for IS NOT NULL;

-- ---------------------------------------------------------------- the stored rows
-- Columns as analytics.brand_changes had them, in that order.
CREATE TABLE analytics.brand_day_changes (
  tenant_id text NOT NULL,
  monitor_id text NOT NULL,
  channel text NOT NULL,
  brand text NOT NULL,
  is_target boolean,
  scheduled_for date NOT NULL,
  comparison text NOT NULL,
  prev_from date,
  prev_to date,
  prev_n integer,
  prev_mentions integer,
  prev_mention_rate double precision,
  n integer,
  mentions integer,
  mention_rate double precision,
  rate_change double precision,
  questions integer,
  df integer,
  z double precision,
  p_value double precision,
  family text,
  family_size integer,
  fdr_q double precision,
  q_value double precision,
  flagged boolean,
  PRIMARY KEY (monitor_id, scheduled_for, comparison, channel, brand)
);
-- The alerts read the flagged changes of the last days, across monitors.
CREATE INDEX brand_day_changes_flagged ON analytics.brand_day_changes (scheduled_for)
  WHERE flagged;

-- Columns as analytics.brand_trends had them, in that order.
CREATE TABLE analytics.brand_day_trends (
  tenant_id text NOT NULL,
  monitor_id text NOT NULL,
  channel text NOT NULL,
  brand text NOT NULL,
  is_target boolean,
  scheduled_for date NOT NULL,
  run_ids text[],
  n integer,
  mentions integer,
  questions integer,
  mention_rate double precision,
  design_effect double precision,
  n_effective double precision,
  mention_rate_lower double precision,
  mention_rate_upper double precision,
  n_7d integer,
  mentions_7d integer,
  questions_7d integer,
  mention_rate_7d double precision,
  n_effective_7d double precision,
  mention_rate_7d_lower double precision,
  mention_rate_7d_upper double precision,
  flagged_day_over_day boolean,
  flagged_rolling_7d boolean,
  mention_rate_interval text,
  PRIMARY KEY (monitor_id, scheduled_for, channel, brand)
);

-- The brand dashboard lists the monitors with trends in its time range (its variables refresh on
-- a time range change, deploy/grafana/dashboards/brand.json), across monitors; with the
-- monitor in the key, a day range of one monitor read through it visits only that monitor's rows.
CREATE INDEX brand_day_trends_day ON analytics.brand_day_trends (scheduled_for, monitor_id);

-- ---------------------------------------------------------------- the computation
-- analytics.brand_changes (0021) for the given days of one monitor: the same statement, reading
-- only the days its comparisons need (each day's d-13..d and each channel x brand's previous day
-- with data) instead of the whole history. Every channel x brand of each given day is tested, so
-- each day's Benjamini-Hochberg family is whole.
CREATE FUNCTION analytics.brand_changes_of(p_monitor text, p_days date[])
RETURNS SETOF analytics.brand_day_changes LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_need date[];
BEGIN
  SELECT array_agg(DISTINCT x) INTO v_need FROM (
    SELECT generate_series(d - 13, d, interval '1 day')::date FROM unnest(p_days) d
    UNION ALL
    SELECT (SELECT max(b.scheduled_for) FROM analytics.brand_metrics b
             WHERE b.monitor_id = p_monitor AND b.channel = k.channel AND b.brand = k.brand
               AND b.scheduled_for < k.scheduled_for)
      FROM (SELECT DISTINCT m.channel, m.brand, m.scheduled_for FROM analytics.brand_metrics m
             WHERE m.monitor_id = p_monitor AND m.scheduled_for = ANY(p_days)) k
  ) s(x) WHERE x IS NOT NULL;
  RETURN QUERY
  WITH q AS MATERIALIZED (
    SELECT * FROM analytics.brand_question_days
     WHERE monitor_id = p_monitor AND scheduled_for = ANY(v_need)
  ), all_days AS (
    SELECT tenant_id, monitor_id, channel, brand, bool_or(is_target) AS is_target, scheduled_for,
           lag(scheduled_for) OVER (PARTITION BY monitor_id, channel, brand ORDER BY scheduled_for)
             AS prev_day
      FROM q
     GROUP BY tenant_id, monitor_id, channel, brand, scheduled_for
  ), days AS (
    SELECT * FROM all_days WHERE scheduled_for = ANY(p_days)
  ), periods AS (
    SELECT d.*, 'day_over_day'::text AS comparison, d.prev_day AS prev_from,
           d.prev_day AS prev_to, d.scheduled_for AS cur_from
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
      JOIN q
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
  SELECT a.tenant_id, a.monitor_id, a.channel, a.brand, a.is_target, a.scheduled_for,
         a.comparison, a.prev_from, a.prev_to, a.prev_n, a.prev_mentions, a.prev_mention_rate,
         a.n, a.mentions, a.mention_rate, a.rate_change, a.questions, a.df, a.z, a.p_value,
         'monitor ' || a.monitor_id || ', ' || a.scheduled_for || ', ' || a.comparison
           || ': every brand x channel tested' AS family,
         a.family_size::int AS family_size, 0.05::float8 AS fdr_q, a.q_value,
         coalesce(a.q_value <= 0.05, false) AS flagged
    FROM adjusted a;
END $$;

-- analytics.brand_trends (0021, 0030) for the given days of one monitor, reading each day's
-- d-6..d; whether a change was flagged that day comes from the stored changes (so the refresh
-- stores the days' changes first).
CREATE FUNCTION analytics.brand_trends_of(p_monitor text, p_days date[])
RETURNS SETOF analytics.brand_day_trends LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_need date[];
BEGIN
  SELECT array_agg(DISTINCT x) INTO v_need
    FROM (SELECT generate_series(d - 6, d, interval '1 day')::date FROM unnest(p_days) d) s(x);
  RETURN QUERY
  WITH q AS MATERIALIZED (
    SELECT * FROM analytics.brand_question_days
     WHERE monitor_id = p_monitor AND scheduled_for = ANY(v_need)
  ), win AS (
    SELECT d.tenant_id, d.monitor_id, d.channel, d.brand, d.scheduled_for, w.window_days,
           q.question_revision, sum(q.n)::float8 AS m, sum(q.mentions)::float8 AS x
      FROM (SELECT DISTINCT tenant_id, monitor_id, channel, brand, scheduled_for
              FROM q WHERE scheduled_for = ANY(p_days)) d
      CROSS JOIN (VALUES (1), (7)) AS w(window_days)
      JOIN q
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
    SELECT a.*, a.x / a.m AS rate,
           a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff
      FROM agg a
  ), runs AS (
    SELECT monitor_id, channel, brand, scheduled_for, bool_or(is_target) AS is_target,
           array_agg(run_id ORDER BY run_id) AS run_ids
      FROM analytics.channel_brand_metrics
     WHERE monitor_id = p_monitor AND scheduled_for = ANY(p_days)
     GROUP BY monitor_id, channel, brand, scheduled_for
  )
  SELECT d.tenant_id, d.monitor_id, d.channel, d.brand, r.is_target, d.scheduled_for, r.run_ids,
         d.m::int AS n, d.x::int AS mentions, d.k::int AS questions, d.rate AS mention_rate,
         d.m / d.n_eff AS design_effect, d.n_eff AS n_effective,
         analytics.clustered_wilson_lower(d.rate, d.n_eff, (d.k - 1)::int) AS mention_rate_lower,
         analytics.clustered_wilson_upper(d.rate, d.n_eff, (d.k - 1)::int) AS mention_rate_upper,
         s.m::int AS n_7d, s.x::int AS mentions_7d, s.k::int AS questions_7d,
         s.rate AS mention_rate_7d, s.n_eff AS n_effective_7d,
         analytics.clustered_wilson_lower(s.rate, s.n_eff, (s.k - 1)::int)
           AS mention_rate_7d_lower,
         analytics.clustered_wilson_upper(s.rate, s.n_eff, (s.k - 1)::int)
           AS mention_rate_7d_upper,
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
                 FROM analytics.brand_day_changes
                WHERE monitor_id = p_monitor AND scheduled_for = ANY(p_days)
                GROUP BY monitor_id, channel, brand, scheduled_for) c
      ON c.monitor_id = d.monitor_id AND c.channel = d.channel AND c.brand = d.brand
     AND c.scheduled_for = d.scheduled_for
   WHERE d.window_days = 1;
END $$;

-- Rewrite the stored rows of the given days of a monitor: changes first (the trends read their
-- flags). Returns the rows written. One rewrite of a monitor at a time, until its transaction
-- ends: the runs of neighbouring days share days to rewrite, and two refreshes deleting then
-- inserting the same rows at once would collide on the key (or one would miss the other's
-- numbers). The next one waits, then reads the first one's committed rows.
CREATE FUNCTION analytics.rewrite_brand_days(p_monitor text, p_days date[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_changes integer;
  v_trends integer;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('analytics.brand_day_rollup'), hashtext(p_monitor));
  DELETE FROM analytics.brand_day_changes
   WHERE monitor_id = p_monitor AND scheduled_for = ANY(p_days);
  INSERT INTO analytics.brand_day_changes SELECT * FROM analytics.brand_changes_of(p_monitor, p_days);
  GET DIAGNOSTICS v_changes = ROW_COUNT;
  DELETE FROM analytics.brand_day_trends
   WHERE monitor_id = p_monitor AND scheduled_for = ANY(p_days);
  INSERT INTO analytics.brand_day_trends SELECT * FROM analytics.brand_trends_of(p_monitor, p_days);
  GET DIAGNOSTICS v_trends = ROW_COUNT;
  RETURN v_changes + v_trends;
END $$;

-- After a run of (monitor, day) was rewritten in brand_metrics (refresh_analytics): the days
-- whose trends or changes read that day -- the day and the 13 after it, and each channel x
-- brand's first day with data after it (its day-over-day comparison; found with one index
-- descent per channel x brand, enumerated by skipping through the index). Cost: those days'
-- rows, not the history's.
CREATE FUNCTION analytics.refresh_brand_rollup(p_monitor text, p_day date)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_days date[];
BEGIN
  IF p_monitor IS NULL OR p_day IS NULL THEN
    RETURN 0;
  END IF;
  WITH RECURSIVE cb AS (
    (SELECT m.channel, m.brand FROM analytics.brand_metrics m
      WHERE m.monitor_id = p_monitor AND m.scheduled_for IS NOT NULL
      ORDER BY m.channel, m.brand LIMIT 1)
    UNION ALL
    SELECT nx.channel, nx.brand
      FROM cb, LATERAL (SELECT m.channel, m.brand FROM analytics.brand_metrics m
                         WHERE m.monitor_id = p_monitor AND m.scheduled_for IS NOT NULL
                           AND (m.channel, m.brand) > (cb.channel, cb.brand)
                         ORDER BY m.channel, m.brand LIMIT 1) nx
  )
  SELECT array_agg(DISTINCT x) INTO v_days FROM (
    SELECT generate_series(p_day, p_day + 13, interval '1 day')::date
    UNION ALL
    SELECT (SELECT min(m.scheduled_for) FROM analytics.brand_metrics m
             WHERE m.monitor_id = p_monitor AND m.channel = cb.channel AND m.brand = cb.brand
               AND m.scheduled_for > p_day)
      FROM cb
  ) s(x) WHERE x IS NOT NULL;
  RETURN analytics.rewrite_brand_days(p_monitor, v_days);
END $$;

-- A monitor's rows from scratch (every monitor's with NULL: refresh_analytics of every run, and
-- this migration's backfill), a month of days per statement so that no statement holds a long
-- history at once.
CREATE FUNCTION analytics.rebuild_brand_rollup(p_monitor text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_monitor text;
  v_days date[];
  v_rows integer := 0;
BEGIN
  DELETE FROM analytics.brand_day_changes WHERE p_monitor IS NULL OR monitor_id = p_monitor;
  DELETE FROM analytics.brand_day_trends WHERE p_monitor IS NULL OR monitor_id = p_monitor;
  FOR v_monitor, v_days IN
    SELECT monitor_id, array_agg(scheduled_for ORDER BY scheduled_for)
      FROM (SELECT DISTINCT monitor_id, scheduled_for,
                   (scheduled_for - date '2000-01-01') / 31 AS chunk
              FROM analytics.brand_metrics
             WHERE monitor_id IS NOT NULL AND scheduled_for IS NOT NULL
               AND (p_monitor IS NULL OR monitor_id = p_monitor)) d
     GROUP BY monitor_id, chunk ORDER BY monitor_id, chunk
  LOOP
    v_rows := v_rows + analytics.rewrite_brand_days(v_monitor, v_days);
  END LOOP;
  RETURN v_rows;
END $$;

-- ---------------------------------------------------------------- the views read the rows
CREATE OR REPLACE VIEW analytics.brand_changes WITH (security_invoker = true) AS
SELECT tenant_id, monitor_id, channel, brand, is_target, scheduled_for, comparison,
       prev_from, prev_to, prev_n, prev_mentions, prev_mention_rate,
       n, mentions, mention_rate, rate_change, questions, df, z, p_value, family,
       family_size, fdr_q, q_value, flagged
  FROM analytics.brand_day_changes;

CREATE OR REPLACE VIEW analytics.brand_trends WITH (security_invoker = true) AS
SELECT tenant_id, monitor_id, channel, brand, is_target, scheduled_for, run_ids, n, mentions,
       questions, mention_rate, design_effect, n_effective, mention_rate_lower,
       mention_rate_upper, n_7d, mentions_7d, questions_7d, mention_rate_7d, n_effective_7d,
       mention_rate_7d_lower, mention_rate_7d_upper, flagged_day_over_day, flagged_rolling_7d,
       mention_rate_interval
  FROM analytics.brand_day_trends;

-- ---------------------------------------------------------------- ownership and access
-- As the sibling analyst tables (0017: channel_brand_metrics): owned by geo_owner, row-level
-- security with the analyst's tenant policy, read by analysts, written by the service.
ALTER TABLE analytics.brand_day_changes OWNER TO geo_owner;
ALTER TABLE analytics.brand_day_trends OWNER TO geo_owner;
ALTER TABLE analytics.brand_day_changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE analytics.brand_day_trends ENABLE ROW LEVEL SECURITY;
CREATE POLICY analyst_tenant ON analytics.brand_day_changes FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON analytics.brand_day_trends FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
GRANT SELECT, INSERT, DELETE ON analytics.brand_day_changes, analytics.brand_day_trends
  TO geo_service;
GRANT SELECT ON analytics.brand_day_changes, analytics.brand_day_trends TO geo_analyst;
ALTER FUNCTION analytics.brand_changes_of(text, date[]) OWNER TO geo_owner;
ALTER FUNCTION analytics.brand_trends_of(text, date[]) OWNER TO geo_owner;
ALTER FUNCTION analytics.rewrite_brand_days(text, date[]) OWNER TO geo_owner;
ALTER FUNCTION analytics.refresh_brand_rollup(text, date) OWNER TO geo_owner;
ALTER FUNCTION analytics.rebuild_brand_rollup(text) OWNER TO geo_owner;
-- All five run as their caller (no SECURITY DEFINER): the two computations read what the caller
-- may read (an analyst, its tenant's rows); the three that write are the refresh's, so only the
-- service may call them (an analyst could not write the tables anyway).
REVOKE EXECUTE ON FUNCTION analytics.rewrite_brand_days(text, date[]),
  analytics.refresh_brand_rollup(text, date), analytics.rebuild_brand_rollup(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION analytics.rewrite_brand_days(text, date[]),
  analytics.refresh_brand_rollup(text, date), analytics.rebuild_brand_rollup(text) TO geo_service;
-- The refresh transaction sets a larger work_mem (analysis.tune); a rebuild or a direct call
-- gets the same, so a month's rows are aggregated in memory rather than spilled to disk.
ALTER FUNCTION analytics.rewrite_brand_days(text, date[]) SET work_mem = '128MB';

-- The rows of the history already analysed.
SELECT analytics.rebuild_brand_rollup();
