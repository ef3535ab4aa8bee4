-- Stance per brand mention (issue 37 item 5): what an answer says about each brand it names.
--
-- One row per mentioned brand of an analysed answer and stance detector version
-- (geo_pipeline.domain.stance.STANCE_VERSION), beside the mention row it judges; a new stance
-- version adds rows and keeps the older ones (history is re-computable, like the mention facts'
-- detector_version). Rows go with their mention row (cascade).
CREATE TABLE geo.mention_stances (
  sample_id        text NOT NULL,
  detector_version text NOT NULL,            -- the mention detector's (geo.mentions)
  answer_revision  integer NOT NULL,
  brand            text NOT NULL,
  stance_version   text NOT NULL,
  stance           text NOT NULL
    CHECK (stance IN ('recommended', 'neutral', 'cautioned', 'negative')),
  attributes       text[] NOT NULL DEFAULT '{}'
    CHECK (attributes <@ ARRAY['price', 'quality', 'service', 'taste', 'convenience',
                               'availability', 'safety', 'sustainability', 'brand_reputation',
                               'design', 'other']::text[]),
  computed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (sample_id, detector_version, answer_revision, brand, stance_version),
  FOREIGN KEY (sample_id, detector_version, answer_revision, brand)
    REFERENCES geo.mentions ON DELETE CASCADE
);

ALTER TABLE geo.mention_stances OWNER TO geo_owner;
GRANT SELECT, INSERT, DELETE ON geo.mention_stances TO geo_service;
GRANT SELECT ON geo.mention_stances TO geo_analyst;
ALTER TABLE geo.mention_stances ENABLE ROW LEVEL SECURITY;
CREATE POLICY analyst_tenant ON geo.mention_stances FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));

-- Per run x channel x question x brand x stance version x stance: of the answers whose current
-- analysis is known and mentions the brand (m), how many take this stance (x). The base of the
-- two rate views; a question is the cluster of the interval.
CREATE VIEW analytics.stance_question_counts WITH (security_invoker = true) AS
SELECT st.tenant_id, st.run_id, r.monitor_id, r.scheduled_for, st.channel, m.brand,
       bool_or(m.is_target) AS is_target, st.question_revision, ms.stance_version, s.stance,
       count(*)::float8 AS m,
       count(*) FILTER (WHERE ms.stance = s.stance)::float8 AS x
  FROM analytics.sample_status st
  JOIN geo.runs r ON r.run_id = st.run_id
  JOIN geo.mentions m
    ON m.sample_id = st.sample_id AND m.detector_version = st.detector_version
   AND m.answer_revision = st.analysed_revision AND m.mentioned
  JOIN geo.mention_stances ms
    ON ms.sample_id = m.sample_id AND ms.detector_version = m.detector_version
   AND ms.answer_revision = m.answer_revision AND ms.brand = m.brand
 CROSS JOIN unnest(ARRAY['recommended', 'neutral', 'cautioned', 'negative']) AS s(stance)
 WHERE st.mention_status = 'known'
 GROUP BY st.tenant_id, st.run_id, r.monitor_id, r.scheduled_for, st.channel, m.brand,
          st.question_revision, ms.stance_version, s.stance;

-- Stance rates per run x channel x brand x stance version: n = answers mentioning the brand,
-- stance_rate = share of them with the stance. The interval is the project's one (as
-- analytics.brand_rates_by_tag): each question a cluster, analytics.design_effect -> effective
-- n, analytics.clustered_wilson_lower/upper (Wilson when one question).
CREATE VIEW analytics.stance_rates WITH (security_invoker = true) AS
WITH agg AS (
  SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, brand,
         bool_or(is_target) AS is_target, stance_version, stance, count(*) AS k,
         sum(m) AS m, sum(x) AS x, sum(x * x) AS sxx, sum(x * m) AS sxm, sum(m * m) AS smm
    FROM analytics.stance_question_counts
   GROUP BY tenant_id, run_id, monitor_id, scheduled_for, channel, brand, stance_version, stance
), est AS (
  SELECT a.*, a.x / a.m AS rate,
         a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff
    FROM agg a
)
SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, brand, is_target, stance_version,
       stance, k::int AS questions, m::int AS n, x::int AS stance_count, rate AS stance_rate,
       n_eff AS n_effective,
       analytics.clustered_wilson_lower(rate, n_eff, (k - 1)::int) AS stance_rate_lower,
       analytics.clustered_wilson_upper(rate, n_eff, (k - 1)::int) AS stance_rate_upper,
       CASE WHEN k >= 2 THEN 'question-clustered, ' || k || ' questions'
            ELSE 'Wilson, 1 question' END AS interval_method
  FROM est;

-- The same per tag value (analytics.question_tags, migration 0047).
CREATE VIEW analytics.stance_rates_by_tag WITH (security_invoker = true) AS
WITH agg AS (
  SELECT q.tenant_id, q.run_id, q.monitor_id, q.scheduled_for, q.channel, q.brand,
         bool_or(q.is_target) AS is_target, t.tag, t.value, q.stance_version, q.stance,
         count(*) AS k, sum(q.m) AS m, sum(q.x) AS x, sum(q.x * q.x) AS sxx,
         sum(q.x * q.m) AS sxm, sum(q.m * q.m) AS smm
    FROM analytics.stance_question_counts q
    JOIN analytics.question_tags t
      ON t.run_id = q.run_id AND t.question_revision = q.question_revision
   GROUP BY q.tenant_id, q.run_id, q.monitor_id, q.scheduled_for, q.channel, q.brand, t.tag,
            t.value, q.stance_version, q.stance
), est AS (
  SELECT a.*, a.x / a.m AS rate,
         a.m / analytics.design_effect(a.k, a.x, a.m, a.sxx, a.sxm, a.smm) AS n_eff
    FROM agg a
)
SELECT tenant_id, run_id, monitor_id, scheduled_for, channel, brand, is_target, tag, value,
       stance_version, stance, k::int AS questions, m::int AS n, x::int AS stance_count,
       rate AS stance_rate, n_eff AS n_effective,
       analytics.clustered_wilson_lower(rate, n_eff, (k - 1)::int) AS stance_rate_lower,
       analytics.clustered_wilson_upper(rate, n_eff, (k - 1)::int) AS stance_rate_upper,
       CASE WHEN k >= 2 THEN 'question-clustered, ' || k || ' questions'
            ELSE 'Wilson, 1 question' END AS interval_method
  FROM est;

ALTER VIEW analytics.stance_question_counts OWNER TO geo_owner;
ALTER VIEW analytics.stance_rates OWNER TO geo_owner;
ALTER VIEW analytics.stance_rates_by_tag OWNER TO geo_owner;
GRANT SELECT ON analytics.stance_question_counts, analytics.stance_rates,
  analytics.stance_rates_by_tag TO geo_service, geo_analyst;
