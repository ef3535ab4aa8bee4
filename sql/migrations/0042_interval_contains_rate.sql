-- Issue 34 (one truth, honest intervals): at a rate of 0 the Wilson lower bound is 0 in real
-- numbers, but floating-point rounding left it 4.4e-17 above (and the upper bound at a rate of 1
-- 1e-16 below): an interval that excluded the very rate it was drawn around. Both bounds are now
-- clamped around the rate as well as into [0, 1], exactly as domain/stats.py does (_contain).
CREATE OR REPLACE FUNCTION analytics.clustered_wilson_lower(rate double precision,
  n_effective double precision, df integer, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n_effective > 0 THEN greatest(0.0, least(rate,
    (rate + z * z / (2.0 * ns) - z * sqrt(greatest(0.0, rate * (1 - rate)) / ns + z * z / (4.0 * ns * ns)))
    / (1 + z * z / ns))) END
    FROM (SELECT CASE WHEN df >= 1 THEN n_effective * (z / analytics.t_critical_95(df)) ^ 2
                      ELSE n_effective END AS ns) s
$$;

CREATE OR REPLACE FUNCTION analytics.clustered_wilson_upper(rate double precision,
  n_effective double precision, df integer, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n_effective > 0 THEN least(1.0, greatest(rate,
    (rate + z * z / (2.0 * ns) + z * sqrt(greatest(0.0, rate * (1 - rate)) / ns + z * z / (4.0 * ns * ns)))
    / (1 + z * z / ns))) END
    FROM (SELECT CASE WHEN df >= 1 THEN n_effective * (z / analytics.t_critical_95(df)) ^ 2
                      ELSE n_effective END AS ns) s
$$;
