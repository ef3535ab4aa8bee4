-- GENERATED FILE, do not edit: the current schema of geo_pipeline, i.e. what the migrations in
-- sql/migrations/ leave in an empty database (0001_initial .. 0091_transition_log_without_nested_loop, 58 files).
-- Regenerate with:  .venv/bin/python sql/regenerate_schema.py
-- A new migration must be followed by regenerating this file, committed with it; the test
-- geo_pipeline_tests/integration/foundation/test_schema.py builds one database from this file
-- and one from the migrations and compares their catalogues. Why each object is as it is:
-- see the migration that created or last changed it.

-- Roles that own or are granted objects below. Roles belong to the cluster, not to a database:
-- created here only if missing (a concurrent creator is tolerated).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT * FROM (VALUES
    ('geo_analyst', 'NOLOGIN'),
    ('geo_owner', 'NOLOGIN'),
    ('geo_service', 'NOLOGIN BYPASSRLS')) AS v(name, options) LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.name) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I %s', r.name, r.options);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END $$;

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: analytics; Type: SCHEMA; Schema: -; Owner: geo_owner
--

CREATE SCHEMA analytics;

ALTER SCHEMA analytics OWNER TO geo_owner;

--
-- Name: geo; Type: SCHEMA; Schema: -; Owner: geo_owner
--

CREATE SCHEMA geo;

ALTER SCHEMA geo OWNER TO geo_owner;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: brand_day_changes; Type: TABLE; Schema: analytics; Owner: geo_owner
--

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
    flagged boolean
);

ALTER TABLE analytics.brand_day_changes OWNER TO geo_owner;

--
-- Name: brand_changes_of(text, date[]); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.brand_changes_of(p_monitor text, p_days date[]) RETURNS SETOF analytics.brand_day_changes
    LANGUAGE plpgsql STABLE
    AS $$
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

ALTER FUNCTION analytics.brand_changes_of(p_monitor text, p_days date[]) OWNER TO geo_owner;

--
-- Name: brand_day_trends; Type: TABLE; Schema: analytics; Owner: geo_owner
--

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
    mention_rate_interval text
);

ALTER TABLE analytics.brand_day_trends OWNER TO geo_owner;

--
-- Name: brand_trends_of(text, date[]); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.brand_trends_of(p_monitor text, p_days date[]) RETURNS SETOF analytics.brand_day_trends
    LANGUAGE plpgsql STABLE
    AS $$
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

ALTER FUNCTION analytics.brand_trends_of(p_monitor text, p_days date[]) OWNER TO geo_owner;

--
-- Name: clustered_wilson_lower(double precision, double precision, integer, double precision); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.clustered_wilson_lower(rate double precision, n_effective double precision, df integer, z double precision DEFAULT 1.959963984540054) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE WHEN n_effective > 0 THEN greatest(0.0, least(rate,
    (rate + z * z / (2.0 * ns) - z * sqrt(greatest(0.0, rate * (1 - rate)) / ns + z * z / (4.0 * ns * ns)))
    / (1 + z * z / ns))) END
    FROM (SELECT CASE WHEN df >= 1 THEN n_effective * (z / analytics.t_critical_95(df)) ^ 2
                      ELSE n_effective END AS ns) s
$$;

ALTER FUNCTION analytics.clustered_wilson_lower(rate double precision, n_effective double precision, df integer, z double precision) OWNER TO geo_owner;

--
-- Name: clustered_wilson_upper(double precision, double precision, integer, double precision); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.clustered_wilson_upper(rate double precision, n_effective double precision, df integer, z double precision DEFAULT 1.959963984540054) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE WHEN n_effective > 0 THEN least(1.0, greatest(rate,
    (rate + z * z / (2.0 * ns) + z * sqrt(greatest(0.0, rate * (1 - rate)) / ns + z * z / (4.0 * ns * ns)))
    / (1 + z * z / ns))) END
    FROM (SELECT CASE WHEN df >= 1 THEN n_effective * (z / analytics.t_critical_95(df)) ^ 2
                      ELSE n_effective END AS ns) s
$$;

ALTER FUNCTION analytics.clustered_wilson_upper(rate double precision, n_effective double precision, df integer, z double precision) OWNER TO geo_owner;

--
-- Name: design_effect(bigint, double precision, double precision, double precision, double precision, double precision); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.design_effect(k bigint, x double precision, m double precision, sxx double precision, sxm double precision, smm double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE
    WHEN k < 2 OR m <= 0 OR (x / m) * (1 - x / m) <= 0 THEN 1.0
    ELSE greatest(1.0,
      (k::float8 / (k - 1) * greatest(0.0, sxx - 2 * (x / m) * sxm + (x / m) ^ 2 * smm) / (m * m))
      / ((x / m) * (1 - x / m) / m))
  END
$$;

ALTER FUNCTION analytics.design_effect(k bigint, x double precision, m double precision, sxx double precision, sxm double precision, smm double precision) OWNER TO geo_owner;

--
-- Name: normal_two_sided_p(double precision); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.normal_two_sided_p(z double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE WHEN a.x > 26 THEN 0.0 ELSE
         least(1.0, t * exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
           0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
           1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))) END
    FROM (SELECT abs(z) / sqrt(2.0) AS x) a
    CROSS JOIN LATERAL (SELECT 1.0 / (1.0 + 0.5 * a.x) AS t) b
$$;

ALTER FUNCTION analytics.normal_two_sided_p(z double precision) OWNER TO geo_owner;

--
-- Name: rebuild_brand_rollup(text); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.rebuild_brand_rollup(p_monitor text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

ALTER FUNCTION analytics.rebuild_brand_rollup(p_monitor text) OWNER TO geo_owner;

--
-- Name: refresh_brand_rollup(text, date); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.refresh_brand_rollup(p_monitor text, p_day date) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

ALTER FUNCTION analytics.refresh_brand_rollup(p_monitor text, p_day date) OWNER TO geo_owner;

--
-- Name: rewrite_brand_days(text, date[]); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.rewrite_brand_days(p_monitor text, p_days date[]) RETURNS integer
    LANGUAGE plpgsql
    SET work_mem TO '128MB'
    AS $$
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

ALTER FUNCTION analytics.rewrite_brand_days(p_monitor text, p_days date[]) OWNER TO geo_owner;

--
-- Name: t_critical_95(integer); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.t_critical_95(df integer) RETURNS double precision
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
  p constant double precision := 0.05;
  x constant double precision := -1.959963984540054;  -- the normal quantile of p / 2
  a double precision;
  b double precision;
  c double precision;
  d double precision;
  y double precision;
  t double precision;
  dens double precision;
  k integer;
BEGIN
  IF df IS NULL OR df < 1 THEN
    RETURN NULL;
  END IF;
  IF df = 1 THEN
    RETURN 1.0 / tan(p * pi() / 2);
  END IF;
  IF df = 2 THEN
    RETURN sqrt(2.0 / (p * (2.0 - p)) - 2.0);
  END IF;
  -- Hill (1970), CACM algorithm 396.
  a := 1.0 / (df - 0.5);
  b := 48.0 / (a * a);
  c := ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36;
  d := ((94.5 / (b + c) - 3.0) / b + 1.0) * sqrt(a * pi() / 2) * df;
  y := (d * p) ^ (2.0 / df);
  IF y > 0.05 + a THEN
    y := x * x;
    IF df < 5 THEN
      c := c + 0.3 * (df - 4.5) * (x + 0.6);
    END IF;
    c := (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c;
    y := (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x;
    y := a * y * y;
    y := CASE WHEN y > 0.1 THEN exp(y) - 1.0
              ELSE ((y + 4.0) * y + 12.0) * y * y / 24.0 + y END;
  ELSE
    y := ((1.0 / (((df + 6.0) / (df * y) - 0.089 * d - 0.822) * (df + 2.0) * 3.0)
          + 0.5 / (df + 4.0)) * y - 1.0) * (df + 1.0) / (df + 2.0) + 1.0 / y;
  END IF;
  t := sqrt(df * y);
  IF df > 100 THEN
    RETURN t;
  END IF;
  -- Two Newton steps on the exact tail; the density's constant
  -- Gamma((df+1)/2) / (sqrt(df pi) Gamma(df/2)) by c(k + 2) = c(k) (k + 1) / sqrt(k (k + 2)).
  IF df % 2 = 1 THEN c := 1.0 / pi(); k := 1; ELSE c := 1.0 / sqrt(8.0); k := 2; END IF;
  WHILE k < df LOOP
    c := c * (k + 1) / sqrt(k * (k + 2.0));
    k := k + 2;
  END LOOP;
  FOR i IN 1 .. 2 LOOP
    dens := c * (1.0 + t * t / df) ^ (-(df + 1) / 2.0);
    t := t + (analytics.t_two_sided_p(t, df) - p) / (2.0 * dens);
  END LOOP;
  RETURN t;
END
$$;

ALTER FUNCTION analytics.t_critical_95(df integer) OWNER TO geo_owner;

--
-- Name: t_two_sided_p(double precision, integer); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.t_two_sided_p(t double precision, df integer) RETURNS double precision
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
  theta double precision;
  s double precision;
  c2 double precision;
  term double precision;
  total double precision;
  inside double precision;
  a double precision;
  b double precision;
  y double precision;
BEGIN
  IF t IS NULL OR df IS NULL OR df < 1 THEN
    RETURN NULL;
  END IF;
  IF df > 100 THEN
    a := df - 0.5;
    b := 48.0 * a * a;
    y := a * ln(1.0 + least(abs(t), 1.0e100) ^ 2 / df);
    y := (((((-0.4 * y - 3.3) * y - 24.0) * y - 85.5) / (0.8 * y * y + 100.0 + b) + y + 3.0)
          / b + 1.0) * sqrt(y);
    RETURN analytics.normal_two_sided_p(y);
  END IF;
  theta := atan(abs(t) / sqrt(df));
  s := sin(theta);
  c2 := cos(theta) ^ 2;
  IF df % 2 = 1 THEN
    term := cos(theta);
    total := term;
    FOR k IN 3 .. df - 2 BY 2 LOOP
      EXIT WHEN term < 1.0e-270;
      term := term * c2 * (k - 1) / k;
      total := total + term;
    END LOOP;
    inside := 2.0 / pi() * (theta + CASE WHEN df > 1 THEN s * total ELSE 0.0 END);
  ELSE
    term := 1.0;
    total := 1.0;
    FOR k IN 2 .. df - 2 BY 2 LOOP
      EXIT WHEN term < 1.0e-270;
      term := term * c2 * (k - 1) / k;
      total := total + term;
    END LOOP;
    inside := s * total;
  END IF;
  RETURN least(1.0, greatest(0.0, 1.0 - inside));
END
$$;

ALTER FUNCTION analytics.t_two_sided_p(t double precision, df integer) OWNER TO geo_owner;

--
-- Name: two_proportion_z(bigint, bigint, bigint, bigint); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.two_proportion_z(x1 bigint, n1 bigint, x2 bigint, n2 bigint) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE
    WHEN n1 > 0 AND n2 > 0
     AND (x1 + x2)::float8 / (n1 + n2) * (1 - (x1 + x2)::float8 / (n1 + n2)) > 0
    THEN (x2::float8 / n2 - x1::float8 / n1)
         / sqrt((x1 + x2)::float8 / (n1 + n2) * (1 - (x1 + x2)::float8 / (n1 + n2))
                * (1.0 / n1 + 1.0 / n2))
  END
$$;

ALTER FUNCTION analytics.two_proportion_z(x1 bigint, n1 bigint, x2 bigint, n2 bigint) OWNER TO geo_owner;

--
-- Name: wilson_lower(bigint, bigint, double precision); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.wilson_lower(x bigint, n bigint, z double precision DEFAULT 1.959963984540054) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE WHEN n > 0 THEN greatest(0.0,
    (x::float8 / n + z * z / (2.0 * n)
      - z * sqrt((x::float8 / n) * (1 - x::float8 / n) / n + z * z / (4.0 * n * n)))
    / (1 + z * z / n)) END
$$;

ALTER FUNCTION analytics.wilson_lower(x bigint, n bigint, z double precision) OWNER TO geo_owner;

--
-- Name: wilson_upper(bigint, bigint, double precision); Type: FUNCTION; Schema: analytics; Owner: geo_owner
--

CREATE FUNCTION analytics.wilson_upper(x bigint, n bigint, z double precision DEFAULT 1.959963984540054) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE WHEN n > 0 THEN least(1.0,
    (x::float8 / n + z * z / (2.0 * n)
      + z * sqrt((x::float8 / n) * (1 - x::float8 / n) / n + z * z / (4.0 * n * n)))
    / (1 + z * z / n)) END
$$;

ALTER FUNCTION analytics.wilson_upper(x bigint, n bigint, z double precision) OWNER TO geo_owner;

--
-- Name: analyst_tenant(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.analyst_tenant() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  SELECT l.tenant_id FROM geo.analyst_logins l WHERE l.login = current_user
$$;

ALTER FUNCTION geo.analyst_tenant() OWNER TO geo_owner;

--
-- Name: claimable(text, text, text, text, text[]); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.claimable(run_id text, channel text, platform text, submission_state text, lookup_platforms text[]) RETURNS SETOF boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  SELECT true
  FROM geo.runs r JOIN geo.run_dispatches d ON d.run_id = r.run_id
  WHERE r.run_id = claimable.run_id AND d.channel = claimable.channel
    AND r.confirmed_at IS NOT NULL
    AND (r.cancel_requested_at IS NULL OR claimable.submission_state <> 'planned')
    AND (claimable.submission_state <> 'uncertain' OR claimable.lookup_platforms IS NULL
         OR claimable.platform = ANY(claimable.lookup_platforms))
$$;

ALTER FUNCTION geo.claimable(run_id text, channel text, platform text, submission_state text, lookup_platforms text[]) OWNER TO geo_owner;

--
-- Name: delete_citations_of_deleted_answers(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.delete_citations_of_deleted_answers() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  DELETE FROM geo.citations c USING old_answers o
   WHERE c.sample_id = o.sample_id AND c.revision = o.revision;
  RETURN NULL;
END $$;

ALTER FUNCTION geo.delete_citations_of_deleted_answers() OWNER TO geo_owner;

--
-- Name: delete_evidence_objects_of_deleted_samples(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.delete_evidence_objects_of_deleted_samples() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  DELETE FROM geo.evidence_objects e USING old_samples o WHERE e.sample_id = o.sample_id;
  RETURN NULL;
END $$;

ALTER FUNCTION geo.delete_evidence_objects_of_deleted_samples() OWNER TO geo_owner;

--
-- Name: delete_samples_of_deleted_runs(); Type: FUNCTION; Schema: geo; Owner: -
--

CREATE FUNCTION geo.delete_samples_of_deleted_runs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  DELETE FROM geo.samples s USING old_runs o WHERE s.run_id = o.run_id;
  RETURN NULL;
END $$;

--
-- Name: enable_replica_identities(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.enable_replica_identities() RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
  t record;
  made integer := 0;
BEGIN
  FOR t IN
    SELECT c.oid::regclass AS rel, c.relname || '_replica_identity' AS ix,
           (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.o)
              FROM unnest(i.indkey) WITH ORDINALITY k(attnum, o)
              JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum) AS key_columns
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
    JOIN pg_attribute tid ON tid.attrelid = c.oid AND tid.attname = 'tenant_id' AND tid.attnotnull
    WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'r'
      AND has_table_privilege('geo_analyst', c.oid, 'SELECT')
      AND c.oid <> 'geo.analyst_logins'::regclass
      AND NOT (tid.attnum = ANY (i.indkey))
      AND c.relreplident <> 'i'
    ORDER BY 1
  LOOP
    EXECUTE format('CREATE UNIQUE INDEX IF NOT EXISTS %I ON %s (%s, tenant_id)',
                   t.ix, t.rel, t.key_columns);
    EXECUTE format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', t.rel, t.ix);
    made := made + 1;
  END LOOP;
  RETURN made;
END $$;

ALTER FUNCTION geo.enable_replica_identities() OWNER TO geo_owner;

--
-- Name: exclusion_reason(text, text, integer); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.exclusion_reason(submission_state text, collection_state text, attempt_no integer) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  SELECT CASE
    WHEN collection_state IN ('completed', 'failed') THEN NULL
    WHEN submission_state = 'uncertain' THEN 'uncertain'      -- acceptance unknown (R12)
    WHEN submission_state = 'submitting' THEN 'submitting'    -- a request may be in flight
    WHEN submission_state = 'accepted' THEN 'polling'         -- upstream has it, no answer yet
    WHEN collection_state = 'running' THEN 'running'
    WHEN attempt_no > 0 THEN 'queued_retry'                   -- waiting for its next attempt
    ELSE 'queued'                                             -- never tried
  END
$$;

ALTER FUNCTION geo.exclusion_reason(submission_state text, collection_state text, attempt_no integer) OWNER TO geo_owner;

--
-- Name: forbid_change(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.forbid_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  RAISE EXCEPTION 'geo: % on %.% is not allowed (append-only / immutable table)',
    TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'restrict_violation';
END $$;

ALTER FUNCTION geo.forbid_change() OWNER TO geo_owner;

--
-- Name: forbid_key_change(); Type: FUNCTION; Schema: geo; Owner: -
--

CREATE FUNCTION geo.forbid_key_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  RAISE EXCEPTION 'geo: the key (run, tenant) of %.% may not change', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'foreign_key_violation';
END $$;

--
-- Name: guard_citation_insert(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.guard_citation_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
BEGIN
  SELECT k.sample_id, k.revision INTO bad
  FROM (SELECT DISTINCT n.sample_id, n.revision FROM new_citations n
         ORDER BY n.sample_id, n.revision) k
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.samples s
                      WHERE s.sample_id = k.sample_id
                      FOR KEY SHARE OF s) f ON true
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.answers a
                      WHERE a.sample_id = k.sample_id AND a.revision = k.revision
                      LIMIT 1) a ON true
  WHERE f.found IS NULL OR a.found IS NULL
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: citation of sample % revision %: no such answer revision',
      bad.sample_id, bad.revision USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END $$;

ALTER FUNCTION geo.guard_citation_insert() OWNER TO geo_owner;

--
-- Name: guard_evidence_object_insert(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.guard_evidence_object_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad text;
BEGIN
  SELECT k.sample_id INTO bad
  FROM (SELECT DISTINCT n.sample_id FROM new_objects n ORDER BY n.sample_id) k
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.samples s
                      WHERE s.sample_id = k.sample_id
                      FOR KEY SHARE OF s) f ON true
  WHERE f.found IS NULL
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: evidence object of sample %: no such sample', bad
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END $$;

ALTER FUNCTION geo.guard_evidence_object_insert() OWNER TO geo_owner;

--
-- Name: guard_sample_insert(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.guard_sample_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
  bad_id text;
BEGIN
  WITH g AS MATERIALIZED (  -- one hashed pass over the inserted rows
    SELECT run_id, tenant_id, submission_state, collection_state, evidence_state, analysis_state
    FROM new_samples
    GROUP BY run_id, tenant_id, submission_state, collection_state, evidence_state,
             analysis_state
  )
  SELECT x.* INTO bad
  FROM (
    -- Every (run, tenant) is looked up and its run row locked; the ones with no such run.
    SELECT 1 AS ord, k.run_id, k.tenant_id, NULL::text AS lyr, NULL::text AS state
    FROM (SELECT DISTINCT g.run_id, g.tenant_id FROM g) k
    LEFT JOIN LATERAL (SELECT true AS found FROM geo.runs r
                        WHERE r.run_id = k.run_id AND r.tenant_id = k.tenant_id
                        FOR KEY SHARE OF r) f ON true
    WHERE f.found IS NULL
    UNION ALL
    -- Each combination of states: a layer whose state is no allowed initial state.
    SELECT 2, g.run_id, g.tenant_id, l.lyr, l.state
    FROM g
    CROSS JOIN LATERAL (VALUES ('submission', g.submission_state),
                               ('collection', g.collection_state),
                               ('evidence', g.evidence_state), ('analysis', g.analysis_state))
      AS l(lyr, state)
    WHERE NOT EXISTS (SELECT 1 FROM geo.allowed_transitions t
                       WHERE t.layer = l.lyr AND t.from_state IS NULL AND t.to_state = l.state)
  ) x
  ORDER BY x.ord
  LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF bad.ord = 1 THEN
    RAISE EXCEPTION 'geo: sample of run % (tenant %): no such run of that tenant',
      bad.run_id, bad.tenant_id USING ERRCODE = 'foreign_key_violation';
  END IF;
  -- Only on the way to the error: a sample that has the refused state, for the message.
  SELECT n.sample_id INTO bad_id
  FROM new_samples n
  WHERE n.run_id = bad.run_id AND n.tenant_id = bad.tenant_id
    AND CASE bad.lyr WHEN 'submission' THEN n.submission_state
                     WHEN 'collection' THEN n.collection_state
                     WHEN 'evidence' THEN n.evidence_state
                     ELSE n.analysis_state END = bad.state
  LIMIT 1;
  RAISE EXCEPTION 'geo: % transition (new) -> % is not allowed for sample %',
    bad.lyr, bad.state, bad_id USING ERRCODE = 'check_violation';
END $$;

ALTER FUNCTION geo.guard_sample_insert() OWNER TO geo_owner;

--
-- Name: log_sample_transitions(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.log_sample_transitions() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_nestloop TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
  bad record;
  actor text := nullif(current_setting('geo.actor', true), '');
BEGIN
  -- MATERIALIZED: under the LIMIT the planner would join old and new rows by nested loop.
  WITH c AS MATERIALIZED (
    SELECT n.sample_id, l.layer, l.from_state, l.to_state, o.fencing_token AS old_token,
           n.fencing_token AS new_token
    FROM old_samples o JOIN new_samples n USING (sample_id)
    CROSS JOIN LATERAL (VALUES
        ('submission', o.submission_state, n.submission_state),
        ('collection', o.collection_state, n.collection_state),
        ('evidence', o.evidence_state, n.evidence_state),
        ('analysis', o.analysis_state, n.analysis_state)) AS l(layer, from_state, to_state)
    WHERE n.fencing_token < o.fencing_token OR l.from_state <> l.to_state
  )
  SELECT c.* INTO bad
  FROM c LEFT JOIN geo.allowed_transitions t
    ON t.layer = c.layer AND t.from_state = c.from_state AND t.to_state = c.to_state
  WHERE c.new_token < c.old_token OR (c.from_state <> c.to_state AND t.layer IS NULL)
  LIMIT 1;
  IF FOUND THEN
    IF bad.new_token < bad.old_token THEN
      RAISE EXCEPTION 'geo: fencing token of sample % may not go back (% -> %)',
        bad.sample_id, bad.old_token, bad.new_token USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'geo: % transition % -> % is not allowed for sample %',
      bad.layer, bad.from_state, bad.to_state, bad.sample_id
      USING ERRCODE = 'check_violation';
  END IF;
  INSERT INTO geo.state_transitions
    (sample_id, run_id, tenant_id, layer, from_state, to_state, reason, fencing_token,
     attempt_no, actor)
  SELECT n.sample_id, n.run_id, n.tenant_id, l.layer, l.from_state, l.to_state, l.reason,
         n.fencing_token, n.attempt_no, actor
  FROM old_samples o JOIN new_samples n USING (sample_id)
  CROSS JOIN LATERAL (VALUES
      (1, 'submission', o.submission_state, n.submission_state, n.submission_reason),
      (2, 'collection', o.collection_state, n.collection_state, n.collection_reason),
      (3, 'evidence', o.evidence_state, n.evidence_state, n.evidence_reason),
      (4, 'analysis', o.analysis_state, n.analysis_state, n.analysis_reason))
    AS l(ord, layer, from_state, to_state, reason)
  WHERE l.from_state <> l.to_state
  ORDER BY n.sample_id, l.ord;
  RETURN NULL;
END $$;

ALTER FUNCTION geo.log_sample_transitions() OWNER TO geo_owner;

--
-- Name: maintain_run_accounts(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.maintain_run_accounts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
BEGIN
  WITH d AS (
    SELECT e.run_id, e.tenant_id, e.currency, count(*)::int AS n,
           min(e.idempotency_key) AS first_key,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'estimate'), 0) AS estimated,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'reserve'), 0) AS reserved,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'adjustment'
                                                  AND e.adjusts = 'reservation'), 0) AS overrun,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'charge'), 0) AS charged,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'release'), 0) AS released,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
    FROM new_entries e WHERE e.run_id IS NOT NULL
    GROUP BY e.run_id, e.tenant_id, e.currency
  ), u AS (
    -- UPDATE first: the constraints judge the new totals, not these entries alone.
    UPDATE geo.run_accounts a SET
      estimated_minor = a.estimated_minor + d.estimated,
      reserved_minor = a.reserved_minor + d.reserved,
      overrun_minor = a.overrun_minor + d.overrun,
      charged_minor = a.charged_minor + d.charged,
      released_minor = a.released_minor + d.released,
      refunded_minor = a.refunded_minor + d.refunded,
      entries = a.entries + d.n
    FROM d
    WHERE a.run_id = d.run_id AND a.tenant_id = d.tenant_id AND a.currency = d.currency
    RETURNING a.run_id
  ), i AS (
    -- A run's first entries open its account, unless the run is billed elsewhere already or
    -- these entries name two tenants or currencies for it.
    INSERT INTO geo.run_accounts
      (run_id, tenant_id, currency, estimated_minor, reserved_minor, overrun_minor,
       charged_minor, released_minor, refunded_minor, entries)
    SELECT d.run_id, d.tenant_id, d.currency, d.estimated, d.reserved, d.overrun, d.charged,
           d.released, d.refunded, d.n
    FROM d
    WHERE NOT EXISTS (SELECT 1 FROM geo.run_accounts a WHERE a.run_id = d.run_id)
      AND (SELECT count(*) FROM d d2 WHERE d2.run_id = d.run_id) = 1
    RETURNING run_id
  )
  SELECT d.run_id, d.tenant_id, d.currency, d.first_key INTO bad
  FROM d
  WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.run_id = d.run_id)
    AND NOT EXISTS (SELECT 1 FROM i WHERE i.run_id = d.run_id)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: ledger entry % for run % is in tenant % / %, but the run is billed to another tenant or currency',
      bad.first_key, bad.run_id, bad.tenant_id, bad.currency
      USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;

ALTER FUNCTION geo.maintain_run_accounts() OWNER TO geo_owner;

--
-- Name: reopen_run_retention(); Type: FUNCTION; Schema: geo; Owner: -
--

CREATE FUNCTION geo.reopen_run_retention() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_nestloop TO 'on'
    AS $$
BEGIN
  UPDATE geo.runs r SET raw_expired_at = NULL, log_expired_at = NULL
   WHERE r.run_id IN (SELECT DISTINCT n.run_id FROM new_transitions n)
     AND (r.raw_expired_at IS NOT NULL OR r.log_expired_at IS NOT NULL);
  RETURN NULL;
END $$;

--
-- Name: sample_id_check_in_force(); Type: FUNCTION; Schema: geo; Owner: -
--

CREATE FUNCTION geo.sample_id_check_in_force() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = 'geo.samples'::regclass AND c.contype = 'c'
      AND c.conname = 'sample_id_is_identity_hash' AND c.convalidated
      AND pg_catalog.pg_get_constraintdef(c.oid) = 'CHECK ((sample_id = geo.sample_id_for(run_id, '
          'question_revision, platform, device, region, mode, repeat_index)))')
$$;

--
-- Name: sample_id_for(text, text, text, text, text, text, integer); Type: FUNCTION; Schema: geo; Owner: -
--

CREATE FUNCTION geo.sample_id_for(run_id text, question_revision text, platform text, device text, region text, mode text, repeat_index integer) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  SELECT 's' || encode(substr(sha256(convert_to(concat_ws(chr(31), run_id, question_revision,
    platform, device, region, mode, repeat_index::text), 'UTF8')), 1, 12), 'hex')
$$;

--
-- Name: tenant_of_quote(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.tenant_of_quote() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF NEW.tenant_id IS NULL THEN
    SELECT q.tenant_id INTO NEW.tenant_id FROM geo.quote_snapshots q WHERE q.quote_id = NEW.quote_id;
  END IF;
  RETURN NEW;
END $$;

ALTER FUNCTION geo.tenant_of_quote() OWNER TO geo_owner;

--
-- Name: tenant_of_run(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.tenant_of_run() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF NEW.tenant_id IS NULL THEN
    SELECT r.tenant_id INTO NEW.tenant_id FROM geo.runs r WHERE r.run_id = NEW.run_id;
  END IF;
  RETURN NEW;
END $$;

ALTER FUNCTION geo.tenant_of_run() OWNER TO geo_owner;

--
-- Name: tenant_of_sample(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.tenant_of_sample() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF NEW.tenant_id IS NULL THEN
    SELECT s.tenant_id INTO NEW.tenant_id FROM geo.samples s WHERE s.sample_id = NEW.sample_id;
  END IF;
  RETURN NEW;
END $$;

ALTER FUNCTION geo.tenant_of_sample() OWNER TO geo_owner;

--
-- Name: touch_sample(); Type: FUNCTION; Schema: geo; Owner: geo_owner
--

CREATE FUNCTION geo.touch_sample() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  NEW.updated_at := now();
  RETURN NEW;
END $$;

ALTER FUNCTION geo.touch_sample() OWNER TO geo_owner;

--
-- Name: brand_changes; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.brand_changes WITH (security_invoker='true') AS
 SELECT brand_day_changes.tenant_id,
    brand_day_changes.monitor_id,
    brand_day_changes.channel,
    brand_day_changes.brand,
    brand_day_changes.is_target,
    brand_day_changes.scheduled_for,
    brand_day_changes.comparison,
    brand_day_changes.prev_from,
    brand_day_changes.prev_to,
    brand_day_changes.prev_n,
    brand_day_changes.prev_mentions,
    brand_day_changes.prev_mention_rate,
    brand_day_changes.n,
    brand_day_changes.mentions,
    brand_day_changes.mention_rate,
    brand_day_changes.rate_change,
    brand_day_changes.questions,
    brand_day_changes.df,
    brand_day_changes.z,
    brand_day_changes.p_value,
    brand_day_changes.family,
    brand_day_changes.family_size,
    brand_day_changes.fdr_q,
    brand_day_changes.q_value,
    brand_day_changes.flagged
   FROM analytics.brand_day_changes;

ALTER TABLE analytics.brand_changes OWNER TO geo_owner;

--
-- Name: brand_metrics; Type: TABLE; Schema: analytics; Owner: geo_owner
--

CREATE TABLE analytics.brand_metrics (
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    monitor_id text,
    scheduled_for date,
    channel text NOT NULL,
    platform text NOT NULL,
    device text NOT NULL,
    region text NOT NULL,
    mode text NOT NULL,
    question_revision text NOT NULL,
    question_index integer NOT NULL,
    brand text NOT NULL,
    is_target boolean NOT NULL,
    samples integer NOT NULL,
    valid_samples integer NOT NULL,
    invalid_samples integer NOT NULL,
    analysing_samples integer NOT NULL,
    review_samples integer NOT NULL,
    n integer NOT NULL,
    mentions integer NOT NULL,
    mention_rate double precision,
    mention_rate_lower double precision,
    mention_rate_upper double precision,
    avg_rank double precision,
    domain_cited integer NOT NULL,
    citation_rate double precision,
    domain_retrieved integer NOT NULL,
    refreshed_at timestamp with time zone DEFAULT now() NOT NULL,
    collecting_samples integer DEFAULT 0 NOT NULL,
    n_effective double precision GENERATED ALWAYS AS ((n)::double precision) STORED,
    failed_samples integer DEFAULT 0 NOT NULL
);

ALTER TABLE analytics.brand_metrics OWNER TO geo_owner;

--
-- Name: brand_question_days; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.brand_question_days WITH (security_invoker='true') AS
 SELECT m.tenant_id,
    m.monitor_id,
    m.channel,
    m.brand,
    bool_or(m.is_target) AS is_target,
    m.scheduled_for,
    m.question_revision,
    (sum(m.n))::integer AS n,
    (sum(m.mentions))::integer AS mentions
   FROM analytics.brand_metrics m
  WHERE ((m.monitor_id IS NOT NULL) AND (m.scheduled_for IS NOT NULL))
  GROUP BY m.tenant_id, m.monitor_id, m.channel, m.brand, m.scheduled_for, m.question_revision;

ALTER TABLE analytics.brand_question_days OWNER TO geo_owner;

--
-- Name: config_snapshots; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.config_snapshots (
    snapshot_id text NOT NULL,
    tenant_id text NOT NULL,
    config jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT config_snapshots_snapshot_id_check CHECK ((snapshot_id ~ '^[0-9a-f]{64}$'::text))
);

ALTER TABLE geo.config_snapshots OWNER TO geo_owner;

--
-- Name: runs; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.runs (
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    monitor_id text,
    snapshot_id text NOT NULL,
    quote_id text NOT NULL,
    scheduled_for date,
    priority integer DEFAULT 5 NOT NULL,
    sample_count integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    confirmed_at timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    closed_at timestamp with time zone,
    raw_expired_at timestamp with time zone,
    log_expired_at timestamp with time zone,
    CONSTRAINT runs_priority_check CHECK (((priority >= 0) AND (priority <= 9))),
    CONSTRAINT runs_run_id_check CHECK ((run_id ~ '^[A-Za-z0-9_-]{1,64}$'::text)),
    CONSTRAINT runs_sample_count_check CHECK ((sample_count >= 0))
);

ALTER TABLE geo.runs OWNER TO geo_owner;

--
-- Name: COLUMN runs.raw_expired_at; Type: COMMENT; Schema: geo; Owner: geo_owner
--

COMMENT ON COLUMN geo.runs.raw_expired_at IS 'When retention found nothing left of the run''s raw evidence window (NULL: check it)';

--
-- Name: COLUMN runs.log_expired_at; Type: COMMENT; Schema: geo; Owner: geo_owner
--

COMMENT ON COLUMN geo.runs.log_expired_at IS 'When retention found nothing left of the run''s execution log window (NULL: check it)';

--
-- Name: question_tags; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.question_tags WITH (security_invoker='true') AS
 SELECT r.run_id,
    r.tenant_id,
    t.question_revision,
    kv.key AS tag,
    kv.value
   FROM (((geo.runs r
     JOIN geo.config_snapshots s ON ((s.snapshot_id = r.snapshot_id)))
     CROSS JOIN LATERAL jsonb_each(COALESCE((s.config -> 'question_tags'::text), '{}'::jsonb)) t(question_revision, tags))
     CROSS JOIN LATERAL jsonb_each_text(t.tags) kv(key, value));

ALTER TABLE analytics.question_tags OWNER TO geo_owner;

--
-- Name: brand_rates_by_tag; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.brand_rates_by_tag WITH (security_invoker='true') AS
 WITH per_question AS (
         SELECT m.tenant_id,
            m.run_id,
            m.monitor_id,
            m.scheduled_for,
            m.channel,
            m.brand,
            bool_or(m.is_target) AS is_target,
            t.tag,
            t.value,
            m.question_revision,
            (sum(m.n))::double precision AS m,
            (sum(m.mentions))::double precision AS x,
            (sum(m.domain_cited))::double precision AS c
           FROM (analytics.brand_metrics m
             JOIN analytics.question_tags t ON (((t.run_id = m.run_id) AND (t.question_revision = m.question_revision))))
          GROUP BY m.tenant_id, m.run_id, m.monitor_id, m.scheduled_for, m.channel, m.brand, t.tag, t.value, m.question_revision
         HAVING (sum(m.n) > 0)
        ), agg AS (
         SELECT per_question.tenant_id,
            per_question.run_id,
            per_question.monitor_id,
            per_question.scheduled_for,
            per_question.channel,
            per_question.brand,
            bool_or(per_question.is_target) AS is_target,
            per_question.tag,
            per_question.value,
            count(*) AS k,
            sum(per_question.m) AS m,
            sum(per_question.x) AS x,
            sum((per_question.x * per_question.x)) AS sxx,
            sum((per_question.x * per_question.m)) AS sxm,
            sum(per_question.c) AS c,
            sum((per_question.c * per_question.c)) AS scc,
            sum((per_question.c * per_question.m)) AS scm,
            sum((per_question.m * per_question.m)) AS smm
           FROM per_question
          GROUP BY per_question.tenant_id, per_question.run_id, per_question.monitor_id, per_question.scheduled_for, per_question.channel, per_question.brand, per_question.tag, per_question.value
        ), est AS (
         SELECT a.tenant_id,
            a.run_id,
            a.monitor_id,
            a.scheduled_for,
            a.channel,
            a.brand,
            a.is_target,
            a.tag,
            a.value,
            a.k,
            a.m,
            a.x,
            a.sxx,
            a.sxm,
            a.c,
            a.scc,
            a.scm,
            a.smm,
            (a.x / a.m) AS rate,
            (a.c / a.m) AS crate,
            (a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm)) AS n_eff,
            (a.m / analytics.design_effect(a.k, a.c, a.m, a.scc, a.scm, a.smm)) AS c_n_eff
           FROM agg a
        )
 SELECT est.tenant_id,
    est.run_id,
    est.monitor_id,
    est.scheduled_for,
    est.channel,
    est.brand,
    est.is_target,
    est.tag,
    est.value,
    (est.k)::integer AS questions,
    (est.m)::integer AS n,
    (est.x)::integer AS mentions,
    est.rate AS mention_rate,
    est.n_eff AS n_effective,
    analytics.clustered_wilson_lower(est.rate, est.n_eff, ((est.k - 1))::integer) AS mention_rate_lower,
    analytics.clustered_wilson_upper(est.rate, est.n_eff, ((est.k - 1))::integer) AS mention_rate_upper,
    (est.c)::integer AS domain_cited,
    est.crate AS citation_rate,
    est.c_n_eff AS citation_n_effective,
    analytics.clustered_wilson_lower(est.crate, est.c_n_eff, ((est.k - 1))::integer) AS citation_rate_lower,
    analytics.clustered_wilson_upper(est.crate, est.c_n_eff, ((est.k - 1))::integer) AS citation_rate_upper,
        CASE
            WHEN (est.k >= 2) THEN (('question-clustered, '::text || est.k) || ' questions'::text)
            ELSE 'Wilson, 1 question'::text
        END AS interval_method
   FROM est;

ALTER TABLE analytics.brand_rates_by_tag OWNER TO geo_owner;

--
-- Name: brand_trends; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.brand_trends WITH (security_invoker='true') AS
 SELECT brand_day_trends.tenant_id,
    brand_day_trends.monitor_id,
    brand_day_trends.channel,
    brand_day_trends.brand,
    brand_day_trends.is_target,
    brand_day_trends.scheduled_for,
    brand_day_trends.run_ids,
    brand_day_trends.n,
    brand_day_trends.mentions,
    brand_day_trends.questions,
    brand_day_trends.mention_rate,
    brand_day_trends.design_effect,
    brand_day_trends.n_effective,
    brand_day_trends.mention_rate_lower,
    brand_day_trends.mention_rate_upper,
    brand_day_trends.n_7d,
    brand_day_trends.mentions_7d,
    brand_day_trends.questions_7d,
    brand_day_trends.mention_rate_7d,
    brand_day_trends.n_effective_7d,
    brand_day_trends.mention_rate_7d_lower,
    brand_day_trends.mention_rate_7d_upper,
    brand_day_trends.flagged_day_over_day,
    brand_day_trends.flagged_rolling_7d,
    brand_day_trends.mention_rate_interval
   FROM analytics.brand_day_trends;

ALTER TABLE analytics.brand_trends OWNER TO geo_owner;

--
-- Name: channel_brand_metrics; Type: TABLE; Schema: analytics; Owner: geo_owner
--

CREATE TABLE analytics.channel_brand_metrics (
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    monitor_id text,
    scheduled_for date,
    channel text NOT NULL,
    platform text NOT NULL,
    brand text NOT NULL,
    is_target boolean NOT NULL,
    samples integer NOT NULL,
    valid_samples integer NOT NULL,
    invalid_samples integer NOT NULL,
    analysing_samples integer NOT NULL,
    review_samples integer NOT NULL,
    n integer NOT NULL,
    mentions integer NOT NULL,
    mention_rate double precision,
    mention_rate_wilson_lower double precision,
    mention_rate_wilson_upper double precision,
    avg_rank double precision,
    domain_cited integer NOT NULL,
    citation_rate double precision,
    refreshed_at timestamp with time zone DEFAULT now() NOT NULL,
    collecting_samples integer DEFAULT 0 NOT NULL,
    questions integer,
    design_effect double precision,
    n_effective double precision,
    mention_rate_lower double precision,
    mention_rate_upper double precision,
    citation_design_effect double precision,
    citation_n_effective double precision,
    citation_rate_lower double precision,
    citation_rate_upper double precision,
    mention_rate_interval text GENERATED ALWAYS AS (
CASE
    WHEN (questions IS NULL) THEN NULL::text
    WHEN (questions >= 2) THEN (('question-clustered, '::text || questions) || ' questions'::text)
    ELSE 'Wilson, 1 question'::text
END) STORED,
    failed_samples integer DEFAULT 0 NOT NULL
);

ALTER TABLE analytics.channel_brand_metrics OWNER TO geo_owner;

--
-- Name: run_brands; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.run_brands WITH (security_invoker='true') AS
 SELECT r.run_id,
    ((c.config -> 'brand'::text) ->> 'name'::text) AS brand,
    true AS is_target,
    0 AS brand_order
   FROM (geo.runs r
     JOIN geo.config_snapshots c USING (snapshot_id))
UNION ALL
 SELECT r.run_id,
    (comp.value ->> 'name'::text) AS brand,
    false AS is_target,
    (comp.ordinality)::integer AS brand_order
   FROM ((geo.runs r
     JOIN geo.config_snapshots c USING (snapshot_id))
     CROSS JOIN LATERAL jsonb_array_elements((c.config -> 'competitors'::text)) WITH ORDINALITY comp(value, ordinality));

ALTER TABLE analytics.run_brands OWNER TO geo_owner;

--
-- Name: analysis_current; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.analysis_current (
    sample_id text NOT NULL,
    detector_version text NOT NULL,
    answer_revision integer NOT NULL,
    tenant_id text NOT NULL
);

ALTER TABLE geo.analysis_current OWNER TO geo_owner;

--
-- Name: answers; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.answers (
    sample_id text NOT NULL,
    revision integer NOT NULL,
    attempt_no integer NOT NULL,
    upstream_id text,
    raw_text text,
    sanitized_html text NOT NULL,
    raw_sha256 character(64) NOT NULL,
    captured_at timestamp with time zone NOT NULL,
    provider_truncated boolean DEFAULT false NOT NULL,
    validity text NOT NULL,
    validity_reason text,
    validity_rule_version text NOT NULL,
    warnings text[] DEFAULT '{}'::text[] NOT NULL,
    stored_at timestamp with time zone DEFAULT now() NOT NULL,
    content_sha256 character(64),
    raw_expired_at timestamp with time zone,
    search_queries text[],
    web_search_used boolean,
    tenant_id text NOT NULL,
    CONSTRAINT answers_revision_check CHECK ((revision >= 1)),
    CONSTRAINT answers_validity_check CHECK ((validity = ANY (ARRAY['valid'::text, 'invalid'::text]))),
    CONSTRAINT invalid_has_reason CHECK (((validity = 'valid'::text) OR (validity_reason IS NOT NULL))),
    CONSTRAINT raw_text_or_expired CHECK (((raw_text IS NOT NULL) OR (raw_expired_at IS NOT NULL)))
);

ALTER TABLE geo.answers OWNER TO geo_owner;

--
-- Name: review_decisions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.review_decisions (
    decision_id bigint NOT NULL,
    sample_id text NOT NULL,
    subject text NOT NULL,
    verdict text NOT NULL,
    note text,
    actor text NOT NULL,
    decided_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL
);

ALTER TABLE geo.review_decisions OWNER TO geo_owner;

--
-- Name: samples; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.samples (
    sample_id text NOT NULL,
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    batch_no integer NOT NULL,
    question_revision text NOT NULL,
    question_index integer NOT NULL,
    platform text NOT NULL,
    device text NOT NULL,
    region text NOT NULL,
    mode text NOT NULL,
    repeat_index integer NOT NULL,
    channel text GENERATED ALWAYS AS (((platform || '__'::text) || device)) STORED,
    screenshot_policy text NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    submission_state text DEFAULT 'planned'::text NOT NULL,
    collection_state text DEFAULT 'queued'::text NOT NULL,
    evidence_state text DEFAULT 'pending'::text NOT NULL,
    analysis_state text DEFAULT 'pending'::text NOT NULL,
    submission_reason text,
    collection_reason text,
    evidence_reason text,
    analysis_reason text,
    attempt_no integer DEFAULT 0 NOT NULL,
    fencing_token bigint DEFAULT 0 NOT NULL,
    lease_owner text,
    lease_until timestamp with time zone,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    upstream_id text,
    accepted_at timestamp with time zone,
    completed_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT accepted_has_upstream_id CHECK (((submission_state <> 'accepted'::text) OR (upstream_id IS NOT NULL))),
    CONSTRAINT analysis_after_evidence CHECK (((analysis_state = 'pending'::text) OR (evidence_state = ANY (ARRAY['stored'::text, 'partial'::text])))),
    CONSTRAINT completed_needs_acceptance CHECK (((collection_state <> 'completed'::text) OR (submission_state = 'accepted'::text))),
    CONSTRAINT evidence_after_completion CHECK (((evidence_state = ANY (ARRAY['pending'::text, 'failed'::text])) OR (collection_state = 'completed'::text))),
    CONSTRAINT running_holds_lease CHECK (((collection_state <> 'running'::text) OR (lease_until IS NOT NULL))),
    CONSTRAINT sample_id_is_identity_hash CHECK ((sample_id = geo.sample_id_for(run_id, question_revision, platform, device, region, mode, repeat_index))),
    CONSTRAINT samples_analysis_state_check CHECK ((analysis_state = ANY (ARRAY['pending'::text, 'accepted'::text, 'review'::text, 'failed'::text]))),
    CONSTRAINT samples_attempt_no_check CHECK ((attempt_no >= 0)),
    CONSTRAINT samples_collection_state_check CHECK ((collection_state = ANY (ARRAY['queued'::text, 'running'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT samples_evidence_state_check CHECK ((evidence_state = ANY (ARRAY['pending'::text, 'stored'::text, 'partial'::text, 'failed'::text]))),
    CONSTRAINT samples_fencing_token_check CHECK ((fencing_token >= 0)),
    CONSTRAINT samples_priority_check CHECK (((priority >= 0) AND (priority <= 9))),
    CONSTRAINT samples_question_index_check CHECK ((question_index >= 0)),
    CONSTRAINT samples_repeat_index_check CHECK ((repeat_index >= 0)),
    CONSTRAINT samples_screenshot_policy_check CHECK ((screenshot_policy = ANY (ARRAY['required'::text, 'optional'::text, 'off'::text]))),
    CONSTRAINT samples_submission_state_check CHECK ((submission_state = ANY (ARRAY['planned'::text, 'submitting'::text, 'accepted'::text, 'uncertain'::text])))
)
WITH (fillfactor='80');

ALTER TABLE geo.samples OWNER TO geo_owner;

--
-- Name: sample_status; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.sample_status WITH (security_invoker='true') AS
 SELECT s.sample_id,
    s.run_id,
    s.tenant_id,
    s.question_revision,
    s.question_index,
    s.platform,
    s.device,
    s.channel,
    s.region,
    s.mode,
    s.repeat_index,
    s.analysis_state,
    a.revision AS answer_revision,
    a.captured_at,
    a.validity AS validity_judged,
    a.validity_reason,
    vd.verdict AS validity_reviewed,
    COALESCE(vd.verdict, a.validity) AS validity,
        CASE
            WHEN ((s.analysis_state = 'accepted'::text) AND (COALESCE(vd.verdict, a.validity) = 'valid'::text)) THEN 'known'::text
            WHEN (s.collection_state = 'failed'::text) THEN 'failed'::text
            WHEN (s.analysis_state = 'pending'::text) THEN 'analysing'::text
            WHEN (s.analysis_state = 'review'::text) THEN 'in_review'::text
            ELSE 'excluded'::text
        END AS mention_status,
    ac.detector_version,
    ac.answer_revision AS analysed_revision,
    s.collection_state
   FROM (((geo.samples s
     LEFT JOIN LATERAL ( SELECT a1.revision,
            a1.captured_at,
            a1.validity,
            a1.validity_reason
           FROM geo.answers a1
          WHERE (a1.sample_id = s.sample_id)
          ORDER BY a1.revision DESC
         LIMIT 1) a ON (true))
     LEFT JOIN LATERAL ( SELECT d.verdict
           FROM geo.review_decisions d
          WHERE ((d.sample_id = s.sample_id) AND (d.subject = 'validity'::text))
          ORDER BY d.decision_id DESC
         LIMIT 1) vd ON (true))
     LEFT JOIN geo.analysis_current ac ON ((ac.sample_id = s.sample_id)));

ALTER TABLE analytics.sample_status OWNER TO geo_owner;

--
-- Name: mentions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.mentions (
    sample_id text NOT NULL,
    detector_version text NOT NULL,
    answer_revision integer NOT NULL,
    brand text NOT NULL,
    is_target boolean NOT NULL,
    mentioned boolean NOT NULL,
    mention_count integer NOT NULL,
    first_offset integer,
    rank integer,
    first_block integer,
    position_bucket text,
    domain_cited boolean DEFAULT false NOT NULL,
    domain_retrieved boolean DEFAULT false NOT NULL,
    ambiguous boolean DEFAULT false NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT mention_facts_consistent CHECK (((mentioned AND (mention_count > 0) AND (first_offset IS NOT NULL)) OR ((NOT mentioned) AND (mention_count = 0)))),
    CONSTRAINT mentions_mention_count_check CHECK ((mention_count >= 0)),
    CONSTRAINT mentions_position_bucket_check CHECK ((position_bucket = ANY (ARRAY['top'::text, 'middle'::text, 'bottom'::text])))
);

ALTER TABLE geo.mentions OWNER TO geo_owner;

--
-- Name: sample_brand_facts; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.sample_brand_facts WITH (security_invoker='true') AS
 SELECT st.sample_id,
    st.run_id,
    st.tenant_id,
    r.monitor_id,
    r.scheduled_for,
    st.question_revision,
    st.question_index,
    st.platform,
    st.device,
    st.channel,
    st.region,
    st.mode,
    st.repeat_index,
    st.analysis_state,
    st.validity,
    st.mention_status,
    st.detector_version,
    b.brand,
    b.is_target,
    b.brand_order,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN COALESCE(m.mentioned, false)
            ELSE NULL::boolean
        END AS mentioned,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN COALESCE(m.mention_count, 0)
            ELSE NULL::integer
        END AS mention_count,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN m.first_offset
            ELSE NULL::integer
        END AS first_offset,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN m.rank
            ELSE NULL::integer
        END AS rank,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN m.first_block
            ELSE NULL::integer
        END AS first_block,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN m.position_bucket
            ELSE NULL::text
        END AS position_bucket,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN COALESCE(m.domain_cited, false)
            ELSE NULL::boolean
        END AS domain_cited,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN COALESCE(m.domain_retrieved, false)
            ELSE NULL::boolean
        END AS domain_retrieved,
    m.ambiguous
   FROM (((analytics.sample_status st
     JOIN geo.runs r ON ((r.run_id = st.run_id)))
     JOIN analytics.run_brands b ON ((b.run_id = st.run_id)))
     LEFT JOIN geo.mentions m ON (((m.sample_id = st.sample_id) AND (m.detector_version = st.detector_version) AND (m.answer_revision = st.analysed_revision) AND (m.brand = b.brand))));

ALTER TABLE analytics.sample_brand_facts OWNER TO geo_owner;

--
-- Name: run_platforms; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.run_platforms (
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    platform text NOT NULL,
    access text NOT NULL,
    engine text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_platforms_access_check CHECK ((access = ANY (ARRAY['api'::text, 'scraped'::text, 'browser'::text]))),
    CONSTRAINT run_platforms_engine_check CHECK ((engine <> ''::text))
);

ALTER TABLE geo.run_platforms OWNER TO geo_owner;

--
-- Name: counted_answers; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.counted_answers WITH (security_invoker='true') AS
 SELECT f.tenant_id,
    f.run_id,
    f.monitor_id,
    f.scheduled_for,
    f.channel,
    f.platform,
    f.device,
    f.region,
    f.mode,
    f.question_revision,
    f.question_index,
    f.repeat_index,
    f.sample_id,
    st.analysed_revision AS answer_revision,
    COALESCE(p.access, 'unknown'::text) AS access,
    COALESCE(p.engine, f.platform) AS engine,
    a.web_search_used AS searched,
    a.search_queries,
    COALESCE(cardinality(a.search_queries), 0) AS query_count,
    f.mentioned AS target_mentioned,
    f.rank AS target_rank
   FROM (((analytics.sample_brand_facts f
     JOIN analytics.sample_status st ON ((st.sample_id = f.sample_id)))
     JOIN geo.answers a ON (((a.sample_id = f.sample_id) AND (a.revision = st.analysed_revision))))
     LEFT JOIN geo.run_platforms p ON (((p.run_id = f.run_id) AND (p.platform = f.platform))))
  WHERE (f.is_target AND (f.mention_status = 'known'::text));

ALTER TABLE analytics.counted_answers OWNER TO geo_owner;

--
-- Name: citations; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.citations (
    sample_id text NOT NULL,
    revision integer NOT NULL,
    ordinal integer NOT NULL,
    citation_key text,
    relation text NOT NULL,
    raw_url text NOT NULL,
    normalized_url text NOT NULL,
    registrable_domain text,
    title text,
    span_start integer,
    span_end integer,
    cited_text text,
    tenant_id text NOT NULL,
    CONSTRAINT citations_ordinal_check CHECK ((ordinal >= 0)),
    CONSTRAINT citations_relation_check CHECK ((relation = ANY (ARRAY['cited'::text, 'retrieved'::text])))
);

ALTER TABLE geo.citations OWNER TO geo_owner;

--
-- Name: citation_gap; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.citation_gap WITH (security_invoker='true') AS
 WITH who AS (
         SELECT k.run_id,
            k.channel,
            k.sample_id,
            k.answer_revision,
            k.question_revision,
            bool_or(f.mentioned) FILTER (WHERE f.is_target) AS names_brand,
            bool_or(f.mentioned) FILTER (WHERE (NOT f.is_target)) AS names_competitor,
            array_agg(f.brand ORDER BY f.brand_order) FILTER (WHERE ((NOT f.is_target) AND f.mentioned)) AS competitors
           FROM (analytics.counted_answers k
             JOIN analytics.sample_brand_facts f ON ((f.sample_id = k.sample_id)))
          GROUP BY k.run_id, k.channel, k.sample_id, k.answer_revision, k.question_revision
        ), channel_n AS (
         SELECT counted_answers.tenant_id,
            counted_answers.run_id,
            counted_answers.monitor_id,
            counted_answers.scheduled_for,
            counted_answers.channel,
            counted_answers.platform,
            counted_answers.access,
            counted_answers.engine,
            count(*) AS n
           FROM analytics.counted_answers
          GROUP BY counted_answers.tenant_id, counted_answers.run_id, counted_answers.monitor_id, counted_answers.scheduled_for, counted_answers.channel, counted_answers.platform, counted_answers.access, counted_answers.engine
        ), cited AS (
         SELECT DISTINCT w.run_id,
            w.channel,
            w.sample_id,
            w.question_revision,
            w.names_brand,
            w.names_competitor,
            w.competitors,
            c.registrable_domain AS domain
           FROM (who w
             JOIN geo.citations c ON (((c.sample_id = w.sample_id) AND (c.revision = w.answer_revision))))
          WHERE ((c.relation = 'cited'::text) AND (c.registrable_domain IS NOT NULL))
        ), per_domain AS (
         SELECT cited.run_id,
            cited.channel,
            cited.domain,
            count(*) FILTER (WHERE cited.names_competitor) AS cited_with_competitor,
            count(*) FILTER (WHERE cited.names_brand) AS cited_with_brand,
            count(DISTINCT cited.question_revision) FILTER (WHERE cited.names_competitor) AS questions
           FROM cited
          GROUP BY cited.run_id, cited.channel, cited.domain
        ), named AS (
         SELECT c.run_id,
            c.channel,
            c.domain,
            array_agg(DISTINCT b.brand ORDER BY b.brand) AS competitors
           FROM (cited c
             CROSS JOIN LATERAL unnest(c.competitors) b(brand))
          WHERE c.names_competitor
          GROUP BY c.run_id, c.channel, c.domain
        )
 SELECT n.tenant_id,
    n.run_id,
    n.monitor_id,
    n.scheduled_for,
    n.channel,
    n.platform,
    n.access,
    n.engine,
    d.domain,
    (n.n)::integer AS n,
    (d.cited_with_competitor)::integer AS cited_with_competitor,
    ((d.cited_with_competitor)::double precision / (n.n)::double precision) AS cited_with_competitor_share,
    (d.questions)::integer AS questions,
    nm.competitors
   FROM ((per_domain d
     JOIN channel_n n ON (((n.run_id = d.run_id) AND (n.channel = d.channel))))
     LEFT JOIN named nm ON (((nm.run_id = d.run_id) AND (nm.channel = d.channel) AND (nm.domain = d.domain))))
  WHERE ((d.cited_with_competitor > 0) AND (d.cited_with_brand = 0));

ALTER TABLE analytics.citation_gap OWNER TO geo_owner;

--
-- Name: partition_publications; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.partition_publications (
    publication_id bigint NOT NULL,
    run_id text NOT NULL,
    channel text NOT NULL,
    published_at timestamp with time zone DEFAULT now() NOT NULL,
    dagster_run_id text,
    basis text NOT NULL,
    deadline_at timestamp with time zone NOT NULL,
    samples integer NOT NULL,
    included integer NOT NULL,
    excluded integer NOT NULL,
    excluded_reasons jsonb DEFAULT '{}'::jsonb NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT complete_excludes_nothing CHECK (((basis = 'deadline'::text) OR (excluded = 0))),
    CONSTRAINT partition_publications_basis_check CHECK ((basis = ANY (ARRAY['complete'::text, 'deadline'::text]))),
    CONSTRAINT partition_publications_excluded_check CHECK ((excluded >= 0)),
    CONSTRAINT partition_publications_included_check CHECK ((included >= 0)),
    CONSTRAINT partition_publications_samples_check CHECK ((samples >= 0)),
    CONSTRAINT publication_adds_up CHECK (((included + excluded) = samples))
);

ALTER TABLE geo.partition_publications OWNER TO geo_owner;

--
-- Name: partition_publications; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.partition_publications WITH (security_invoker='true') AS
 SELECT p.run_id,
    p.channel,
    r.tenant_id,
    r.monitor_id,
    r.scheduled_for,
    p.publication_id,
    p.published_at,
    p.basis,
    p.deadline_at,
    p.samples,
    p.included,
    p.excluded,
    ((p.excluded)::double precision / (NULLIF(p.samples, 0))::double precision) AS excluded_share,
    p.excluded_reasons
   FROM (( SELECT DISTINCT ON (partition_publications.run_id, partition_publications.channel) partition_publications.publication_id,
            partition_publications.run_id,
            partition_publications.channel,
            partition_publications.published_at,
            partition_publications.dagster_run_id,
            partition_publications.basis,
            partition_publications.deadline_at,
            partition_publications.samples,
            partition_publications.included,
            partition_publications.excluded,
            partition_publications.excluded_reasons
           FROM geo.partition_publications
          ORDER BY partition_publications.run_id, partition_publications.channel, partition_publications.publication_id DESC) p
     JOIN geo.runs r ON ((r.run_id = p.run_id)));

ALTER TABLE analytics.partition_publications OWNER TO geo_owner;

--
-- Name: publication_exclusions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.publication_exclusions (
    publication_id bigint NOT NULL,
    sample_id text NOT NULL,
    reason text NOT NULL,
    submission_state text NOT NULL,
    collection_state text NOT NULL,
    attempt_no integer NOT NULL,
    tenant_id text NOT NULL
);

ALTER TABLE geo.publication_exclusions OWNER TO geo_owner;

--
-- Name: excluded_samples; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.excluded_samples WITH (security_invoker='true') AS
 SELECT p.run_id,
    p.channel,
    p.tenant_id,
    p.monitor_id,
    p.scheduled_for,
    p.publication_id,
    p.published_at,
    p.deadline_at,
    e.sample_id,
    e.reason,
    e.submission_state,
    e.collection_state,
    e.attempt_no,
    s.submission_state AS current_submission_state,
    s.collection_state AS current_collection_state,
    (geo.exclusion_reason(s.submission_state, s.collection_state, s.attempt_no) IS NOT NULL) AS still_excluded
   FROM ((analytics.partition_publications p
     JOIN geo.publication_exclusions e ON ((e.publication_id = p.publication_id)))
     JOIN geo.samples s ON ((s.sample_id = e.sample_id)));

ALTER TABLE analytics.excluded_samples OWNER TO geo_owner;

--
-- Name: fan_out; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.fan_out WITH (security_invoker='true') AS
 WITH per_question AS (
         SELECT counted_answers.tenant_id,
            counted_answers.run_id,
            counted_answers.monitor_id,
            counted_answers.scheduled_for,
            counted_answers.channel,
            counted_answers.platform,
            counted_answers.access,
            counted_answers.engine,
            counted_answers.question_revision,
            min(counted_answers.question_index) AS question_index,
            count(*) AS answers,
            count(*) FILTER (WHERE counted_answers.searched) AS answers_searched,
            count(*) FILTER (WHERE (counted_answers.searched IS NULL)) AS answers_search_unknown,
            sum(counted_answers.query_count) AS queries,
            count(*) FILTER (WHERE (counted_answers.searched AND counted_answers.target_mentioned)) AS mentions_searched,
            count(*) FILTER (WHERE ((counted_answers.searched IS FALSE) AND counted_answers.target_mentioned)) AS mentions_not_searched,
            count(*) FILTER (WHERE (counted_answers.searched IS FALSE)) AS answers_not_searched
           FROM analytics.counted_answers
          GROUP BY counted_answers.tenant_id, counted_answers.run_id, counted_answers.monitor_id, counted_answers.scheduled_for, counted_answers.channel, counted_answers.platform, counted_answers.access, counted_answers.engine, counted_answers.question_revision
        ), distinct_q AS (
         SELECT k.run_id,
            k.channel,
            k.question_revision,
            count(DISTINCT lower(btrim(q.query))) AS distinct_queries
           FROM (analytics.counted_answers k
             CROSS JOIN LATERAL unnest(k.search_queries) q(query))
          WHERE (btrim(q.query) <> ''::text)
          GROUP BY k.run_id, k.channel, k.question_revision
        )
 SELECT p.tenant_id,
    p.run_id,
    p.monitor_id,
    p.scheduled_for,
    p.channel,
    p.platform,
    p.access,
    p.engine,
    p.question_revision,
    p.question_index,
    (p.answers)::integer AS answers,
    (p.answers_searched)::integer AS answers_searched,
    (p.answers_not_searched)::integer AS answers_not_searched,
    (p.answers_search_unknown)::integer AS answers_search_unknown,
    ((p.answers_searched)::double precision / (p.answers)::double precision) AS share_searched,
    (p.queries)::integer AS queries,
    (COALESCE(d.distinct_queries, (0)::bigint))::integer AS distinct_queries,
    (p.mentions_searched)::integer AS mentions_searched,
    (p.mentions_not_searched)::integer AS mentions_not_searched
   FROM (per_question p
     LEFT JOIN distinct_q d ON (((d.run_id = p.run_id) AND (d.channel = p.channel) AND (d.question_revision = p.question_revision))));

ALTER TABLE analytics.fan_out OWNER TO geo_owner;

--
-- Name: fan_out_channels; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.fan_out_channels WITH (security_invoker='true') AS
 WITH agg AS (
         SELECT fan_out.tenant_id,
            fan_out.run_id,
            fan_out.monitor_id,
            fan_out.scheduled_for,
            fan_out.channel,
            fan_out.platform,
            fan_out.access,
            fan_out.engine,
            count(*) AS k,
            (sum(fan_out.answers))::double precision AS m,
            (sum(fan_out.answers_searched))::double precision AS x,
            sum(((fan_out.answers_searched)::double precision * (fan_out.answers_searched)::double precision)) AS sxx,
            sum(((fan_out.answers_searched)::double precision * (fan_out.answers)::double precision)) AS sxm,
            sum(((fan_out.answers)::double precision * (fan_out.answers)::double precision)) AS smm,
            sum(fan_out.answers_not_searched) AS answers_not_searched,
            sum(fan_out.answers_search_unknown) AS answers_search_unknown,
            sum(fan_out.queries) AS queries,
            sum(fan_out.distinct_queries) AS distinct_queries,
            sum(fan_out.mentions_searched) AS mentions_searched,
            sum(fan_out.mentions_not_searched) AS mentions_not_searched
           FROM analytics.fan_out
          GROUP BY fan_out.tenant_id, fan_out.run_id, fan_out.monitor_id, fan_out.scheduled_for, fan_out.channel, fan_out.platform, fan_out.access, fan_out.engine
        ), est AS (
         SELECT a.tenant_id,
            a.run_id,
            a.monitor_id,
            a.scheduled_for,
            a.channel,
            a.platform,
            a.access,
            a.engine,
            a.k,
            a.m,
            a.x,
            a.sxx,
            a.sxm,
            a.smm,
            a.answers_not_searched,
            a.answers_search_unknown,
            a.queries,
            a.distinct_queries,
            a.mentions_searched,
            a.mentions_not_searched,
            (a.x / a.m) AS rate,
            (a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm)) AS n_eff
           FROM agg a
        )
 SELECT est.tenant_id,
    est.run_id,
    est.monitor_id,
    est.scheduled_for,
    est.channel,
    est.platform,
    est.access,
    est.engine,
    (est.k)::integer AS questions,
    (est.m)::integer AS answers,
    (est.x)::integer AS answers_searched,
    est.rate AS share_searched,
    est.n_eff AS share_searched_n_effective,
    analytics.clustered_wilson_lower(est.rate, est.n_eff, ((est.k - 1))::integer) AS share_searched_lower,
    analytics.clustered_wilson_upper(est.rate, est.n_eff, ((est.k - 1))::integer) AS share_searched_upper,
        CASE
            WHEN (est.k >= 2) THEN (('question-clustered, '::text || est.k) || ' questions'::text)
            ELSE 'Wilson, 1 question'::text
        END AS share_searched_interval,
    (est.queries)::integer AS queries,
    (est.distinct_queries)::integer AS distinct_queries,
    ((est.queries)::double precision / est.m) AS queries_per_answer,
    (est.answers_not_searched)::integer AS answers_not_searched,
    (est.answers_search_unknown)::integer AS answers_search_unknown,
    (est.mentions_searched)::integer AS mentions_searched,
        CASE
            WHEN (est.x > (0)::double precision) THEN ((est.mentions_searched)::double precision / est.x)
            ELSE NULL::double precision
        END AS mention_rate_searched,
    (est.mentions_not_searched)::integer AS mentions_not_searched,
        CASE
            WHEN (est.answers_not_searched > 0) THEN ((est.mentions_not_searched)::double precision / (est.answers_not_searched)::double precision)
            ELSE NULL::double precision
        END AS mention_rate_not_searched
   FROM est;

ALTER TABLE analytics.fan_out_channels OWNER TO geo_owner;

--
-- Name: analysis_results; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.analysis_results (
    sample_id text NOT NULL,
    detector_version text NOT NULL,
    answer_revision integer NOT NULL,
    state text NOT NULL,
    reason text,
    analysed_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT analysis_results_state_check CHECK ((state = ANY (ARRAY['accepted'::text, 'review'::text, 'failed'::text])))
);

ALTER TABLE geo.analysis_results OWNER TO geo_owner;

--
-- Name: question_revisions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.question_revisions (
    question_revision text NOT NULL,
    text text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT question_revisions_question_revision_check CHECK ((question_revision ~ '^q[0-9a-f]{20}$'::text))
);

ALTER TABLE geo.question_revisions OWNER TO geo_owner;

--
-- Name: sample_facts; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.sample_facts WITH (security_invoker='true') AS
 SELECT st.sample_id,
    st.run_id,
    st.tenant_id,
    r.monitor_id,
    r.scheduled_for,
    st.question_revision,
    st.question_index,
    q.text AS question_text,
    st.platform,
    st.device,
    st.channel,
    st.region,
    st.mode,
    st.repeat_index,
    s.attempt_no,
    s.submission_state,
    s.collection_state,
    s.evidence_state,
    s.analysis_state,
    s.submission_reason,
    s.collection_reason,
    s.evidence_reason,
    s.analysis_reason,
    s.upstream_id,
    s.completed_at,
    st.answer_revision,
    st.captured_at,
    st.validity_judged,
    st.validity_reason,
    st.validity_reviewed,
    st.validity,
    st.mention_status,
    st.detector_version,
    ar.analysed_at,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN COALESCE(tm.mentioned, false)
            ELSE NULL::boolean
        END AS target_mentioned,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN tm.rank
            ELSE NULL::integer
        END AS target_rank,
        CASE
            WHEN (st.mention_status = 'known'::text) THEN ( SELECT count(*) AS count
               FROM geo.mentions m
              WHERE ((m.sample_id = st.sample_id) AND (m.detector_version = st.detector_version) AND (m.answer_revision = st.analysed_revision) AND m.mentioned))
            ELSE NULL::bigint
        END AS brands_mentioned
   FROM (((((analytics.sample_status st
     JOIN geo.samples s ON ((s.sample_id = st.sample_id)))
     JOIN geo.runs r ON ((r.run_id = st.run_id)))
     JOIN geo.question_revisions q ON ((q.question_revision = st.question_revision)))
     LEFT JOIN geo.analysis_results ar ON (((ar.sample_id = st.sample_id) AND (ar.detector_version = st.detector_version) AND (ar.answer_revision = st.analysed_revision))))
     LEFT JOIN geo.mentions tm ON (((tm.sample_id = st.sample_id) AND (tm.detector_version = st.detector_version) AND (tm.answer_revision = st.analysed_revision) AND tm.is_target)));

ALTER TABLE analytics.sample_facts OWNER TO geo_owner;

--
-- Name: share_of_voice; Type: TABLE; Schema: analytics; Owner: geo_owner
--

CREATE TABLE analytics.share_of_voice (
    run_id text NOT NULL,
    monitor_id text,
    scheduled_for date,
    channel text NOT NULL,
    region text NOT NULL,
    mode text NOT NULL,
    brand text NOT NULL,
    is_target boolean NOT NULL,
    n integer NOT NULL,
    answers_mentioning_brand integer NOT NULL,
    answers_mentioning_any_tracked_brand integer NOT NULL,
    share_of_answers_mentioning_any_brand double precision,
    brand_mentions integer NOT NULL,
    all_tracked_mentions integer NOT NULL,
    share_of_all_tracked_mentions double precision,
    refreshed_at timestamp with time zone DEFAULT now() NOT NULL,
    questions integer,
    share_design_effect double precision,
    share_n_effective double precision,
    share_of_answers_lower double precision,
    share_of_answers_upper double precision,
    tenant_id text NOT NULL
);

ALTER TABLE analytics.share_of_voice OWNER TO geo_owner;

--
-- Name: source_domains; Type: TABLE; Schema: analytics; Owner: geo_owner
--

CREATE TABLE analytics.source_domains (
    run_id text NOT NULL,
    monitor_id text,
    scheduled_for date,
    platform text NOT NULL,
    registrable_domain text NOT NULL,
    relation text NOT NULL,
    citations integer NOT NULL,
    answers integer NOT NULL,
    valid_answers integer NOT NULL,
    answer_rate double precision,
    refreshed_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL
);

ALTER TABLE analytics.source_domains OWNER TO geo_owner;

--
-- Name: mention_stances; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.mention_stances (
    sample_id text NOT NULL,
    detector_version text NOT NULL,
    answer_revision integer NOT NULL,
    brand text NOT NULL,
    stance_version text NOT NULL,
    stance text NOT NULL,
    attributes text[] DEFAULT '{}'::text[] NOT NULL,
    computed_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT mention_stances_attributes_check CHECK ((attributes <@ ARRAY['price'::text, 'quality'::text, 'service'::text, 'taste'::text, 'convenience'::text, 'availability'::text, 'safety'::text, 'sustainability'::text, 'brand_reputation'::text, 'design'::text, 'other'::text])),
    CONSTRAINT mention_stances_stance_check CHECK ((stance = ANY (ARRAY['recommended'::text, 'neutral'::text, 'cautioned'::text, 'negative'::text])))
);

ALTER TABLE geo.mention_stances OWNER TO geo_owner;

--
-- Name: stance_question_counts; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.stance_question_counts WITH (security_invoker='true') AS
 SELECT st.tenant_id,
    st.run_id,
    r.monitor_id,
    r.scheduled_for,
    st.channel,
    m.brand,
    bool_or(m.is_target) AS is_target,
    st.question_revision,
    ms.stance_version,
    s.stance,
    (count(*))::double precision AS m,
    (count(*) FILTER (WHERE (ms.stance = s.stance)))::double precision AS x
   FROM ((((analytics.sample_status st
     JOIN geo.runs r ON ((r.run_id = st.run_id)))
     JOIN geo.mentions m ON (((m.sample_id = st.sample_id) AND (m.detector_version = st.detector_version) AND (m.answer_revision = st.analysed_revision) AND m.mentioned)))
     JOIN geo.mention_stances ms ON (((ms.sample_id = m.sample_id) AND (ms.detector_version = m.detector_version) AND (ms.answer_revision = m.answer_revision) AND (ms.brand = m.brand))))
     CROSS JOIN unnest(ARRAY['recommended'::text, 'neutral'::text, 'cautioned'::text, 'negative'::text]) s(stance))
  WHERE (st.mention_status = 'known'::text)
  GROUP BY st.tenant_id, st.run_id, r.monitor_id, r.scheduled_for, st.channel, m.brand, st.question_revision, ms.stance_version, s.stance;

ALTER TABLE analytics.stance_question_counts OWNER TO geo_owner;

--
-- Name: stance_rates; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.stance_rates WITH (security_invoker='true') AS
 WITH agg AS (
         SELECT stance_question_counts.tenant_id,
            stance_question_counts.run_id,
            stance_question_counts.monitor_id,
            stance_question_counts.scheduled_for,
            stance_question_counts.channel,
            stance_question_counts.brand,
            bool_or(stance_question_counts.is_target) AS is_target,
            stance_question_counts.stance_version,
            stance_question_counts.stance,
            count(*) AS k,
            sum(stance_question_counts.m) AS m,
            sum(stance_question_counts.x) AS x,
            sum((stance_question_counts.x * stance_question_counts.x)) AS sxx,
            sum((stance_question_counts.x * stance_question_counts.m)) AS sxm,
            sum((stance_question_counts.m * stance_question_counts.m)) AS smm
           FROM analytics.stance_question_counts
          GROUP BY stance_question_counts.tenant_id, stance_question_counts.run_id, stance_question_counts.monitor_id, stance_question_counts.scheduled_for, stance_question_counts.channel, stance_question_counts.brand, stance_question_counts.stance_version, stance_question_counts.stance
        ), est AS (
         SELECT a.tenant_id,
            a.run_id,
            a.monitor_id,
            a.scheduled_for,
            a.channel,
            a.brand,
            a.is_target,
            a.stance_version,
            a.stance,
            a.k,
            a.m,
            a.x,
            a.sxx,
            a.sxm,
            a.smm,
            (a.x / a.m) AS rate,
            (a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm)) AS n_eff
           FROM agg a
        )
 SELECT est.tenant_id,
    est.run_id,
    est.monitor_id,
    est.scheduled_for,
    est.channel,
    est.brand,
    est.is_target,
    est.stance_version,
    est.stance,
    (est.k)::integer AS questions,
    (est.m)::integer AS n,
    (est.x)::integer AS stance_count,
    est.rate AS stance_rate,
    est.n_eff AS n_effective,
    analytics.clustered_wilson_lower(est.rate, est.n_eff, ((est.k - 1))::integer) AS stance_rate_lower,
    analytics.clustered_wilson_upper(est.rate, est.n_eff, ((est.k - 1))::integer) AS stance_rate_upper,
        CASE
            WHEN (est.k >= 2) THEN (('question-clustered, '::text || est.k) || ' questions'::text)
            ELSE 'Wilson, 1 question'::text
        END AS interval_method
   FROM est;

ALTER TABLE analytics.stance_rates OWNER TO geo_owner;

--
-- Name: stance_rates_by_tag; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.stance_rates_by_tag WITH (security_invoker='true') AS
 WITH agg AS (
         SELECT q.tenant_id,
            q.run_id,
            q.monitor_id,
            q.scheduled_for,
            q.channel,
            q.brand,
            bool_or(q.is_target) AS is_target,
            t.tag,
            t.value,
            q.stance_version,
            q.stance,
            count(*) AS k,
            sum(q.m) AS m,
            sum(q.x) AS x,
            sum((q.x * q.x)) AS sxx,
            sum((q.x * q.m)) AS sxm,
            sum((q.m * q.m)) AS smm
           FROM (analytics.stance_question_counts q
             JOIN analytics.question_tags t ON (((t.run_id = q.run_id) AND (t.question_revision = q.question_revision))))
          GROUP BY q.tenant_id, q.run_id, q.monitor_id, q.scheduled_for, q.channel, q.brand, t.tag, t.value, q.stance_version, q.stance
        ), est AS (
         SELECT a.tenant_id,
            a.run_id,
            a.monitor_id,
            a.scheduled_for,
            a.channel,
            a.brand,
            a.is_target,
            a.tag,
            a.value,
            a.stance_version,
            a.stance,
            a.k,
            a.m,
            a.x,
            a.sxx,
            a.sxm,
            a.smm,
            (a.x / a.m) AS rate,
            (a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm)) AS n_eff
           FROM agg a
        )
 SELECT est.tenant_id,
    est.run_id,
    est.monitor_id,
    est.scheduled_for,
    est.channel,
    est.brand,
    est.is_target,
    est.tag,
    est.value,
    est.stance_version,
    est.stance,
    (est.k)::integer AS questions,
    (est.m)::integer AS n,
    (est.x)::integer AS stance_count,
    est.rate AS stance_rate,
    est.n_eff AS n_effective,
    analytics.clustered_wilson_lower(est.rate, est.n_eff, ((est.k - 1))::integer) AS stance_rate_lower,
    analytics.clustered_wilson_upper(est.rate, est.n_eff, ((est.k - 1))::integer) AS stance_rate_upper,
        CASE
            WHEN (est.k >= 2) THEN (('question-clustered, '::text || est.k) || ' questions'::text)
            ELSE 'Wilson, 1 question'::text
        END AS interval_method
   FROM est;

ALTER TABLE analytics.stance_rates_by_tag OWNER TO geo_owner;

--
-- Name: ui_api_agreement; Type: VIEW; Schema: analytics; Owner: geo_owner
--

CREATE VIEW analytics.ui_api_agreement WITH (security_invoker='true') AS
 WITH side AS (
         SELECT counted_answers.tenant_id,
            counted_answers.run_id,
            counted_answers.monitor_id,
            counted_answers.scheduled_for,
            counted_answers.engine,
            counted_answers.channel,
            counted_answers.access,
            counted_answers.question_revision,
            count(*) AS n,
            count(*) FILTER (WHERE counted_answers.target_mentioned) AS n1
           FROM analytics.counted_answers
          GROUP BY counted_answers.tenant_id, counted_answers.run_id, counted_answers.monitor_id, counted_answers.scheduled_for, counted_answers.engine, counted_answers.channel, counted_answers.access, counted_answers.question_revision
        ), ranks AS (
         SELECT counted_answers.run_id,
            counted_answers.channel,
            counted_answers.question_revision,
            counted_answers.target_rank,
            count(*) AS n
           FROM analytics.counted_answers
          WHERE (counted_answers.target_mentioned AND (counted_answers.target_rank IS NOT NULL))
          GROUP BY counted_answers.run_id, counted_answers.channel, counted_answers.question_revision, counted_answers.target_rank
        ), per_q AS (
         SELECT u.tenant_id,
            u.run_id,
            u.monitor_id,
            u.scheduled_for,
            u.engine,
            u.channel AS ui_channel,
            u.access AS ui_access,
            a.channel AS api_channel,
            u.question_revision,
            u.n AS ui_answers,
            a.n AS api_answers,
            ((u.n * a.n))::double precision AS m,
            (((u.n1 * a.n1) + ((u.n - u.n1) * (a.n - a.n1))))::double precision AS x,
            ((u.n1 * a.n1))::double precision AS rm,
            (COALESCE(( SELECT sum((ru.n * ra.n)) AS sum
                   FROM (ranks ru
                     JOIN ranks ra ON ((ra.target_rank = ru.target_rank)))
                  WHERE ((ru.run_id = u.run_id) AND (ru.channel = u.channel) AND (ru.question_revision = u.question_revision) AND (ra.run_id = a.run_id) AND (ra.channel = a.channel) AND (ra.question_revision = a.question_revision))), (0)::numeric))::double precision AS rx
           FROM (side u
             JOIN side a ON (((a.run_id = u.run_id) AND (a.engine = u.engine) AND (a.question_revision = u.question_revision) AND (a.access = 'api'::text))))
          WHERE (u.access = ANY (ARRAY['scraped'::text, 'browser'::text]))
        ), agg AS (
         SELECT per_q.tenant_id,
            per_q.run_id,
            per_q.monitor_id,
            per_q.scheduled_for,
            per_q.engine,
            per_q.ui_channel,
            per_q.ui_access,
            per_q.api_channel,
            count(*) AS k,
            sum(per_q.ui_answers) AS ui_answers,
            sum(per_q.api_answers) AS api_answers,
            sum(per_q.m) AS m,
            sum(per_q.x) AS x,
            sum((per_q.x * per_q.x)) AS sxx,
            sum((per_q.x * per_q.m)) AS sxm,
            sum((per_q.m * per_q.m)) AS smm,
            count(*) FILTER (WHERE (per_q.rm > (0)::double precision)) AS rk,
            sum(per_q.rm) AS rm,
            sum(per_q.rx) AS rx,
            sum((per_q.rx * per_q.rx)) AS srxx,
            sum((per_q.rx * per_q.rm)) AS srxm,
            sum((per_q.rm * per_q.rm)) AS srmm
           FROM per_q
          GROUP BY per_q.tenant_id, per_q.run_id, per_q.monitor_id, per_q.scheduled_for, per_q.engine, per_q.ui_channel, per_q.ui_access, per_q.api_channel
        ), est AS (
         SELECT a.tenant_id,
            a.run_id,
            a.monitor_id,
            a.scheduled_for,
            a.engine,
            a.ui_channel,
            a.ui_access,
            a.api_channel,
            a.k,
            a.ui_answers,
            a.api_answers,
            a.m,
            a.x,
            a.sxx,
            a.sxm,
            a.smm,
            a.rk,
            a.rm,
            a.rx,
            a.srxx,
            a.srxm,
            a.srmm,
            (a.x / a.m) AS rate,
            (a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm)) AS n_eff,
                CASE
                    WHEN (a.rm > (0)::double precision) THEN (a.rx / a.rm)
                    ELSE NULL::double precision
                END AS rrate,
                CASE
                    WHEN (a.rm > (0)::double precision) THEN (a.rm / analytics.design_effect(a.rk, a.rx, a.rm, a.srxx, a.srxm, a.srmm))
                    ELSE NULL::double precision
                END AS r_n_eff
           FROM agg a
        )
 SELECT est.tenant_id,
    est.run_id,
    est.monitor_id,
    est.scheduled_for,
    est.engine,
    est.ui_channel,
    est.ui_access,
    est.api_channel,
    (est.k)::integer AS questions,
    (est.ui_answers)::integer AS ui_answers,
    (est.api_answers)::integer AS api_answers,
    (est.m)::integer AS pairs,
    (est.x)::integer AS agreeing_pairs,
    est.rate AS agreement,
    est.n_eff AS n_effective,
    analytics.clustered_wilson_lower(est.rate, est.n_eff, ((est.k - 1))::integer) AS agreement_lower,
    analytics.clustered_wilson_upper(est.rate, est.n_eff, ((est.k - 1))::integer) AS agreement_upper,
        CASE
            WHEN (est.k >= 2) THEN (('question-clustered, '::text || est.k) || ' questions'::text)
            ELSE 'Wilson, 1 question'::text
        END AS agreement_interval,
    (est.rk)::integer AS rank_questions,
    (est.rm)::integer AS rank_pairs,
    (est.rx)::integer AS rank_agreeing_pairs,
    est.rrate AS rank_agreement,
    est.r_n_eff AS rank_n_effective,
    analytics.clustered_wilson_lower(est.rrate, est.r_n_eff, ((est.rk - 1))::integer) AS rank_agreement_lower,
    analytics.clustered_wilson_upper(est.rrate, est.r_n_eff, ((est.rk - 1))::integer) AS rank_agreement_upper,
        CASE
            WHEN (est.rk >= 2) THEN (('question-clustered, '::text || est.rk) || ' questions'::text)
            WHEN (est.rk = 1) THEN 'Wilson, 1 question'::text
            ELSE NULL::text
        END AS rank_agreement_interval
   FROM est;

ALTER TABLE analytics.ui_api_agreement OWNER TO geo_owner;

--
-- Name: ledger_entries; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.ledger_entries (
    entry_id bigint NOT NULL,
    tenant_id text NOT NULL,
    kind text NOT NULL,
    amount_minor bigint NOT NULL,
    currency character(3) NOT NULL,
    run_id text,
    sample_id text,
    attempt_no integer,
    upstream_id text,
    price_version text,
    idempotency_key text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    adjusts text,
    CONSTRAINT adjustment_is_not_zero CHECK (((kind <> 'adjustment'::text) OR (amount_minor <> 0))),
    CONSTRAINT adjustment_says_what_it_moves CHECK (((kind = 'adjustment'::text) = (adjusts IS NOT NULL))),
    CONSTRAINT ledger_entries_adjusts_check CHECK ((adjusts = ANY (ARRAY['available'::text, 'reservation'::text]))),
    CONSTRAINT ledger_entries_kind_check CHECK ((kind = ANY (ARRAY['deposit'::text, 'estimate'::text, 'reserve'::text, 'charge'::text, 'release'::text, 'refund'::text, 'adjustment'::text]))),
    CONSTRAINT only_adjustments_are_signed CHECK (((kind = 'adjustment'::text) OR (amount_minor >= 0)))
);

ALTER TABLE geo.ledger_entries OWNER TO geo_owner;

--
-- Name: account_balances; Type: VIEW; Schema: geo; Owner: geo_owner
--

CREATE VIEW geo.account_balances WITH (security_invoker='true') AS
 SELECT ledger_entries.tenant_id,
    ledger_entries.currency,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'deposit'::text)), (0)::numeric))::bigint AS deposited_minor,
    ((((((COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'deposit'::text)), (0)::numeric) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'reserve'::text)), (0)::numeric)) + COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'release'::text)), (0)::numeric)) + COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'refund'::text)), (0)::numeric)) + COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE ((ledger_entries.kind = 'adjustment'::text) AND (ledger_entries.adjusts = 'available'::text))), (0)::numeric)) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE ((ledger_entries.kind = 'adjustment'::text) AND (ledger_entries.adjusts = 'reservation'::text))), (0)::numeric)))::bigint AS available_minor,
    ((((COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'reserve'::text)), (0)::numeric) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'charge'::text)), (0)::numeric)) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'release'::text)), (0)::numeric)) + COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE ((ledger_entries.kind = 'adjustment'::text) AND (ledger_entries.adjusts = 'reservation'::text))), (0)::numeric)))::bigint AS reserved_minor,
    ((COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'charge'::text)), (0)::numeric) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'refund'::text)), (0)::numeric)))::bigint AS spent_minor
   FROM geo.ledger_entries
  GROUP BY ledger_entries.tenant_id, ledger_entries.currency;

ALTER TABLE geo.account_balances OWNER TO geo_owner;

--
-- Name: account_sends; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.account_sends (
    platform text NOT NULL,
    idempotency_key text NOT NULL,
    account_id text NOT NULL,
    question text NOT NULL,
    device text NOT NULL,
    region text NOT NULL,
    fencing_token bigint NOT NULL,
    sent_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE geo.account_sends OWNER TO geo_owner;

--
-- Name: accounts; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.accounts (
    platform text NOT NULL,
    account_id text NOT NULL,
    state text DEFAULT 'needs_login'::text NOT NULL,
    state_reason text DEFAULT ''::text NOT NULL,
    state_changed_at timestamp with time zone DEFAULT now() NOT NULL,
    daily_budget integer DEFAULT 50 NOT NULL,
    min_gap_s double precision DEFAULT 5 NOT NULL,
    jitter_s double precision DEFAULT 5 NOT NULL,
    sends_day date,
    sends_today integer DEFAULT 0 NOT NULL,
    last_used_at timestamp with time zone,
    next_send_at timestamp with time zone,
    cooling_until timestamp with time zone,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    fencing_token bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    page_changed_at timestamp with time zone,
    page_changed_detail text,
    CONSTRAINT accounts_account_id_check CHECK ((account_id ~ '^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$'::text)),
    CONSTRAINT accounts_check CHECK (((lease_owner IS NULL) = (lease_expires_at IS NULL))),
    CONSTRAINT accounts_daily_budget_check CHECK ((daily_budget >= 0)),
    CONSTRAINT accounts_jitter_s_check CHECK ((jitter_s >= (0)::double precision)),
    CONSTRAINT accounts_min_gap_s_check CHECK ((min_gap_s >= (0)::double precision)),
    CONSTRAINT accounts_platform_check CHECK ((platform ~ '^[a-z0-9_]{1,64}$'::text)),
    CONSTRAINT accounts_sends_today_check CHECK ((sends_today >= 0)),
    CONSTRAINT accounts_state_check CHECK ((state = ANY (ARRAY['ready'::text, 'needs_login'::text, 'cooling_down'::text, 'suspended'::text])))
);

ALTER TABLE geo.accounts OWNER TO geo_owner;

--
-- Name: alert_deliveries; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.alert_deliveries (
    alert_key text NOT NULL,
    recipient_id bigint NOT NULL,
    tenant_id text NOT NULL,
    kind text NOT NULL,
    run_id text,
    summary text NOT NULL,
    delivered_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE geo.alert_deliveries OWNER TO geo_owner;

--
-- Name: alert_recipients; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.alert_recipients (
    recipient_id bigint NOT NULL,
    tenant_id text NOT NULL,
    monitor_id text,
    channel text NOT NULL,
    target text NOT NULL,
    kinds text[] DEFAULT '{mention_change,resample_failed,reconciliation,stuck_partition}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT alert_recipients_channel_check CHECK ((channel = ANY (ARRAY['webhook'::text, 'email'::text]))),
    CONSTRAINT alert_recipients_check CHECK ((((channel = 'webhook'::text) AND (target ~ '^GEO_ALERT_WEBHOOK_[A-Z0-9_]{1,64}$'::text)) OR ((channel = 'email'::text) AND (target ~ '^[^@\s,<>]{1,64}@[^@\s,<>]{1,255}$'::text)))),
    CONSTRAINT alert_recipients_kinds_check CHECK (((kinds <@ '{mention_change,resample_failed,reconciliation,stuck_partition}'::text[]) AND (cardinality(kinds) >= 1)))
);

ALTER TABLE geo.alert_recipients OWNER TO geo_owner;

--
-- Name: alert_recipients_recipient_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.alert_recipients ALTER COLUMN recipient_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.alert_recipients_recipient_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: allowed_transitions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.allowed_transitions (
    layer text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    CONSTRAINT allowed_transitions_layer_check CHECK ((layer = ANY (ARRAY['submission'::text, 'collection'::text, 'evidence'::text, 'analysis'::text])))
);

ALTER TABLE geo.allowed_transitions OWNER TO geo_owner;

--
-- Name: analyst_logins; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.analyst_logins (
    login text NOT NULL,
    tenant_id text NOT NULL,
    granted_at timestamp with time zone DEFAULT now() NOT NULL,
    granted_by text DEFAULT CURRENT_USER NOT NULL,
    CONSTRAINT analyst_logins_login_check CHECK (((login ~ '^[a-z_][a-z0-9_]{0,62}$'::text) AND (login !~~ 'pg\_%'::text) AND (login <> ALL (ARRAY['geo_owner'::text, 'geo_service'::text, 'geo_analyst'::text, 'postgres'::text]))))
);

ALTER TABLE geo.analyst_logins OWNER TO geo_owner;

--
-- Name: attempts; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.attempts (
    sample_id text NOT NULL,
    attempt_no integer NOT NULL,
    fencing_token bigint NOT NULL,
    worker_id text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    outcome text DEFAULT 'running'::text NOT NULL,
    error_class text,
    error_detail text,
    retry_after_ms integer,
    deep_thinking_used boolean,
    screenshot_used boolean,
    usage_input_tokens bigint,
    usage_output_tokens bigint,
    usage_total_tokens bigint,
    usage_cached_input_tokens bigint,
    usage_reasoning_tokens bigint,
    usage_web_search_requests integer,
    usage_search_context text,
    usage_source text,
    tenant_id text NOT NULL,
    CONSTRAINT attempts_attempt_no_check CHECK ((attempt_no >= 1)),
    CONSTRAINT attempts_outcome_check CHECK ((outcome = ANY (ARRAY['running'::text, 'accepted'::text, 'completed'::text, 'failed'::text, 'uncertain'::text, 'not_accepted'::text, 'abandoned'::text, 'cancelled'::text]))),
    CONSTRAINT attempts_usage_cached_input_tokens_check CHECK ((usage_cached_input_tokens >= 0)),
    CONSTRAINT attempts_usage_input_tokens_check CHECK ((usage_input_tokens >= 0)),
    CONSTRAINT attempts_usage_output_tokens_check CHECK ((usage_output_tokens >= 0)),
    CONSTRAINT attempts_usage_reasoning_tokens_check CHECK ((usage_reasoning_tokens >= 0)),
    CONSTRAINT attempts_usage_total_tokens_check CHECK ((usage_total_tokens >= 0)),
    CONSTRAINT attempts_usage_web_search_requests_check CHECK ((usage_web_search_requests >= 0))
);

ALTER TABLE geo.attempts OWNER TO geo_owner;

--
-- Name: batches; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.batches (
    run_id text NOT NULL,
    batch_no integer NOT NULL,
    size integer NOT NULL,
    platform_counts jsonb NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT batches_batch_no_check CHECK ((batch_no >= 0)),
    CONSTRAINT batches_size_check CHECK ((size > 0))
);

ALTER TABLE geo.batches OWNER TO geo_owner;

--
-- Name: dead_letters; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.dead_letters (
    dead_letter_id bigint NOT NULL,
    stream text NOT NULL,
    message_id text NOT NULL,
    event_id text,
    sample_id text,
    deliveries integer NOT NULL,
    reason text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE geo.dead_letters OWNER TO geo_owner;

--
-- Name: dead_letters_dead_letter_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.dead_letters ALTER COLUMN dead_letter_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.dead_letters_dead_letter_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: evidence_objects; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.evidence_objects (
    object_id bigint NOT NULL,
    sample_id text NOT NULL,
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    revision integer NOT NULL,
    kind text NOT NULL,
    storage_key text NOT NULL,
    sha256 character(64) NOT NULL,
    size_bytes bigint NOT NULL,
    mime_type text NOT NULL,
    attempt_no integer,
    captured_at timestamp with time zone NOT NULL,
    stored_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT evidence_objects_kind_check CHECK ((kind = ANY (ARRAY['answer_raw'::text, 'answer_html'::text, 'citations'::text, 'response_raw'::text, 'screenshot'::text, 'thumbnail'::text, 'page_html'::text, 'capture'::text]))),
    CONSTRAINT evidence_objects_revision_check CHECK ((revision >= 1)),
    CONSTRAINT evidence_objects_size_bytes_check CHECK ((size_bytes >= 0))
);

ALTER TABLE geo.evidence_objects OWNER TO geo_owner;

--
-- Name: evidence_objects_object_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.evidence_objects ALTER COLUMN object_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.evidence_objects_object_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: fee_statement_lines; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.fee_statement_lines (
    statement_id bigint NOT NULL,
    line_no integer NOT NULL,
    upstream_id text NOT NULL,
    item text NOT NULL,
    amount_minor bigint NOT NULL,
    currency character(3) NOT NULL,
    price_version text,
    charged_at timestamp with time zone
);

ALTER TABLE geo.fee_statement_lines OWNER TO geo_owner;

--
-- Name: fee_statements; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.fee_statements (
    statement_id bigint NOT NULL,
    platform text NOT NULL,
    statement_date date NOT NULL,
    currency character(3) NOT NULL,
    content_sha256 character(64) NOT NULL,
    imported_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE geo.fee_statements OWNER TO geo_owner;

--
-- Name: fee_statements_statement_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.fee_statements ALTER COLUMN statement_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.fee_statements_statement_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: ledger_entries_entry_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.ledger_entries ALTER COLUMN entry_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.ledger_entries_entry_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: monitor_events; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.monitor_events (
    event_id bigint NOT NULL,
    monitor_id text NOT NULL,
    tenant_id text NOT NULL,
    event text NOT NULL,
    revision integer NOT NULL,
    config jsonb,
    cron text,
    timezone text,
    actor text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT monitor_events_actor_check CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT monitor_events_check CHECK (((event = ANY (ARRAY['created'::text, 'updated'::text])) = (config IS NOT NULL))),
    CONSTRAINT monitor_events_event_check CHECK ((event = ANY (ARRAY['created'::text, 'updated'::text, 'paused'::text, 'resumed'::text, 'retired'::text]))),
    CONSTRAINT monitor_events_reason_check CHECK ((length(reason) <= 2000))
);

ALTER TABLE geo.monitor_events OWNER TO geo_owner;

--
-- Name: monitor_events_event_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.monitor_events ALTER COLUMN event_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.monitor_events_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: monitor_resample_failures; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.monitor_resample_failures (
    monitor_id text NOT NULL,
    tenant_id text NOT NULL,
    day date NOT NULL,
    reason_kind text NOT NULL,
    reason text NOT NULL,
    dagster_run_id text,
    tries integer DEFAULT 1 NOT NULL,
    first_failed_at timestamp with time zone DEFAULT now() NOT NULL,
    last_failed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT monitor_resample_failures_reason_kind_check CHECK ((reason_kind = ANY (ARRAY['insufficient_balance'::text, 'invalid_config'::text, 'disabled_engine'::text, 'quote'::text, 'conflict'::text]))),
    CONSTRAINT monitor_resample_failures_tries_check CHECK ((tries >= 1))
);

ALTER TABLE geo.monitor_resample_failures OWNER TO geo_owner;

--
-- Name: monitors; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.monitors (
    monitor_id text NOT NULL,
    tenant_id text NOT NULL,
    config jsonb NOT NULL,
    active boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    cron text,
    timezone text,
    paused_at timestamp with time zone,
    retired_at timestamp with time zone,
    revision integer DEFAULT 1 NOT NULL,
    CONSTRAINT monitors_cadence_whole CHECK (((cron IS NULL) = (timezone IS NULL))),
    CONSTRAINT monitors_cron_check CHECK (((cron IS NULL) OR (length(cron) <= 100))),
    CONSTRAINT monitors_monitor_id_check CHECK ((monitor_id ~ '^[A-Za-z0-9_-]{1,48}$'::text)),
    CONSTRAINT monitors_retired_is_inactive CHECK (((retired_at IS NULL) OR (NOT active))),
    CONSTRAINT monitors_revision_check CHECK ((revision >= 1)),
    CONSTRAINT monitors_timezone_check CHECK (((timezone IS NULL) OR (length(timezone) <= 64)))
);

ALTER TABLE geo.monitors OWNER TO geo_owner;

--
-- Name: outbox; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.outbox (
    outbox_id bigint NOT NULL,
    stream text NOT NULL,
    kind text NOT NULL,
    sample_id text,
    run_id text,
    tenant_id text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    published_at timestamp with time zone,
    batch_no integer,
    channel text
)
WITH (fillfactor='70');

ALTER TABLE geo.outbox OWNER TO geo_owner;

--
-- Name: outbox_outbox_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.outbox ALTER COLUMN outbox_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.outbox_outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: partition_publications_publication_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.partition_publications ALTER COLUMN publication_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.partition_publications_publication_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: price_versions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.price_versions (
    platform text NOT NULL,
    version text NOT NULL,
    effective_from timestamp with time zone NOT NULL,
    currency character(3) NOT NULL,
    prices jsonb NOT NULL,
    source text DEFAULT ''::text NOT NULL,
    content_sha256 character(64) NOT NULL,
    imported_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE geo.price_versions OWNER TO geo_owner;

--
-- Name: quote_lines; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.quote_lines (
    quote_id text NOT NULL,
    line_no integer NOT NULL,
    platform text NOT NULL,
    price_version text NOT NULL,
    item text NOT NULL,
    mode text NOT NULL,
    unit_price_minor bigint NOT NULL,
    quantity integer NOT NULL,
    amount_minor bigint NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT quote_lines_check CHECK ((amount_minor = (unit_price_minor * quantity))),
    CONSTRAINT quote_lines_item_check CHECK ((item = ANY (ARRAY['base'::text, 'deep_thinking'::text, 'web_search'::text, 'screenshot'::text, 'retry_allowance'::text]))),
    CONSTRAINT quote_lines_quantity_check CHECK ((quantity >= 0)),
    CONSTRAINT quote_lines_unit_price_minor_check CHECK ((unit_price_minor >= 0))
);

ALTER TABLE geo.quote_lines OWNER TO geo_owner;

--
-- Name: quote_snapshots; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.quote_snapshots (
    quote_id text NOT NULL,
    tenant_id text NOT NULL,
    currency character(3) NOT NULL,
    estimated_max_minor bigint NOT NULL,
    price_versions jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT quote_snapshots_estimated_max_minor_check CHECK ((estimated_max_minor >= 0)),
    CONSTRAINT quote_snapshots_quote_id_check CHECK ((quote_id ~ '^[0-9a-f]{64}$'::text))
);

ALTER TABLE geo.quote_snapshots OWNER TO geo_owner;

--
-- Name: reconciliation_lines; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.reconciliation_lines (
    run_id text NOT NULL,
    upstream_id text NOT NULL,
    sample_id text,
    attempt_no integer,
    platform text NOT NULL,
    classification text NOT NULL,
    ours_minor bigint DEFAULT 0 NOT NULL,
    theirs_minor bigint DEFAULT 0 NOT NULL,
    difference_minor bigint GENERATED ALWAYS AS ((theirs_minor - ours_minor)) STORED,
    currency character(3) NOT NULL,
    reconciled_at timestamp with time zone DEFAULT now() NOT NULL,
    fee_class text DEFAULT 'to_verify'::text NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT reconciliation_lines_classification_check CHECK ((classification = ANY (ARRAY['matched'::text, 'amount_mismatch'::text, 'missing_ours'::text, 'missing_theirs'::text, 'pending'::text, 'price_change'::text, 'in_day_total'::text, 'usage_cost'::text, 'usage_missing'::text, 'apportioned'::text, 'credit_cost'::text, 'credits_missing'::text, 'no_vendor_bill'::text]))),
    CONSTRAINT reconciliation_lines_fee_class_check CHECK ((fee_class = ANY (ARRAY['completed'::text, 'failed'::text, 'to_verify'::text])))
);

ALTER TABLE geo.reconciliation_lines OWNER TO geo_owner;

--
-- Name: retention_log; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.retention_log (
    retention_id bigint NOT NULL,
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    retention_days integer NOT NULL,
    cutoff timestamp with time zone NOT NULL,
    objects_deleted integer NOT NULL,
    bytes_deleted bigint NOT NULL,
    attempts_deleted integer NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    log_retention_days integer,
    answers_cleared integer DEFAULT 0 NOT NULL,
    transitions_deleted integer DEFAULT 0 NOT NULL,
    CONSTRAINT retention_log_answers_cleared_check CHECK ((answers_cleared >= 0)),
    CONSTRAINT retention_log_attempts_deleted_check CHECK ((attempts_deleted >= 0)),
    CONSTRAINT retention_log_bytes_deleted_check CHECK ((bytes_deleted >= 0)),
    CONSTRAINT retention_log_log_retention_days_check CHECK ((log_retention_days > 0)),
    CONSTRAINT retention_log_objects_deleted_check CHECK ((objects_deleted >= 0)),
    CONSTRAINT retention_log_retention_days_check CHECK ((retention_days > 0)),
    CONSTRAINT retention_log_transitions_deleted_check CHECK ((transitions_deleted >= 0))
);

ALTER TABLE geo.retention_log OWNER TO geo_owner;

--
-- Name: retention_log_retention_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.retention_log ALTER COLUMN retention_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.retention_log_retention_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: review_decisions_decision_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.review_decisions ALTER COLUMN decision_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.review_decisions_decision_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: run_accounts; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.run_accounts (
    run_id text NOT NULL,
    tenant_id text NOT NULL,
    currency character(3) NOT NULL,
    estimated_minor bigint DEFAULT 0 NOT NULL,
    reserved_minor bigint DEFAULT 0 NOT NULL,
    overrun_minor bigint DEFAULT 0 NOT NULL,
    charged_minor bigint DEFAULT 0 NOT NULL,
    released_minor bigint DEFAULT 0 NOT NULL,
    refunded_minor bigint DEFAULT 0 NOT NULL,
    entries integer DEFAULT 0 NOT NULL,
    CONSTRAINT charges_within_reservation CHECK (((((reserved_minor + overrun_minor) - charged_minor) - released_minor) >= 0)),
    CONSTRAINT refunds_within_charges CHECK ((refunded_minor <= charged_minor))
)
WITH (fillfactor='70');

ALTER TABLE geo.run_accounts OWNER TO geo_owner;

--
-- Name: run_billing; Type: VIEW; Schema: geo; Owner: geo_owner
--

CREATE VIEW geo.run_billing WITH (security_invoker='true') AS
 SELECT ledger_entries.run_id,
    ledger_entries.tenant_id,
    ledger_entries.currency,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'estimate'::text)), (0)::numeric))::bigint AS estimated_minor,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'reserve'::text)), (0)::numeric))::bigint AS reserved_total_minor,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE ((ledger_entries.kind = 'adjustment'::text) AND (ledger_entries.adjusts = 'reservation'::text))), (0)::numeric))::bigint AS overrun_minor,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'charge'::text)), (0)::numeric))::bigint AS charged_minor,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'release'::text)), (0)::numeric))::bigint AS released_minor,
    (COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'refund'::text)), (0)::numeric))::bigint AS refunded_minor,
    ((((COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'reserve'::text)), (0)::numeric) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'charge'::text)), (0)::numeric)) - COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE (ledger_entries.kind = 'release'::text)), (0)::numeric)) + COALESCE(sum(ledger_entries.amount_minor) FILTER (WHERE ((ledger_entries.kind = 'adjustment'::text) AND (ledger_entries.adjusts = 'reservation'::text))), (0)::numeric)))::bigint AS reservation_left_minor
   FROM geo.ledger_entries
  WHERE (ledger_entries.run_id IS NOT NULL)
  GROUP BY ledger_entries.run_id, ledger_entries.tenant_id, ledger_entries.currency;

ALTER TABLE geo.run_billing OWNER TO geo_owner;

--
-- Name: run_dispatches; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.run_dispatches (
    run_id text NOT NULL,
    channel text NOT NULL,
    dispatched_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL
);

ALTER TABLE geo.run_dispatches OWNER TO geo_owner;

--
-- Name: run_fee_rules; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.run_fee_rules (
    run_id text NOT NULL,
    platform text NOT NULL,
    price_version text NOT NULL,
    retry_fee_rule text NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT run_fee_rules_retry_fee_rule_check CHECK ((retry_fee_rule = ANY (ARRAY['charged'::text, 'free_after_failure'::text, 'free'::text])))
);

ALTER TABLE geo.run_fee_rules OWNER TO geo_owner;

--
-- Name: run_publish_deadlines; Type: VIEW; Schema: geo; Owner: geo_owner
--

CREATE VIEW geo.run_publish_deadlines WITH (security_invoker='true') AS
 SELECT r.run_id,
    r.created_at,
    d.seconds AS publish_deadline_seconds,
    (r.created_at + make_interval(secs => (d.seconds)::double precision)) AS publish_deadline_at
   FROM ((geo.runs r
     JOIN geo.config_snapshots c USING (snapshot_id))
     CROSS JOIN LATERAL ( SELECT COALESCE(((c.config ->> 'publish_deadline_seconds'::text))::integer, 21600) AS seconds) d);

ALTER TABLE geo.run_publish_deadlines OWNER TO geo_owner;

--
-- Name: state_transitions; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.state_transitions (
    transition_id bigint NOT NULL,
    sample_id text NOT NULL,
    run_id text NOT NULL,
    layer text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    reason text,
    fencing_token bigint NOT NULL,
    attempt_no integer NOT NULL,
    actor text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL
);

ALTER TABLE geo.state_transitions OWNER TO geo_owner;

--
-- Name: state_transitions_transition_id_seq; Type: SEQUENCE; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.state_transitions ALTER COLUMN transition_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME geo.state_transitions_transition_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: tenant_platform_limits; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.tenant_platform_limits (
    tenant_id text NOT NULL,
    platform text NOT NULL,
    submits_per_second double precision NOT NULL,
    burst integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenant_platform_limits_burst_check CHECK ((burst >= 1)),
    CONSTRAINT tenant_platform_limits_submits_per_second_check CHECK (((submits_per_second > (0)::double precision) AND (submits_per_second <= (100000)::double precision)))
);

ALTER TABLE geo.tenant_platform_limits OWNER TO geo_owner;

--
-- Name: tenants; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.tenants (
    tenant_id text NOT NULL,
    name text NOT NULL,
    currency character(3) DEFAULT 'CNY'::bpchar NOT NULL,
    max_in_flight integer DEFAULT 500 NOT NULL,
    retention_days integer DEFAULT 30 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    log_retention_days integer,
    CONSTRAINT tenants_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT tenants_log_retention_days_check CHECK ((log_retention_days > 0)),
    CONSTRAINT tenants_max_in_flight_check CHECK ((max_in_flight > 0)),
    CONSTRAINT tenants_retention_days_check CHECK ((retention_days > 0)),
    CONSTRAINT tenants_tenant_id_check CHECK ((tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'::text))
);

ALTER TABLE geo.tenants OWNER TO geo_owner;

--
-- Name: COLUMN tenants.log_retention_days; Type: COMMENT; Schema: geo; Owner: geo_owner
--

COMMENT ON COLUMN geo.tenants.log_retention_days IS 'Days the attempts and the state-transition log of a finished run are kept; NULL: retention_days.';

--
-- Name: upstream_requests; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.upstream_requests (
    idempotency_key text NOT NULL,
    sample_id text NOT NULL,
    attempt_no integer NOT NULL,
    platform text NOT NULL,
    state text DEFAULT 'prepared'::text NOT NULL,
    upstream_id text,
    sent_at timestamp with time zone,
    accepted_at timestamp with time zone,
    lookups integer DEFAULT 0 NOT NULL,
    last_lookup_at timestamp with time zone,
    resolved_by text,
    sends integer DEFAULT 0 NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT accepted_request_has_id CHECK (((state <> 'accepted'::text) OR (upstream_id IS NOT NULL))),
    CONSTRAINT upstream_requests_state_check CHECK ((state = ANY (ARRAY['prepared'::text, 'sending'::text, 'accepted'::text, 'uncertain'::text, 'not_accepted'::text])))
);

ALTER TABLE geo.upstream_requests OWNER TO geo_owner;

--
-- Name: warc_records; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.warc_records (
    object_key text NOT NULL,
    record_offset bigint NOT NULL,
    record_length bigint NOT NULL,
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    sample_id text NOT NULL,
    record_type text NOT NULL,
    record_id text NOT NULL,
    target_uri text NOT NULL,
    kind text NOT NULL,
    mime_type text NOT NULL,
    block_sha256 character(64) NOT NULL,
    payload_sha256 character(64) NOT NULL,
    payload_size bigint NOT NULL,
    attempt_no integer,
    captured_at timestamp with time zone NOT NULL,
    stored_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT warc_records_payload_size_check CHECK ((payload_size >= 0)),
    CONSTRAINT warc_records_record_length_check CHECK ((record_length > 0)),
    CONSTRAINT warc_records_record_offset_check CHECK ((record_offset >= 0)),
    CONSTRAINT warc_records_record_type_check CHECK ((record_type = ANY (ARRAY['request'::text, 'response'::text, 'resource'::text, 'metadata'::text, 'conversion'::text])))
);

ALTER TABLE geo.warc_records OWNER TO geo_owner;

--
-- Name: webhook_deliveries; Type: TABLE; Schema: geo; Owner: geo_owner
--

CREATE TABLE geo.webhook_deliveries (
    platform text NOT NULL,
    upstream_id text NOT NULL,
    idempotency_key text,
    status text,
    deliveries integer DEFAULT 1 NOT NULL,
    first_received_at timestamp with time zone DEFAULT now() NOT NULL,
    last_received_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome text DEFAULT ''::text NOT NULL,
    CONSTRAINT webhook_deliveries_deliveries_check CHECK ((deliveries >= 1))
);

ALTER TABLE geo.webhook_deliveries OWNER TO geo_owner;

--
-- Name: brand_day_changes brand_day_changes_pkey; Type: CONSTRAINT; Schema: analytics; Owner: geo_owner
--

ALTER TABLE ONLY analytics.brand_day_changes
    ADD CONSTRAINT brand_day_changes_pkey PRIMARY KEY (monitor_id, scheduled_for, comparison, channel, brand);

--
-- Name: brand_day_trends brand_day_trends_pkey; Type: CONSTRAINT; Schema: analytics; Owner: geo_owner
--

ALTER TABLE ONLY analytics.brand_day_trends
    ADD CONSTRAINT brand_day_trends_pkey PRIMARY KEY (monitor_id, scheduled_for, channel, brand);

--
-- Name: brand_metrics brand_metrics_pkey; Type: CONSTRAINT; Schema: analytics; Owner: geo_owner
--

ALTER TABLE ONLY analytics.brand_metrics
    ADD CONSTRAINT brand_metrics_pkey PRIMARY KEY (run_id, channel, region, mode, question_revision, brand);

--
-- Name: channel_brand_metrics channel_brand_metrics_pkey; Type: CONSTRAINT; Schema: analytics; Owner: geo_owner
--

ALTER TABLE ONLY analytics.channel_brand_metrics
    ADD CONSTRAINT channel_brand_metrics_pkey PRIMARY KEY (run_id, channel, brand);

--
-- Name: share_of_voice share_of_voice_pkey; Type: CONSTRAINT; Schema: analytics; Owner: geo_owner
--

ALTER TABLE ONLY analytics.share_of_voice
    ADD CONSTRAINT share_of_voice_pkey PRIMARY KEY (run_id, channel, region, mode, brand);

--
-- Name: source_domains source_domains_pkey; Type: CONSTRAINT; Schema: analytics; Owner: geo_owner
--

ALTER TABLE ONLY analytics.source_domains
    ADD CONSTRAINT source_domains_pkey PRIMARY KEY (run_id, platform, registrable_domain, relation);

--
-- Name: account_sends account_sends_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.account_sends
    ADD CONSTRAINT account_sends_pkey PRIMARY KEY (platform, idempotency_key);

--
-- Name: accounts accounts_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (platform, account_id);

--
-- Name: alert_deliveries alert_deliveries_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_deliveries
    ADD CONSTRAINT alert_deliveries_pkey PRIMARY KEY (alert_key, recipient_id);

--
-- Name: alert_recipients alert_recipients_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_recipients
    ADD CONSTRAINT alert_recipients_pkey PRIMARY KEY (recipient_id);

--
-- Name: alert_recipients alert_recipients_tenant_id_monitor_id_channel_target_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_recipients
    ADD CONSTRAINT alert_recipients_tenant_id_monitor_id_channel_target_key UNIQUE NULLS NOT DISTINCT (tenant_id, monitor_id, channel, target);

--
-- Name: allowed_transitions allowed_transitions_layer_from_state_to_state_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.allowed_transitions
    ADD CONSTRAINT allowed_transitions_layer_from_state_to_state_key UNIQUE NULLS NOT DISTINCT (layer, from_state, to_state);

--
-- Name: analysis_current analysis_current_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analysis_current
    ADD CONSTRAINT analysis_current_pkey PRIMARY KEY (sample_id);

--
-- Name: analysis_results analysis_results_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analysis_results
    ADD CONSTRAINT analysis_results_pkey PRIMARY KEY (sample_id, detector_version, answer_revision);

--
-- Name: analyst_logins analyst_logins_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analyst_logins
    ADD CONSTRAINT analyst_logins_pkey PRIMARY KEY (login);

--
-- Name: answers answers_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.answers
    ADD CONSTRAINT answers_pkey PRIMARY KEY (sample_id, revision);

--
-- Name: attempts attempts_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (sample_id, attempt_no);

--
-- Name: batches batches_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.batches
    ADD CONSTRAINT batches_pkey PRIMARY KEY (run_id, batch_no);

--
-- Name: citations citations_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.citations
    ADD CONSTRAINT citations_pkey PRIMARY KEY (sample_id, revision, ordinal);

--
-- Name: config_snapshots config_snapshots_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.config_snapshots
    ADD CONSTRAINT config_snapshots_pkey PRIMARY KEY (snapshot_id);

--
-- Name: dead_letters dead_letters_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.dead_letters
    ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (dead_letter_id);

--
-- Name: dead_letters dead_letters_stream_message_id_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.dead_letters
    ADD CONSTRAINT dead_letters_stream_message_id_key UNIQUE (stream, message_id);

--
-- Name: evidence_objects evidence_objects_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.evidence_objects
    ADD CONSTRAINT evidence_objects_pkey PRIMARY KEY (object_id);

--
-- Name: evidence_objects evidence_objects_sample_id_kind_revision_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.evidence_objects
    ADD CONSTRAINT evidence_objects_sample_id_kind_revision_key UNIQUE (sample_id, kind, revision);

--
-- Name: evidence_objects evidence_objects_sample_id_kind_sha256_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.evidence_objects
    ADD CONSTRAINT evidence_objects_sample_id_kind_sha256_key UNIQUE (sample_id, kind, sha256);

--
-- Name: fee_statement_lines fee_statement_lines_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.fee_statement_lines
    ADD CONSTRAINT fee_statement_lines_pkey PRIMARY KEY (statement_id, line_no);

--
-- Name: fee_statements fee_statements_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.fee_statements
    ADD CONSTRAINT fee_statements_pkey PRIMARY KEY (statement_id);

--
-- Name: fee_statements fee_statements_platform_statement_date_content_sha256_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.fee_statements
    ADD CONSTRAINT fee_statements_platform_statement_date_content_sha256_key UNIQUE (platform, statement_date, content_sha256);

--
-- Name: ledger_entries ledger_entries_idempotency_key_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.ledger_entries
    ADD CONSTRAINT ledger_entries_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: ledger_entries ledger_entries_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.ledger_entries
    ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (entry_id);

--
-- Name: mention_stances mention_stances_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.mention_stances
    ADD CONSTRAINT mention_stances_pkey PRIMARY KEY (sample_id, detector_version, answer_revision, brand, stance_version);

--
-- Name: mentions mentions_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.mentions
    ADD CONSTRAINT mentions_pkey PRIMARY KEY (sample_id, detector_version, answer_revision, brand);

--
-- Name: monitor_events monitor_events_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitor_events
    ADD CONSTRAINT monitor_events_pkey PRIMARY KEY (event_id);

--
-- Name: monitor_resample_failures monitor_resample_failures_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitor_resample_failures
    ADD CONSTRAINT monitor_resample_failures_pkey PRIMARY KEY (monitor_id, day);

--
-- Name: monitors monitors_monitor_tenant_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitors
    ADD CONSTRAINT monitors_monitor_tenant_key UNIQUE (monitor_id, tenant_id);

--
-- Name: monitors monitors_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitors
    ADD CONSTRAINT monitors_pkey PRIMARY KEY (monitor_id);

--
-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (outbox_id);

--
-- Name: partition_publications partition_publications_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.partition_publications
    ADD CONSTRAINT partition_publications_pkey PRIMARY KEY (publication_id);

--
-- Name: price_versions price_versions_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.price_versions
    ADD CONSTRAINT price_versions_pkey PRIMARY KEY (platform, version);

--
-- Name: price_versions price_versions_platform_effective_from_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.price_versions
    ADD CONSTRAINT price_versions_platform_effective_from_key UNIQUE (platform, effective_from);

--
-- Name: publication_exclusions publication_exclusions_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.publication_exclusions
    ADD CONSTRAINT publication_exclusions_pkey PRIMARY KEY (publication_id, sample_id);

--
-- Name: question_revisions question_revisions_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.question_revisions
    ADD CONSTRAINT question_revisions_pkey PRIMARY KEY (question_revision);

--
-- Name: quote_lines quote_lines_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.quote_lines
    ADD CONSTRAINT quote_lines_pkey PRIMARY KEY (quote_id, line_no);

--
-- Name: quote_snapshots quote_snapshots_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.quote_snapshots
    ADD CONSTRAINT quote_snapshots_pkey PRIMARY KEY (quote_id);

--
-- Name: reconciliation_lines reconciliation_lines_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.reconciliation_lines
    ADD CONSTRAINT reconciliation_lines_pkey PRIMARY KEY (run_id, upstream_id);

--
-- Name: retention_log retention_log_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.retention_log
    ADD CONSTRAINT retention_log_pkey PRIMARY KEY (retention_id);

--
-- Name: review_decisions review_decisions_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.review_decisions
    ADD CONSTRAINT review_decisions_pkey PRIMARY KEY (decision_id);

--
-- Name: run_accounts run_accounts_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_accounts
    ADD CONSTRAINT run_accounts_pkey PRIMARY KEY (run_id);

--
-- Name: run_dispatches run_dispatches_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_dispatches
    ADD CONSTRAINT run_dispatches_pkey PRIMARY KEY (run_id, channel);

--
-- Name: run_fee_rules run_fee_rules_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_fee_rules
    ADD CONSTRAINT run_fee_rules_pkey PRIMARY KEY (run_id, platform);

--
-- Name: run_platforms run_platforms_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_platforms
    ADD CONSTRAINT run_platforms_pkey PRIMARY KEY (run_id, platform);

--
-- Name: runs runs_monitor_id_scheduled_for_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_monitor_id_scheduled_for_key UNIQUE (monitor_id, scheduled_for);

--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (run_id);

--
-- Name: runs runs_run_id_tenant_id_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_run_id_tenant_id_key UNIQUE (run_id, tenant_id);

--
-- Name: samples samples_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.samples
    ADD CONSTRAINT samples_pkey PRIMARY KEY (sample_id);

--
-- Name: state_transitions state_transitions_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.state_transitions
    ADD CONSTRAINT state_transitions_pkey PRIMARY KEY (transition_id);

--
-- Name: tenant_platform_limits tenant_platform_limits_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.tenant_platform_limits
    ADD CONSTRAINT tenant_platform_limits_pkey PRIMARY KEY (tenant_id, platform);

--
-- Name: tenants tenants_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.tenants
    ADD CONSTRAINT tenants_pkey PRIMARY KEY (tenant_id);

--
-- Name: upstream_requests upstream_requests_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.upstream_requests
    ADD CONSTRAINT upstream_requests_pkey PRIMARY KEY (idempotency_key);

--
-- Name: upstream_requests upstream_requests_sample_id_attempt_no_key; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.upstream_requests
    ADD CONSTRAINT upstream_requests_sample_id_attempt_no_key UNIQUE (sample_id, attempt_no);

--
-- Name: warc_records warc_records_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.warc_records
    ADD CONSTRAINT warc_records_pkey PRIMARY KEY (object_key, record_offset);

--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (platform, upstream_id);

--
-- Name: brand_day_changes_flagged; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX brand_day_changes_flagged ON analytics.brand_day_changes USING btree (scheduled_for) WHERE flagged;

--
-- Name: brand_day_trends_day; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX brand_day_trends_day ON analytics.brand_day_trends USING btree (scheduled_for, monitor_id);

--
-- Name: brand_metrics_monitor; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX brand_metrics_monitor ON analytics.brand_metrics USING btree (monitor_id, channel, brand, scheduled_for) WHERE ((monitor_id IS NOT NULL) AND (scheduled_for IS NOT NULL));

--
-- Name: brand_metrics_monitor_day; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX brand_metrics_monitor_day ON analytics.brand_metrics USING btree (monitor_id, scheduled_for) WHERE ((monitor_id IS NOT NULL) AND (scheduled_for IS NOT NULL));

--
-- Name: channel_brand_metrics_monitor; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX channel_brand_metrics_monitor ON analytics.channel_brand_metrics USING btree (monitor_id, channel, brand, scheduled_for);

--
-- Name: channel_brand_metrics_monitor_day; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX channel_brand_metrics_monitor_day ON analytics.channel_brand_metrics USING btree (monitor_id, scheduled_for);

--
-- Name: share_of_voice_monitor_day; Type: INDEX; Schema: analytics; Owner: geo_owner
--

CREATE INDEX share_of_voice_monitor_day ON analytics.share_of_voice USING btree (monitor_id, scheduled_for);

--
-- Name: account_sends_by_question; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX account_sends_by_question ON geo.account_sends USING btree (platform, account_id, question, sent_at);

--
-- Name: accounts_page_changed; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX accounts_page_changed ON geo.accounts USING btree (platform) WHERE (page_changed_at IS NOT NULL);

--
-- Name: analyst_logins_tenant; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX analyst_logins_tenant ON geo.analyst_logins USING btree (tenant_id);

--
-- Name: citations_domain; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX citations_domain ON geo.citations USING btree (registrable_domain);

--
-- Name: dead_letters_at; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX dead_letters_at ON geo.dead_letters USING btree (at);

--
-- Name: fee_statement_lines_upstream; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX fee_statement_lines_upstream ON geo.fee_statement_lines USING btree (upstream_id);

--
-- Name: fee_statements_platform_date; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX fee_statements_platform_date ON geo.fee_statements USING btree (platform, statement_date);

--
-- Name: ledger_entries_run; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX ledger_entries_run ON geo.ledger_entries USING btree (run_id, kind);

--
-- Name: ledger_entries_sample; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX ledger_entries_sample ON geo.ledger_entries USING btree (sample_id, kind) WHERE (sample_id IS NOT NULL);

--
-- Name: ledger_entries_tenant; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX ledger_entries_tenant ON geo.ledger_entries USING btree (tenant_id, kind);

--
-- Name: ledger_entries_upstream; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX ledger_entries_upstream ON geo.ledger_entries USING btree (upstream_id) WHERE (upstream_id IS NOT NULL);

--
-- Name: monitor_events_monitor; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX monitor_events_monitor ON geo.monitor_events USING btree (monitor_id, event_id);

--
-- Name: outbox_collect_batches; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX outbox_collect_batches ON geo.outbox USING btree (run_id, channel, batch_no, created_at) WHERE ((kind = 'collect'::text) AND (sample_id IS NULL));

--
-- Name: outbox_sample_kind_created; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX outbox_sample_kind_created ON geo.outbox USING btree (sample_id, kind, created_at);

--
-- Name: outbox_unpublished; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX outbox_unpublished ON geo.outbox USING btree (outbox_id) WHERE (published_at IS NULL);

--
-- Name: partition_publications_partition; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX partition_publications_partition ON geo.partition_publications USING btree (run_id, channel, publication_id);

--
-- Name: retention_log_run; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX retention_log_run ON geo.retention_log USING btree (run_id);

--
-- Name: review_decisions_sample; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX review_decisions_sample ON geo.review_decisions USING btree (sample_id, subject, decision_id);

--
-- Name: runs_unexpired; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX runs_unexpired ON geo.runs USING btree (created_at, run_id) WHERE ((raw_expired_at IS NULL) OR (log_expired_at IS NULL));

--
-- Name: samples_queued_accepted; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX samples_queued_accepted ON geo.samples USING btree (tenant_id, platform, accepted_at) WHERE ((collection_state = 'queued'::text) AND (submission_state = 'accepted'::text));

--
-- Name: samples_queued_tenant_priority; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX samples_queued_tenant_priority ON geo.samples USING btree (tenant_id, platform, priority DESC, next_attempt_at) WHERE (collection_state = 'queued'::text);

--
-- Name: samples_run_channel; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX samples_run_channel ON geo.samples USING btree (run_id, channel);

--
-- Name: samples_running_tenant; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX samples_running_tenant ON geo.samples USING btree (tenant_id, lease_until) WHERE (collection_state = 'running'::text);

--
-- Name: samples_screenshot_pending; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX samples_screenshot_pending ON geo.samples USING btree (completed_at) WHERE (evidence_reason = 'SCREENSHOT_PENDING'::text);

--
-- Name: samples_uncertain; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX samples_uncertain ON geo.samples USING btree (run_id) WHERE (submission_state = 'uncertain'::text);

--
-- Name: state_transitions_sample; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX state_transitions_sample ON geo.state_transitions USING btree (sample_id, transition_id);

--
-- Name: upstream_requests_upstream_id; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE UNIQUE INDEX upstream_requests_upstream_id ON geo.upstream_requests USING btree (platform, upstream_id) WHERE (upstream_id IS NOT NULL);

--
-- Name: warc_records_run; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX warc_records_run ON geo.warc_records USING btree (run_id);

--
-- Name: warc_records_sample; Type: INDEX; Schema: geo; Owner: geo_owner
--

CREATE INDEX warc_records_sample ON geo.warc_records USING btree (sample_id);

--
-- Name: share_of_voice a_tenant_of_run; Type: TRIGGER; Schema: analytics; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON analytics.share_of_voice FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: source_domains a_tenant_of_run; Type: TRIGGER; Schema: analytics; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON analytics.source_domains FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: quote_lines a_tenant_of_quote; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_quote BEFORE INSERT ON geo.quote_lines FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_quote();

--
-- Name: batches a_tenant_of_run; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.batches FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: partition_publications a_tenant_of_run; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.partition_publications FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: reconciliation_lines a_tenant_of_run; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.reconciliation_lines FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: run_dispatches a_tenant_of_run; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.run_dispatches FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: run_fee_rules a_tenant_of_run; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.run_fee_rules FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: state_transitions a_tenant_of_run; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.state_transitions FOR EACH ROW WHEN ((new.tenant_id IS NULL)) EXECUTE FUNCTION geo.tenant_of_run();

--
-- Name: analysis_current a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.analysis_current FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: analysis_results a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.analysis_results FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: answers a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.answers FOR EACH ROW WHEN ((new.tenant_id IS NULL)) EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: attempts a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.attempts FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: citations a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.citations FOR EACH ROW WHEN ((new.tenant_id IS NULL)) EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: mention_stances a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.mention_stances FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: mentions a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.mentions FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: publication_exclusions a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.publication_exclusions FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: review_decisions a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.review_decisions FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: upstream_requests a_tenant_of_sample; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.upstream_requests FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

--
-- Name: answers answers_delete_citations; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER answers_delete_citations AFTER DELETE ON geo.answers REFERENCING OLD TABLE AS old_answers FOR EACH STATEMENT EXECUTE FUNCTION geo.delete_citations_of_deleted_answers();

--
-- Name: answers answers_key_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER answers_key_immutable BEFORE UPDATE OF sample_id, revision ON geo.answers FOR EACH ROW WHEN (((old.sample_id IS DISTINCT FROM new.sample_id) OR (old.revision IS DISTINCT FROM new.revision))) EXECUTE FUNCTION geo.forbid_change();

--
-- Name: citations citations_guard_insert; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER citations_guard_insert AFTER INSERT ON geo.citations REFERENCING NEW TABLE AS new_citations FOR EACH STATEMENT EXECUTE FUNCTION geo.guard_citation_insert();

--
-- Name: config_snapshots config_snapshots_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER config_snapshots_immutable BEFORE UPDATE ON geo.config_snapshots FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: evidence_objects evidence_objects_guard_insert; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER evidence_objects_guard_insert AFTER INSERT ON geo.evidence_objects REFERENCING NEW TABLE AS new_objects FOR EACH STATEMENT EXECUTE FUNCTION geo.guard_evidence_object_insert();

--
-- Name: evidence_objects evidence_objects_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER evidence_objects_immutable BEFORE UPDATE ON geo.evidence_objects FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: ledger_entries ledger_entries_append_only; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER ledger_entries_append_only BEFORE DELETE OR UPDATE ON geo.ledger_entries FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: ledger_entries ledger_entries_run_accounts; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER ledger_entries_run_accounts AFTER INSERT ON geo.ledger_entries REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION geo.maintain_run_accounts();

--
-- Name: price_versions price_versions_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER price_versions_immutable BEFORE DELETE OR UPDATE ON geo.price_versions FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: question_revisions question_revisions_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER question_revisions_immutable BEFORE UPDATE ON geo.question_revisions FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: quote_lines quote_lines_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER quote_lines_immutable BEFORE UPDATE ON geo.quote_lines FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: quote_snapshots quote_snapshots_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER quote_snapshots_immutable BEFORE UPDATE ON geo.quote_snapshots FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: retention_log retention_log_append_only; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER retention_log_append_only BEFORE UPDATE ON geo.retention_log FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: review_decisions review_decisions_append_only; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER review_decisions_append_only BEFORE UPDATE ON geo.review_decisions FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: run_accounts run_accounts_maintained_by_ledger; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER run_accounts_maintained_by_ledger BEFORE INSERT OR DELETE OR UPDATE ON geo.run_accounts FOR EACH ROW WHEN ((pg_trigger_depth() < 1)) EXECUTE FUNCTION geo.forbid_change();

--
-- Name: run_fee_rules run_fee_rules_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER run_fee_rules_immutable BEFORE UPDATE ON geo.run_fee_rules FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: runs runs_delete_samples; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER runs_delete_samples AFTER DELETE ON geo.runs REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION geo.delete_samples_of_deleted_runs();

--
-- Name: runs runs_key_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER runs_key_immutable BEFORE UPDATE OF run_id, tenant_id ON geo.runs FOR EACH ROW WHEN (((old.run_id IS DISTINCT FROM new.run_id) OR (old.tenant_id IS DISTINCT FROM new.tenant_id))) EXECUTE FUNCTION geo.forbid_key_change();

--
-- Name: samples samples_delete_evidence_objects; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER samples_delete_evidence_objects AFTER DELETE ON geo.samples REFERENCING OLD TABLE AS old_samples FOR EACH STATEMENT EXECUTE FUNCTION geo.delete_evidence_objects_of_deleted_samples();

--
-- Name: samples samples_guard_insert; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER samples_guard_insert AFTER INSERT ON geo.samples REFERENCING NEW TABLE AS new_samples FOR EACH STATEMENT EXECUTE FUNCTION geo.guard_sample_insert();

--
-- Name: samples samples_id_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER samples_id_immutable BEFORE UPDATE OF sample_id ON geo.samples FOR EACH ROW WHEN ((old.sample_id IS DISTINCT FROM new.sample_id)) EXECUTE FUNCTION geo.forbid_change();

--
-- Name: samples samples_tenant_immutable; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER samples_tenant_immutable BEFORE UPDATE OF tenant_id ON geo.samples FOR EACH ROW WHEN ((old.tenant_id IS DISTINCT FROM new.tenant_id)) EXECUTE FUNCTION geo.forbid_key_change();

--
-- Name: samples samples_touch; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER samples_touch BEFORE UPDATE ON geo.samples FOR EACH ROW WHEN (((old.submission_state IS DISTINCT FROM new.submission_state) OR (old.collection_state IS DISTINCT FROM new.collection_state) OR (old.evidence_state IS DISTINCT FROM new.evidence_state) OR (old.analysis_state IS DISTINCT FROM new.analysis_state) OR (old.fencing_token IS DISTINCT FROM new.fencing_token))) EXECUTE FUNCTION geo.touch_sample();

--
-- Name: samples samples_transitions; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER samples_transitions AFTER UPDATE ON geo.samples REFERENCING OLD TABLE AS old_samples NEW TABLE AS new_samples FOR EACH STATEMENT EXECUTE FUNCTION geo.log_sample_transitions();

--
-- Name: state_transitions state_transitions_append_only; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER state_transitions_append_only BEFORE UPDATE ON geo.state_transitions FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

--
-- Name: state_transitions state_transitions_reopen_retention; Type: TRIGGER; Schema: geo; Owner: geo_owner
--

CREATE TRIGGER state_transitions_reopen_retention AFTER INSERT ON geo.state_transitions REFERENCING NEW TABLE AS new_transitions FOR EACH STATEMENT EXECUTE FUNCTION geo.reopen_run_retention();

--
-- Name: account_sends account_sends_platform_account_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.account_sends
    ADD CONSTRAINT account_sends_platform_account_id_fkey FOREIGN KEY (platform, account_id) REFERENCES geo.accounts(platform, account_id);

--
-- Name: alert_deliveries alert_deliveries_recipient_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_deliveries
    ADD CONSTRAINT alert_deliveries_recipient_id_fkey FOREIGN KEY (recipient_id) REFERENCES geo.alert_recipients(recipient_id) ON DELETE CASCADE;

--
-- Name: alert_deliveries alert_deliveries_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_deliveries
    ADD CONSTRAINT alert_deliveries_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: alert_recipients alert_recipients_monitor_id_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_recipients
    ADD CONSTRAINT alert_recipients_monitor_id_tenant_id_fkey FOREIGN KEY (monitor_id, tenant_id) REFERENCES geo.monitors(monitor_id, tenant_id);

--
-- Name: alert_recipients alert_recipients_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.alert_recipients
    ADD CONSTRAINT alert_recipients_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: analysis_current analysis_current_sample_id_detector_version_answer_revisio_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analysis_current
    ADD CONSTRAINT analysis_current_sample_id_detector_version_answer_revisio_fkey FOREIGN KEY (sample_id, detector_version, answer_revision) REFERENCES geo.analysis_results(sample_id, detector_version, answer_revision) ON DELETE CASCADE;

--
-- Name: analysis_current analysis_current_sample_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analysis_current
    ADD CONSTRAINT analysis_current_sample_id_fkey FOREIGN KEY (sample_id) REFERENCES geo.samples(sample_id) ON DELETE CASCADE;

--
-- Name: analysis_results analysis_results_sample_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analysis_results
    ADD CONSTRAINT analysis_results_sample_id_fkey FOREIGN KEY (sample_id) REFERENCES geo.samples(sample_id) ON DELETE CASCADE;

--
-- Name: analyst_logins analyst_logins_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.analyst_logins
    ADD CONSTRAINT analyst_logins_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id) ON DELETE CASCADE;

--
-- Name: answers answers_sample_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.answers
    ADD CONSTRAINT answers_sample_id_fkey FOREIGN KEY (sample_id) REFERENCES geo.samples(sample_id) ON DELETE CASCADE;

--
-- Name: attempts attempts_sample_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.attempts
    ADD CONSTRAINT attempts_sample_id_fkey FOREIGN KEY (sample_id) REFERENCES geo.samples(sample_id) ON DELETE CASCADE;

--
-- Name: batches batches_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.batches
    ADD CONSTRAINT batches_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: config_snapshots config_snapshots_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.config_snapshots
    ADD CONSTRAINT config_snapshots_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: fee_statement_lines fee_statement_lines_statement_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.fee_statement_lines
    ADD CONSTRAINT fee_statement_lines_statement_id_fkey FOREIGN KEY (statement_id) REFERENCES geo.fee_statements(statement_id) ON DELETE CASCADE;

--
-- Name: ledger_entries ledger_entries_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.ledger_entries
    ADD CONSTRAINT ledger_entries_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id);

--
-- Name: ledger_entries ledger_entries_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.ledger_entries
    ADD CONSTRAINT ledger_entries_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: mention_stances mention_stances_sample_id_detector_version_answer_revision_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.mention_stances
    ADD CONSTRAINT mention_stances_sample_id_detector_version_answer_revision_fkey FOREIGN KEY (sample_id, detector_version, answer_revision, brand) REFERENCES geo.mentions(sample_id, detector_version, answer_revision, brand) ON DELETE CASCADE;

--
-- Name: mentions mentions_sample_id_detector_version_answer_revision_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.mentions
    ADD CONSTRAINT mentions_sample_id_detector_version_answer_revision_fkey FOREIGN KEY (sample_id, detector_version, answer_revision) REFERENCES geo.analysis_results(sample_id, detector_version, answer_revision) ON DELETE CASCADE;

--
-- Name: monitor_events monitor_events_monitor_id_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitor_events
    ADD CONSTRAINT monitor_events_monitor_id_tenant_id_fkey FOREIGN KEY (monitor_id, tenant_id) REFERENCES geo.monitors(monitor_id, tenant_id);

--
-- Name: monitor_resample_failures monitor_resample_failures_monitor_id_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitor_resample_failures
    ADD CONSTRAINT monitor_resample_failures_monitor_id_tenant_id_fkey FOREIGN KEY (monitor_id, tenant_id) REFERENCES geo.monitors(monitor_id, tenant_id);

--
-- Name: monitors monitors_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.monitors
    ADD CONSTRAINT monitors_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: partition_publications partition_publications_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.partition_publications
    ADD CONSTRAINT partition_publications_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: publication_exclusions publication_exclusions_publication_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.publication_exclusions
    ADD CONSTRAINT publication_exclusions_publication_id_fkey FOREIGN KEY (publication_id) REFERENCES geo.partition_publications(publication_id) ON DELETE CASCADE;

--
-- Name: quote_lines quote_lines_quote_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.quote_lines
    ADD CONSTRAINT quote_lines_quote_id_fkey FOREIGN KEY (quote_id) REFERENCES geo.quote_snapshots(quote_id);

--
-- Name: quote_snapshots quote_snapshots_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.quote_snapshots
    ADD CONSTRAINT quote_snapshots_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: reconciliation_lines reconciliation_lines_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.reconciliation_lines
    ADD CONSTRAINT reconciliation_lines_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: retention_log retention_log_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.retention_log
    ADD CONSTRAINT retention_log_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: retention_log retention_log_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.retention_log
    ADD CONSTRAINT retention_log_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: review_decisions review_decisions_sample_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.review_decisions
    ADD CONSTRAINT review_decisions_sample_id_fkey FOREIGN KEY (sample_id) REFERENCES geo.samples(sample_id) ON DELETE CASCADE;

--
-- Name: run_accounts run_accounts_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_accounts
    ADD CONSTRAINT run_accounts_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: run_dispatches run_dispatches_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_dispatches
    ADD CONSTRAINT run_dispatches_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: run_fee_rules run_fee_rules_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_fee_rules
    ADD CONSTRAINT run_fee_rules_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: run_platforms run_platforms_run_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.run_platforms
    ADD CONSTRAINT run_platforms_run_id_fkey FOREIGN KEY (run_id) REFERENCES geo.runs(run_id) ON DELETE CASCADE;

--
-- Name: runs runs_monitor_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_monitor_id_fkey FOREIGN KEY (monitor_id) REFERENCES geo.monitors(monitor_id);

--
-- Name: runs runs_quote_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_quote_id_fkey FOREIGN KEY (quote_id) REFERENCES geo.quote_snapshots(quote_id);

--
-- Name: runs runs_snapshot_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_snapshot_id_fkey FOREIGN KEY (snapshot_id) REFERENCES geo.config_snapshots(snapshot_id);

--
-- Name: runs runs_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.runs
    ADD CONSTRAINT runs_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id);

--
-- Name: tenant_platform_limits tenant_platform_limits_tenant_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.tenant_platform_limits
    ADD CONSTRAINT tenant_platform_limits_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES geo.tenants(tenant_id) ON DELETE CASCADE;

--
-- Name: upstream_requests upstream_requests_sample_id_fkey; Type: FK CONSTRAINT; Schema: geo; Owner: geo_owner
--

ALTER TABLE ONLY geo.upstream_requests
    ADD CONSTRAINT upstream_requests_sample_id_fkey FOREIGN KEY (sample_id) REFERENCES geo.samples(sample_id) ON DELETE CASCADE;

--
-- Name: brand_day_changes analyst_tenant; Type: POLICY; Schema: analytics; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON analytics.brand_day_changes FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: brand_day_trends analyst_tenant; Type: POLICY; Schema: analytics; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON analytics.brand_day_trends FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: brand_metrics analyst_tenant; Type: POLICY; Schema: analytics; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON analytics.brand_metrics FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: channel_brand_metrics analyst_tenant; Type: POLICY; Schema: analytics; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON analytics.channel_brand_metrics FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: share_of_voice analyst_tenant; Type: POLICY; Schema: analytics; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON analytics.share_of_voice FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: source_domains analyst_tenant; Type: POLICY; Schema: analytics; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON analytics.source_domains FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: brand_day_changes; Type: ROW SECURITY; Schema: analytics; Owner: geo_owner
--

ALTER TABLE analytics.brand_day_changes ENABLE ROW LEVEL SECURITY;

--
-- Name: brand_day_trends; Type: ROW SECURITY; Schema: analytics; Owner: geo_owner
--

ALTER TABLE analytics.brand_day_trends ENABLE ROW LEVEL SECURITY;

--
-- Name: brand_metrics; Type: ROW SECURITY; Schema: analytics; Owner: geo_owner
--

ALTER TABLE analytics.brand_metrics ENABLE ROW LEVEL SECURITY;

--
-- Name: channel_brand_metrics; Type: ROW SECURITY; Schema: analytics; Owner: geo_owner
--

ALTER TABLE analytics.channel_brand_metrics ENABLE ROW LEVEL SECURITY;

--
-- Name: share_of_voice; Type: ROW SECURITY; Schema: analytics; Owner: geo_owner
--

ALTER TABLE analytics.share_of_voice ENABLE ROW LEVEL SECURITY;

--
-- Name: source_domains; Type: ROW SECURITY; Schema: analytics; Owner: geo_owner
--

ALTER TABLE analytics.source_domains ENABLE ROW LEVEL SECURITY;

--
-- Name: account_sends; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.account_sends ENABLE ROW LEVEL SECURITY;

--
-- Name: accounts; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.accounts ENABLE ROW LEVEL SECURITY;

--
-- Name: alert_deliveries; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.alert_deliveries ENABLE ROW LEVEL SECURITY;

--
-- Name: alert_recipients; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.alert_recipients ENABLE ROW LEVEL SECURITY;

--
-- Name: allowed_transitions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.allowed_transitions ENABLE ROW LEVEL SECURITY;

--
-- Name: analysis_current; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.analysis_current ENABLE ROW LEVEL SECURITY;

--
-- Name: analysis_results; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.analysis_results ENABLE ROW LEVEL SECURITY;

--
-- Name: analyst_logins; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.analyst_logins ENABLE ROW LEVEL SECURITY;

--
-- Name: analyst_logins analyst_own_login; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_own_login ON geo.analyst_logins FOR SELECT TO geo_analyst USING ((login = CURRENT_USER));

--
-- Name: allowed_transitions analyst_shared; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_shared ON geo.allowed_transitions FOR SELECT TO geo_analyst USING (true);

--
-- Name: price_versions analyst_shared; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_shared ON geo.price_versions FOR SELECT TO geo_analyst USING (true);

--
-- Name: analysis_current analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.analysis_current FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: analysis_results analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.analysis_results FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: answers analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.answers FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: attempts analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.attempts FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: batches analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.batches FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: citations analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.citations FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: config_snapshots analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.config_snapshots FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: evidence_objects analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.evidence_objects FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: ledger_entries analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.ledger_entries FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: mention_stances analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.mention_stances FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: mentions analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.mentions FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: monitor_events analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.monitor_events FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: monitor_resample_failures analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.monitor_resample_failures FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: monitors analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.monitors FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: partition_publications analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.partition_publications FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: publication_exclusions analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.publication_exclusions FOR SELECT TO geo_analyst USING ((publication_id IN ( SELECT p.publication_id
   FROM geo.partition_publications p)));

--
-- Name: question_revisions analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.question_revisions FOR SELECT TO geo_analyst USING ((question_revision IN ( SELECT s.question_revision
   FROM geo.samples s)));

--
-- Name: quote_lines analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.quote_lines FOR SELECT TO geo_analyst USING ((quote_id IN ( SELECT q.quote_id
   FROM geo.quote_snapshots q)));

--
-- Name: quote_snapshots analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.quote_snapshots FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: reconciliation_lines analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.reconciliation_lines FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: retention_log analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.retention_log FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: review_decisions analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.review_decisions FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: run_accounts analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.run_accounts FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: run_dispatches analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.run_dispatches FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: run_fee_rules analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.run_fee_rules FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: run_platforms analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.run_platforms FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: runs analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.runs FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: samples analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.samples FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: state_transitions analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.state_transitions FOR SELECT TO geo_analyst USING ((run_id IN ( SELECT r.run_id
   FROM geo.runs r)));

--
-- Name: tenant_platform_limits analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.tenant_platform_limits FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: tenants analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.tenants FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: upstream_requests analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.upstream_requests FOR SELECT TO geo_analyst USING ((sample_id IN ( SELECT s.sample_id
   FROM geo.samples s)));

--
-- Name: warc_records analyst_tenant; Type: POLICY; Schema: geo; Owner: geo_owner
--

CREATE POLICY analyst_tenant ON geo.warc_records FOR SELECT TO geo_analyst USING ((tenant_id = ( SELECT geo.analyst_tenant() AS analyst_tenant)));

--
-- Name: answers; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.answers ENABLE ROW LEVEL SECURITY;

--
-- Name: attempts; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.attempts ENABLE ROW LEVEL SECURITY;

--
-- Name: batches; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.batches ENABLE ROW LEVEL SECURITY;

--
-- Name: citations; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.citations ENABLE ROW LEVEL SECURITY;

--
-- Name: config_snapshots; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.config_snapshots ENABLE ROW LEVEL SECURITY;

--
-- Name: dead_letters; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.dead_letters ENABLE ROW LEVEL SECURITY;

--
-- Name: evidence_objects; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.evidence_objects ENABLE ROW LEVEL SECURITY;

--
-- Name: fee_statement_lines; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.fee_statement_lines ENABLE ROW LEVEL SECURITY;

--
-- Name: fee_statements; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.fee_statements ENABLE ROW LEVEL SECURITY;

--
-- Name: ledger_entries; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.ledger_entries ENABLE ROW LEVEL SECURITY;

--
-- Name: mention_stances; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.mention_stances ENABLE ROW LEVEL SECURITY;

--
-- Name: mentions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.mentions ENABLE ROW LEVEL SECURITY;

--
-- Name: monitor_events; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.monitor_events ENABLE ROW LEVEL SECURITY;

--
-- Name: monitor_resample_failures; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.monitor_resample_failures ENABLE ROW LEVEL SECURITY;

--
-- Name: monitors; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.monitors ENABLE ROW LEVEL SECURITY;

--
-- Name: outbox; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.outbox ENABLE ROW LEVEL SECURITY;

--
-- Name: partition_publications; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.partition_publications ENABLE ROW LEVEL SECURITY;

--
-- Name: price_versions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.price_versions ENABLE ROW LEVEL SECURITY;

--
-- Name: publication_exclusions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.publication_exclusions ENABLE ROW LEVEL SECURITY;

--
-- Name: question_revisions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.question_revisions ENABLE ROW LEVEL SECURITY;

--
-- Name: quote_lines; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.quote_lines ENABLE ROW LEVEL SECURITY;

--
-- Name: quote_snapshots; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.quote_snapshots ENABLE ROW LEVEL SECURITY;

--
-- Name: reconciliation_lines; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.reconciliation_lines ENABLE ROW LEVEL SECURITY;

--
-- Name: retention_log; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.retention_log ENABLE ROW LEVEL SECURITY;

--
-- Name: review_decisions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.review_decisions ENABLE ROW LEVEL SECURITY;

--
-- Name: run_accounts; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.run_accounts ENABLE ROW LEVEL SECURITY;

--
-- Name: run_dispatches; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.run_dispatches ENABLE ROW LEVEL SECURITY;

--
-- Name: run_fee_rules; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.run_fee_rules ENABLE ROW LEVEL SECURITY;

--
-- Name: run_platforms; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.run_platforms ENABLE ROW LEVEL SECURITY;

--
-- Name: runs; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.runs ENABLE ROW LEVEL SECURITY;

--
-- Name: samples; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.samples ENABLE ROW LEVEL SECURITY;

--
-- Name: state_transitions; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.state_transitions ENABLE ROW LEVEL SECURITY;

--
-- Name: tenant_platform_limits; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.tenant_platform_limits ENABLE ROW LEVEL SECURITY;

--
-- Name: tenants; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.tenants ENABLE ROW LEVEL SECURITY;

--
-- Name: upstream_requests; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.upstream_requests ENABLE ROW LEVEL SECURITY;

--
-- Name: warc_records; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.warc_records ENABLE ROW LEVEL SECURITY;

--
-- Name: webhook_deliveries; Type: ROW SECURITY; Schema: geo; Owner: geo_owner
--

ALTER TABLE geo.webhook_deliveries ENABLE ROW LEVEL SECURITY;

--
-- Name: SCHEMA analytics; Type: ACL; Schema: -; Owner: geo_owner
--

GRANT USAGE ON SCHEMA analytics TO geo_service;
GRANT USAGE ON SCHEMA analytics TO geo_analyst;

--
-- Name: SCHEMA geo; Type: ACL; Schema: -; Owner: geo_owner
--

GRANT USAGE ON SCHEMA geo TO geo_service;
GRANT USAGE ON SCHEMA geo TO geo_analyst;

--
-- Name: TABLE brand_day_changes; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE analytics.brand_day_changes TO geo_service;
GRANT SELECT ON TABLE analytics.brand_day_changes TO geo_analyst;

--
-- Name: TABLE brand_day_trends; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE analytics.brand_day_trends TO geo_service;
GRANT SELECT ON TABLE analytics.brand_day_trends TO geo_analyst;

--
-- Name: FUNCTION rebuild_brand_rollup(p_monitor text); Type: ACL; Schema: analytics; Owner: geo_owner
--

REVOKE ALL ON FUNCTION analytics.rebuild_brand_rollup(p_monitor text) FROM PUBLIC;
GRANT ALL ON FUNCTION analytics.rebuild_brand_rollup(p_monitor text) TO geo_service;

--
-- Name: FUNCTION refresh_brand_rollup(p_monitor text, p_day date); Type: ACL; Schema: analytics; Owner: geo_owner
--

REVOKE ALL ON FUNCTION analytics.refresh_brand_rollup(p_monitor text, p_day date) FROM PUBLIC;
GRANT ALL ON FUNCTION analytics.refresh_brand_rollup(p_monitor text, p_day date) TO geo_service;

--
-- Name: FUNCTION rewrite_brand_days(p_monitor text, p_days date[]); Type: ACL; Schema: analytics; Owner: geo_owner
--

REVOKE ALL ON FUNCTION analytics.rewrite_brand_days(p_monitor text, p_days date[]) FROM PUBLIC;
GRANT ALL ON FUNCTION analytics.rewrite_brand_days(p_monitor text, p_days date[]) TO geo_service;

--
-- Name: FUNCTION enable_replica_identities(); Type: ACL; Schema: geo; Owner: geo_owner
--

REVOKE ALL ON FUNCTION geo.enable_replica_identities() FROM PUBLIC;

--
-- Name: TABLE brand_changes; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.brand_changes TO geo_analyst;
GRANT SELECT ON TABLE analytics.brand_changes TO geo_service;

--
-- Name: TABLE brand_metrics; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE analytics.brand_metrics TO geo_service;
GRANT SELECT ON TABLE analytics.brand_metrics TO geo_analyst;

--
-- Name: TABLE brand_question_days; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.brand_question_days TO geo_analyst;
GRANT SELECT ON TABLE analytics.brand_question_days TO geo_service;

--
-- Name: TABLE config_snapshots; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.config_snapshots TO geo_service;
GRANT SELECT ON TABLE geo.config_snapshots TO geo_analyst;

--
-- Name: TABLE runs; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.runs TO geo_service;
GRANT SELECT ON TABLE geo.runs TO geo_analyst;

--
-- Name: TABLE question_tags; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.question_tags TO geo_service;
GRANT SELECT ON TABLE analytics.question_tags TO geo_analyst;

--
-- Name: TABLE brand_rates_by_tag; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.brand_rates_by_tag TO geo_service;
GRANT SELECT ON TABLE analytics.brand_rates_by_tag TO geo_analyst;

--
-- Name: TABLE brand_trends; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.brand_trends TO geo_analyst;
GRANT SELECT ON TABLE analytics.brand_trends TO geo_service;

--
-- Name: TABLE channel_brand_metrics; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE analytics.channel_brand_metrics TO geo_service;
GRANT SELECT ON TABLE analytics.channel_brand_metrics TO geo_analyst;

--
-- Name: COLUMN channel_brand_metrics.questions; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(questions) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.design_effect; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(design_effect) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.n_effective; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(n_effective) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.mention_rate_lower; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(mention_rate_lower) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.mention_rate_upper; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(mention_rate_upper) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.citation_design_effect; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(citation_design_effect) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.citation_n_effective; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(citation_n_effective) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.citation_rate_lower; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(citation_rate_lower) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: COLUMN channel_brand_metrics.citation_rate_upper; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(citation_rate_upper) ON TABLE analytics.channel_brand_metrics TO geo_service;

--
-- Name: TABLE run_brands; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.run_brands TO geo_service;
GRANT SELECT ON TABLE analytics.run_brands TO geo_analyst;

--
-- Name: TABLE analysis_current; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE geo.analysis_current TO geo_service;
GRANT SELECT ON TABLE geo.analysis_current TO geo_analyst;

--
-- Name: TABLE answers; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.answers TO geo_service;
GRANT SELECT ON TABLE geo.answers TO geo_analyst;

--
-- Name: TABLE review_decisions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.review_decisions TO geo_service;
GRANT SELECT ON TABLE geo.review_decisions TO geo_analyst;

--
-- Name: TABLE samples; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.samples TO geo_service;
GRANT SELECT ON TABLE geo.samples TO geo_analyst;

--
-- Name: TABLE sample_status; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.sample_status TO geo_service;
GRANT SELECT ON TABLE analytics.sample_status TO geo_analyst;

--
-- Name: TABLE mentions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.mentions TO geo_service;
GRANT SELECT ON TABLE geo.mentions TO geo_analyst;

--
-- Name: TABLE sample_brand_facts; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.sample_brand_facts TO geo_service;
GRANT SELECT ON TABLE analytics.sample_brand_facts TO geo_analyst;

--
-- Name: TABLE run_platforms; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.run_platforms TO geo_service;
GRANT SELECT ON TABLE geo.run_platforms TO geo_analyst;

--
-- Name: TABLE counted_answers; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.counted_answers TO geo_service;
GRANT SELECT ON TABLE analytics.counted_answers TO geo_analyst;

--
-- Name: TABLE citations; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.citations TO geo_service;
GRANT SELECT ON TABLE geo.citations TO geo_analyst;

--
-- Name: TABLE citation_gap; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.citation_gap TO geo_service;
GRANT SELECT ON TABLE analytics.citation_gap TO geo_analyst;

--
-- Name: TABLE partition_publications; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.partition_publications TO geo_service;
GRANT SELECT ON TABLE geo.partition_publications TO geo_analyst;

--
-- Name: TABLE partition_publications; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.partition_publications TO geo_service;
GRANT SELECT ON TABLE analytics.partition_publications TO geo_analyst;

--
-- Name: TABLE publication_exclusions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.publication_exclusions TO geo_service;
GRANT SELECT ON TABLE geo.publication_exclusions TO geo_analyst;

--
-- Name: TABLE excluded_samples; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.excluded_samples TO geo_service;
GRANT SELECT ON TABLE analytics.excluded_samples TO geo_analyst;

--
-- Name: TABLE fan_out; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.fan_out TO geo_service;
GRANT SELECT ON TABLE analytics.fan_out TO geo_analyst;

--
-- Name: TABLE fan_out_channels; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.fan_out_channels TO geo_service;
GRANT SELECT ON TABLE analytics.fan_out_channels TO geo_analyst;

--
-- Name: TABLE analysis_results; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.analysis_results TO geo_service;
GRANT SELECT ON TABLE geo.analysis_results TO geo_analyst;

--
-- Name: TABLE question_revisions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.question_revisions TO geo_service;
GRANT SELECT ON TABLE geo.question_revisions TO geo_analyst;

--
-- Name: TABLE sample_facts; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.sample_facts TO geo_service;
GRANT SELECT ON TABLE analytics.sample_facts TO geo_analyst;

--
-- Name: TABLE share_of_voice; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE analytics.share_of_voice TO geo_service;
GRANT SELECT ON TABLE analytics.share_of_voice TO geo_analyst;

--
-- Name: COLUMN share_of_voice.questions; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(questions) ON TABLE analytics.share_of_voice TO geo_service;

--
-- Name: COLUMN share_of_voice.share_design_effect; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(share_design_effect) ON TABLE analytics.share_of_voice TO geo_service;

--
-- Name: COLUMN share_of_voice.share_n_effective; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(share_n_effective) ON TABLE analytics.share_of_voice TO geo_service;

--
-- Name: COLUMN share_of_voice.share_of_answers_lower; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(share_of_answers_lower) ON TABLE analytics.share_of_voice TO geo_service;

--
-- Name: COLUMN share_of_voice.share_of_answers_upper; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT UPDATE(share_of_answers_upper) ON TABLE analytics.share_of_voice TO geo_service;

--
-- Name: TABLE source_domains; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE analytics.source_domains TO geo_service;
GRANT SELECT ON TABLE analytics.source_domains TO geo_analyst;

--
-- Name: TABLE mention_stances; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.mention_stances TO geo_service;
GRANT SELECT ON TABLE geo.mention_stances TO geo_analyst;

--
-- Name: TABLE stance_question_counts; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.stance_question_counts TO geo_service;
GRANT SELECT ON TABLE analytics.stance_question_counts TO geo_analyst;

--
-- Name: TABLE stance_rates; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.stance_rates TO geo_service;
GRANT SELECT ON TABLE analytics.stance_rates TO geo_analyst;

--
-- Name: TABLE stance_rates_by_tag; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.stance_rates_by_tag TO geo_service;
GRANT SELECT ON TABLE analytics.stance_rates_by_tag TO geo_analyst;

--
-- Name: TABLE ui_api_agreement; Type: ACL; Schema: analytics; Owner: geo_owner
--

GRANT SELECT ON TABLE analytics.ui_api_agreement TO geo_service;
GRANT SELECT ON TABLE analytics.ui_api_agreement TO geo_analyst;

--
-- Name: TABLE ledger_entries; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.ledger_entries TO geo_service;
GRANT SELECT ON TABLE geo.ledger_entries TO geo_analyst;

--
-- Name: TABLE account_balances; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT ON TABLE geo.account_balances TO geo_service;
GRANT SELECT ON TABLE geo.account_balances TO geo_analyst;

--
-- Name: TABLE account_sends; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.account_sends TO geo_service;

--
-- Name: TABLE accounts; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.accounts TO geo_service;

--
-- Name: TABLE alert_deliveries; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.alert_deliveries TO geo_service;

--
-- Name: TABLE alert_recipients; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.alert_recipients TO geo_service;

--
-- Name: SEQUENCE alert_recipients_recipient_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.alert_recipients_recipient_id_seq TO geo_service;

--
-- Name: TABLE allowed_transitions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT ON TABLE geo.allowed_transitions TO geo_service;
GRANT SELECT ON TABLE geo.allowed_transitions TO geo_analyst;

--
-- Name: TABLE analyst_logins; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT ON TABLE geo.analyst_logins TO geo_analyst;

--
-- Name: TABLE attempts; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE geo.attempts TO geo_service;
GRANT SELECT ON TABLE geo.attempts TO geo_analyst;

--
-- Name: TABLE batches; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.batches TO geo_service;
GRANT SELECT ON TABLE geo.batches TO geo_analyst;

--
-- Name: TABLE dead_letters; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.dead_letters TO geo_service;

--
-- Name: SEQUENCE dead_letters_dead_letter_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.dead_letters_dead_letter_id_seq TO geo_service;

--
-- Name: TABLE evidence_objects; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.evidence_objects TO geo_service;
GRANT SELECT ON TABLE geo.evidence_objects TO geo_analyst;

--
-- Name: SEQUENCE evidence_objects_object_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.evidence_objects_object_id_seq TO geo_service;

--
-- Name: TABLE fee_statement_lines; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.fee_statement_lines TO geo_service;

--
-- Name: TABLE fee_statements; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.fee_statements TO geo_service;

--
-- Name: SEQUENCE fee_statements_statement_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.fee_statements_statement_id_seq TO geo_service;

--
-- Name: SEQUENCE ledger_entries_entry_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.ledger_entries_entry_id_seq TO geo_service;

--
-- Name: TABLE monitor_events; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.monitor_events TO geo_service;
GRANT SELECT ON TABLE geo.monitor_events TO geo_analyst;

--
-- Name: SEQUENCE monitor_events_event_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.monitor_events_event_id_seq TO geo_service;

--
-- Name: TABLE monitor_resample_failures; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.monitor_resample_failures TO geo_service;
GRANT SELECT ON TABLE geo.monitor_resample_failures TO geo_analyst;

--
-- Name: TABLE monitors; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.monitors TO geo_service;
GRANT SELECT ON TABLE geo.monitors TO geo_analyst;

--
-- Name: TABLE outbox; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE geo.outbox TO geo_service;

--
-- Name: SEQUENCE outbox_outbox_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.outbox_outbox_id_seq TO geo_service;

--
-- Name: SEQUENCE partition_publications_publication_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.partition_publications_publication_id_seq TO geo_service;

--
-- Name: TABLE price_versions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.price_versions TO geo_service;
GRANT SELECT ON TABLE geo.price_versions TO geo_analyst;

--
-- Name: TABLE quote_lines; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.quote_lines TO geo_service;
GRANT SELECT ON TABLE geo.quote_lines TO geo_analyst;

--
-- Name: TABLE quote_snapshots; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.quote_snapshots TO geo_service;
GRANT SELECT ON TABLE geo.quote_snapshots TO geo_analyst;

--
-- Name: TABLE reconciliation_lines; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.reconciliation_lines TO geo_service;
GRANT SELECT ON TABLE geo.reconciliation_lines TO geo_analyst;

--
-- Name: TABLE retention_log; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.retention_log TO geo_service;
GRANT SELECT ON TABLE geo.retention_log TO geo_analyst;

--
-- Name: SEQUENCE retention_log_retention_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.retention_log_retention_id_seq TO geo_service;

--
-- Name: SEQUENCE review_decisions_decision_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.review_decisions_decision_id_seq TO geo_service;

--
-- Name: TABLE run_accounts; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.run_accounts TO geo_service;
GRANT SELECT ON TABLE geo.run_accounts TO geo_analyst;

--
-- Name: TABLE run_billing; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT ON TABLE geo.run_billing TO geo_service;
GRANT SELECT ON TABLE geo.run_billing TO geo_analyst;

--
-- Name: TABLE run_dispatches; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.run_dispatches TO geo_service;
GRANT SELECT ON TABLE geo.run_dispatches TO geo_analyst;

--
-- Name: TABLE run_fee_rules; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.run_fee_rules TO geo_service;
GRANT SELECT ON TABLE geo.run_fee_rules TO geo_analyst;

--
-- Name: TABLE run_publish_deadlines; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT ON TABLE geo.run_publish_deadlines TO geo_service;
GRANT SELECT ON TABLE geo.run_publish_deadlines TO geo_analyst;

--
-- Name: TABLE state_transitions; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT ON TABLE geo.state_transitions TO geo_service;
GRANT SELECT ON TABLE geo.state_transitions TO geo_analyst;

--
-- Name: SEQUENCE state_transitions_transition_id_seq; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT USAGE ON SEQUENCE geo.state_transitions_transition_id_seq TO geo_service;

--
-- Name: TABLE tenant_platform_limits; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE geo.tenant_platform_limits TO geo_service;
GRANT SELECT ON TABLE geo.tenant_platform_limits TO geo_analyst;

--
-- Name: TABLE tenants; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.tenants TO geo_service;
GRANT SELECT ON TABLE geo.tenants TO geo_analyst;

--
-- Name: TABLE upstream_requests; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.upstream_requests TO geo_service;
GRANT SELECT ON TABLE geo.upstream_requests TO geo_analyst;

--
-- Name: TABLE warc_records; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,DELETE ON TABLE geo.warc_records TO geo_service;
GRANT SELECT ON TABLE geo.warc_records TO geo_analyst;

--
-- Name: TABLE webhook_deliveries; Type: ACL; Schema: geo; Owner: geo_owner
--

GRANT SELECT,INSERT,UPDATE ON TABLE geo.webhook_deliveries TO geo_service;

-- Rows the migrations seed.
--
-- Data for Name: allowed_transitions; Type: TABLE DATA; Schema: geo; Owner: geo_owner
--

INSERT INTO geo.allowed_transitions (layer, from_state, to_state) VALUES
	('submission', NULL, 'planned'),
	('submission', 'planned', 'submitting'),
	('submission', 'submitting', 'accepted'),
	('submission', 'submitting', 'uncertain'),
	('submission', 'submitting', 'planned'),
	('submission', 'uncertain', 'accepted'),
	('submission', 'uncertain', 'planned'),
	('submission', 'accepted', 'planned'),
	('collection', NULL, 'queued'),
	('collection', 'queued', 'running'),
	('collection', 'queued', 'failed'),
	('collection', 'running', 'queued'),
	('collection', 'running', 'completed'),
	('collection', 'running', 'failed'),
	('evidence', NULL, 'pending'),
	('evidence', 'pending', 'stored'),
	('evidence', 'pending', 'partial'),
	('evidence', 'pending', 'failed'),
	('evidence', 'partial', 'stored'),
	('evidence', 'failed', 'stored'),
	('evidence', 'failed', 'partial'),
	('analysis', NULL, 'pending'),
	('analysis', 'pending', 'accepted'),
	('analysis', 'pending', 'review'),
	('analysis', 'pending', 'failed'),
	('analysis', 'review', 'accepted'),
	('analysis', 'review', 'failed'),
	('analysis', 'accepted', 'pending'),
	('analysis', 'review', 'pending'),
	('analysis', 'failed', 'pending');
