-- Brand analysis and the analyst interface (issue 6; R6, R7, R22). docs/analysts.md documents
-- every object of the analytics schema below; tests in geo_pipeline_tests/integration/analysis
-- check counts, rates and Wilson bounds against values worked out by hand.

-- Which analysis result of a sample the analyst views read: the one the latest analyse_run
-- wrote. Older detector versions' results stay in geo.analysis_results / geo.mentions (history).
CREATE TABLE geo.analysis_current (
  sample_id        text PRIMARY KEY REFERENCES geo.samples ON DELETE CASCADE,
  detector_version text NOT NULL,
  answer_revision  integer NOT NULL,
  FOREIGN KEY (sample_id, detector_version, answer_revision)
    REFERENCES geo.analysis_results ON DELETE CASCADE
);

-- The views look up a sample's latest validity verdict by a reviewer.
CREATE INDEX review_decisions_sample ON geo.review_decisions (sample_id, subject, decision_id);

-- ---------------------------------------------------------------- statistics (= domain/stats.py)
-- Wilson score interval of x successes in n trials; NULL when n = 0. z = 1.96 gives 95 %.
CREATE FUNCTION analytics.wilson_lower(x bigint, n bigint, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n > 0 THEN greatest(0.0,
    (x::float8 / n + z * z / (2.0 * n)
      - z * sqrt((x::float8 / n) * (1 - x::float8 / n) / n + z * z / (4.0 * n * n)))
    / (1 + z * z / n)) END
$$;

CREATE FUNCTION analytics.wilson_upper(x bigint, n bigint, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n > 0 THEN least(1.0,
    (x::float8 / n + z * z / (2.0 * n)
      + z * sqrt((x::float8 / n) * (1 - x::float8 / n) / n + z * z / (4.0 * n * n)))
    / (1 + z * z / n)) END
$$;

-- Pooled two-proportion z statistic of x2/n2 - x1/n1; NULL when undefined (no sample, or no
-- variance because both proportions are 0 or both are 1).
CREATE FUNCTION analytics.two_proportion_z(x1 bigint, n1 bigint, x2 bigint, n2 bigint)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN n1 > 0 AND n2 > 0
     AND (x1 + x2)::float8 / (n1 + n2) * (1 - (x1 + x2)::float8 / (n1 + n2)) > 0
    THEN (x2::float8 / n2 - x1::float8 / n1)
         / sqrt((x1 + x2)::float8 / (n1 + n2) * (1 - (x1 + x2)::float8 / (n1 + n2))
                * (1.0 / n1 + 1.0 / n2))
  END
$$;

-- ---------------------------------------------------------------- live views
-- The tracked brands of each run, from its frozen config snapshot (R2): target first.
CREATE VIEW analytics.run_brands AS
SELECT r.run_id, (c.config -> 'brand' ->> 'name') AS brand, true AS is_target, 0 AS brand_order
  FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
UNION ALL
SELECT r.run_id, comp.value ->> 'name', false, comp.ordinality::integer
  FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
  CROSS JOIN LATERAL jsonb_array_elements(c.config -> 'competitors') WITH ORDINALITY AS comp;

-- One row per sample, lean: identity, validity, and whether its mentions are known.
-- mention_status: 'known' (valid answer, analysis accepted), 'analysing' (analysis pending:
-- UNKNOWN, never "not mentioned", R6), 'in_review', 'excluded' (invalid answer or analysis
-- failed). validity is the reviewer's verdict where there is one, else the rules' verdict.
-- Every other analytics object derives from this one definition.
CREATE VIEW analytics.sample_status AS
SELECT s.sample_id, s.run_id, s.tenant_id, s.question_revision, s.question_index,
       s.platform, s.device, s.channel, s.region, s.mode, s.repeat_index, s.analysis_state,
       a.revision AS answer_revision, a.captured_at,
       a.validity AS validity_judged, a.validity_reason,
       vd.verdict AS validity_reviewed,
       coalesce(vd.verdict, a.validity) AS validity,
       CASE
         WHEN s.analysis_state = 'accepted' AND coalesce(vd.verdict, a.validity) = 'valid'
           THEN 'known'
         WHEN s.analysis_state = 'pending' THEN 'analysing'
         WHEN s.analysis_state = 'review' THEN 'in_review'
         ELSE 'excluded'
       END AS mention_status,
       ac.detector_version, ac.answer_revision AS analysed_revision
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.captured_at, a1.validity, a1.validity_reason
                       FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
  LEFT JOIN geo.analysis_current ac ON ac.sample_id = s.sample_id;

-- One row per sample: sample_status with every state and reason, the run's monitor and day,
-- the question text, and the target brand's mention facts (NULL unless known).
CREATE VIEW analytics.sample_facts AS
SELECT st.sample_id, st.run_id, st.tenant_id, r.monitor_id, r.scheduled_for,
       st.question_revision, st.question_index, q.text AS question_text,
       st.platform, st.device, st.channel, st.region, st.mode, st.repeat_index, s.attempt_no,
       s.submission_state, s.collection_state, s.evidence_state, s.analysis_state,
       s.submission_reason, s.collection_reason, s.evidence_reason, s.analysis_reason,
       s.upstream_id, s.completed_at,
       st.answer_revision, st.captured_at, st.validity_judged, st.validity_reason,
       st.validity_reviewed, st.validity, st.mention_status, st.detector_version, ar.analysed_at,
       CASE WHEN st.mention_status = 'known' THEN coalesce(tm.mentioned, false) END
         AS target_mentioned,
       CASE WHEN st.mention_status = 'known' THEN tm.rank END AS target_rank,
       CASE WHEN st.mention_status = 'known'
            THEN (SELECT count(*) FROM geo.mentions m
                   WHERE m.sample_id = st.sample_id AND m.detector_version = st.detector_version
                     AND m.answer_revision = st.analysed_revision AND m.mentioned) END
         AS brands_mentioned
  FROM analytics.sample_status st
  JOIN geo.samples s ON s.sample_id = st.sample_id
  JOIN geo.runs r ON r.run_id = st.run_id
  JOIN geo.question_revisions q ON q.question_revision = st.question_revision
  LEFT JOIN geo.analysis_results ar ON ar.sample_id = st.sample_id
       AND ar.detector_version = st.detector_version
       AND ar.answer_revision = st.analysed_revision
  LEFT JOIN geo.mentions tm ON tm.sample_id = st.sample_id
       AND tm.detector_version = st.detector_version
       AND tm.answer_revision = st.analysed_revision AND tm.is_target;

-- One row per sample x tracked brand. The mention columns are NULL unless mention_status is
-- 'known', so a count of "not mentioned" can never include a sample still being analysed.
CREATE VIEW analytics.sample_brand_facts AS
SELECT st.sample_id, st.run_id, st.tenant_id, r.monitor_id, r.scheduled_for,
       st.question_revision, st.question_index, st.platform, st.device, st.channel, st.region,
       st.mode, st.repeat_index, st.analysis_state, st.validity, st.mention_status,
       st.detector_version, b.brand, b.is_target, b.brand_order,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.mentioned, false) END AS mentioned,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.mention_count, 0) END
         AS mention_count,
       CASE WHEN st.mention_status = 'known' THEN m.first_offset END AS first_offset,
       CASE WHEN st.mention_status = 'known' THEN m.rank END AS rank,
       CASE WHEN st.mention_status = 'known' THEN m.first_block END AS first_block,
       CASE WHEN st.mention_status = 'known' THEN m.position_bucket END AS position_bucket,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.domain_cited, false) END
         AS domain_cited,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.domain_retrieved, false) END
         AS domain_retrieved,
       m.ambiguous
  FROM analytics.sample_status st
  JOIN geo.runs r ON r.run_id = st.run_id
  JOIN analytics.run_brands b ON b.run_id = st.run_id
  LEFT JOIN geo.mentions m ON m.sample_id = st.sample_id
       AND m.detector_version = st.detector_version
       AND m.answer_revision = st.analysed_revision AND m.brand = b.brand;

-- ---------------------------------------------------------------- materialised per run
-- Refreshed by geo_pipeline.analysis.refresh_analytics(conn, run_id): delete the run's rows and
-- insert them again in one transaction (a partition write that can be repeated).

-- run x channel x region x mode x question x brand.
CREATE TABLE analytics.brand_metrics (
  run_id            text NOT NULL,
  tenant_id         text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  channel           text NOT NULL,
  platform          text NOT NULL,
  device            text NOT NULL,
  region            text NOT NULL,
  mode              text NOT NULL,
  question_revision text NOT NULL,
  question_index    integer NOT NULL,
  brand             text NOT NULL,
  is_target         boolean NOT NULL,
  samples           integer NOT NULL,  -- every planned sample of the cell
  valid_samples     integer NOT NULL,  -- answers judged (or reviewed) valid
  invalid_samples   integer NOT NULL,  -- answers judged invalid: excluded from every rate
  analysing_samples integer NOT NULL,  -- analysis pending: unknown, not "not mentioned"
  review_samples    integer NOT NULL,  -- analysis waiting for a person
  n                 integer NOT NULL,  -- rate denominator: valid answers, analysis accepted
  mentions          integer NOT NULL,  -- of n, answers that mention the brand
  mention_rate      double precision,  -- mentions / n
  mention_rate_lower double precision, -- Wilson 95 % lower bound
  mention_rate_upper double precision, -- Wilson 95 % upper bound
  avg_rank          double precision,  -- mean rank among brands, over the `mentions` answers
  domain_cited      integer NOT NULL,  -- of n, answers citing one of the brand's domains
  citation_rate     double precision,  -- domain_cited / n
  domain_retrieved  integer NOT NULL,  -- of n, answers whose retrieved sources include it
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel, region, mode, question_revision, brand)
);

-- run x channel x brand, over all questions, regions and modes: the daily trend grain.
CREATE TABLE analytics.channel_brand_metrics (
  run_id            text NOT NULL,
  tenant_id         text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  channel           text NOT NULL,
  platform          text NOT NULL,
  brand             text NOT NULL,
  is_target         boolean NOT NULL,
  samples           integer NOT NULL,
  valid_samples     integer NOT NULL,
  invalid_samples   integer NOT NULL,
  analysing_samples integer NOT NULL,
  review_samples    integer NOT NULL,
  n                 integer NOT NULL,
  mentions          integer NOT NULL,
  mention_rate      double precision,
  mention_rate_lower double precision,
  mention_rate_upper double precision,
  avg_rank          double precision,
  domain_cited      integer NOT NULL,
  citation_rate     double precision,
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel, brand)
);
CREATE INDEX channel_brand_metrics_monitor
  ON analytics.channel_brand_metrics (monitor_id, channel, brand, scheduled_for);

-- Share of voice per run x channel x region x mode x brand, over the n analysed valid answers.
CREATE TABLE analytics.share_of_voice (
  run_id            text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  channel           text NOT NULL,
  region            text NOT NULL,
  mode              text NOT NULL,
  brand             text NOT NULL,
  is_target         boolean NOT NULL,
  n                 integer NOT NULL,  -- analysed valid answers of the cell
  answers_mentioning_brand integer NOT NULL,
  answers_mentioning_any_tracked_brand integer NOT NULL,
  share_of_answers_mentioning_any_brand double precision,  -- the two columns above, divided
  brand_mentions    integer NOT NULL,  -- sum of mention counts of this brand
  all_tracked_mentions integer NOT NULL,  -- sum of mention counts of every tracked brand
  share_of_all_tracked_mentions double precision,  -- brand_mentions / all_tracked_mentions
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel, region, mode, brand)
);

-- Source domains per run x engine (platform) x domain x relation, over valid answers.
CREATE TABLE analytics.source_domains (
  run_id            text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  platform          text NOT NULL,
  registrable_domain text NOT NULL,
  relation          text NOT NULL,     -- 'cited' (the answer points at it) or 'retrieved'
  citations         integer NOT NULL,  -- citation rows
  answers           integer NOT NULL,  -- valid answers with at least one such citation
  valid_answers     integer NOT NULL,  -- valid answers of the run on this engine (denominator)
  answer_rate       double precision,  -- answers / valid_answers
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, platform, registrable_domain, relation)
);

-- Day over day per monitor x channel x brand: each run against the monitor's previous run.
-- significant: |z| >= 1.96 (two-sided 5 %), so a one-answer flip is not reported as a trend.
CREATE VIEW analytics.brand_day_over_day AS
SELECT w.monitor_id, w.channel, w.brand, w.is_target,
       w.scheduled_for, w.run_id, w.n, w.mentions, w.mention_rate,
       w.prev_scheduled_for, w.prev_run_id, w.prev_n, w.prev_mentions, w.prev_mention_rate,
       w.mention_rate - w.prev_mention_rate AS rate_change,
       analytics.two_proportion_z(w.prev_mentions, w.prev_n, w.mentions, w.n) AS z,
       coalesce(abs(analytics.two_proportion_z(w.prev_mentions, w.prev_n, w.mentions, w.n))
                >= 1.959963984540054, false) AS significant
  FROM (SELECT m.*,
               lag(m.scheduled_for) OVER win AS prev_scheduled_for,
               lag(m.run_id) OVER win AS prev_run_id,
               lag(m.n) OVER win AS prev_n,
               lag(m.mentions) OVER win AS prev_mentions,
               lag(m.mention_rate) OVER win AS prev_mention_rate
          FROM analytics.channel_brand_metrics m
         WHERE m.monitor_id IS NOT NULL AND m.scheduled_for IS NOT NULL
        WINDOW win AS (PARTITION BY m.monitor_id, m.channel, m.brand ORDER BY m.scheduled_for)) w;
