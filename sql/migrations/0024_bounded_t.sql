-- Student's t bounded everywhere (issue #39): analytics.t_critical_95 summed the t tail term
-- by term up to df inside a 100-step bisection, so its work grew with df and its terms
-- underflowed float8 from df ~ 500 ("value out of range: underflow"): a pooled rate over 500
-- or more questions could not be refreshed. The same arithmetic as geo_pipeline/domain/stats.py
-- (t_two_sided_p, t_critical, normal_two_sided_p); a test holds them equal, and both are
-- checked against a 30-digit reference table over df = 1 ... 10^6
-- (geo_pipeline_tests/unit/analysis/t_reference.json). Errors there:
--   t_two_sided_p: df <= 100 exact series, < 1e-14 absolute; df > 100 Hill (1970, CACM
--                  algorithm 395) normalising transform on the erfc fit, < 6e-8 absolute and
--                  < 2e-7 relative where p > 1e-12.
--   t_critical_95: Hill (1970, CACM algorithm 396), exact for df = 1, 2; for 3 <= df <= 100
--                  two Newton steps on the exact tail, < 1e-13; for df > 100 Hill alone, < 1e-8.
-- Work per call: at most ~150 loop steps whatever df is.

-- P(|Z| >= |z|): as 0021, and 0 (not an underflow error) where p < 1e-293 (|z| / sqrt 2 > 26).
CREATE OR REPLACE FUNCTION analytics.normal_two_sided_p(z double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN a.x > 26 THEN 0.0 ELSE
         least(1.0, t * exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
           0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
           1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))) END
    FROM (SELECT abs(z) / sqrt(2.0) AS x) a
    CROSS JOIN LATERAL (SELECT 1.0 / (1.0 + 0.5 * a.x) AS t) b
$$;

-- P(|T| >= |t|) for Student's t with integer df >= 1. df <= 100: Abramowitz & Stegun 26.7.3-4
-- (exact, df / 2 terms; a term below 1e-270 ends the sum: cos(theta)^2 >= 3.7e-33 even at
-- theta = pi / 2, so the next product stays a normal float8). df > 100: Hill's transform.
CREATE OR REPLACE FUNCTION analytics.t_two_sided_p(t double precision, df integer)
RETURNS double precision LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
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

-- The two-sided 5 % critical value of Student's t with df degrees of freedom.
CREATE OR REPLACE FUNCTION analytics.t_critical_95(df integer)
RETURNS double precision LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
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
