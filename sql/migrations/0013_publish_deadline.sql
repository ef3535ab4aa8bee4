-- A partition publishes on its run's deadline: one odd sample must not empty an engine's numbers
-- for the day. Past the deadline, collection_results and everything downstream materialise with
-- the samples that are terminal; the others are recorded here as excluded, with the states that
-- explain them, once per publication. A later publication (a late completion) is a new row.

-- The deadline of every run: its creation plus the frozen snapshot's publish_deadline_seconds
-- (R2). Snapshots frozen before the setting existed carry no value and publish 6 hours after
-- creation, the config model's default.
CREATE VIEW geo.run_publish_deadlines AS
SELECT r.run_id, r.created_at, d.seconds AS publish_deadline_seconds,
       r.created_at + make_interval(secs => d.seconds) AS publish_deadline_at
  FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
 CROSS JOIN LATERAL (SELECT coalesce((c.config ->> 'publish_deadline_seconds')::integer, 21600)
                              AS seconds) d;

-- Why a sample is not terminal in the collection layer (so a publication excludes it), from
-- its layer states; NULL when it is terminal. The one definition of the reasons.
CREATE FUNCTION geo.exclusion_reason(submission_state text, collection_state text,
                                     attempt_no integer)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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

-- One row per materialisation of collection_results: what it published and what it left out.
CREATE TABLE geo.partition_publications (
  publication_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  channel         text NOT NULL,
  published_at    timestamptz NOT NULL DEFAULT now(),
  dagster_run_id  text,
  basis           text NOT NULL CHECK (basis IN ('complete', 'deadline')),
  deadline_at     timestamptz NOT NULL,
  samples         integer NOT NULL CHECK (samples >= 0),
  included        integer NOT NULL CHECK (included >= 0),   -- terminal when published
  excluded        integer NOT NULL CHECK (excluded >= 0),
  excluded_reasons jsonb NOT NULL DEFAULT '{}'::jsonb,      -- {reason: samples}
  CONSTRAINT publication_adds_up CHECK (included + excluded = samples),
  CONSTRAINT complete_excludes_nothing CHECK (basis = 'deadline' OR excluded = 0)
);
CREATE INDEX partition_publications_partition
  ON geo.partition_publications (run_id, channel, publication_id);

-- The excluded samples of each publication, with the states they were in then.
CREATE TABLE geo.publication_exclusions (
  publication_id  bigint NOT NULL REFERENCES geo.partition_publications ON DELETE CASCADE,
  sample_id       text NOT NULL,
  reason          text NOT NULL,
  submission_state text NOT NULL,
  collection_state text NOT NULL,
  attempt_no      integer NOT NULL,
  PRIMARY KEY (publication_id, sample_id)
);

-- The latest publication of every (run, channel) partition, for analysts.
CREATE VIEW analytics.partition_publications AS
SELECT p.run_id, p.channel, r.tenant_id, r.monitor_id, r.scheduled_for, p.publication_id,
       p.published_at, p.basis, p.deadline_at, p.samples, p.included, p.excluded,
       p.excluded::float8 / nullif(p.samples, 0) AS excluded_share, p.excluded_reasons
  FROM (SELECT DISTINCT ON (run_id, channel) *
          FROM geo.partition_publications ORDER BY run_id, channel, publication_id DESC) p
  JOIN geo.runs r ON r.run_id = p.run_id;

-- The samples the latest publication of each partition left out, with their states then and
-- now. still_excluded is false for a sample that became terminal later: the completion sensor
-- re-publishes its partition, and the next publication includes it.
CREATE VIEW analytics.excluded_samples AS
SELECT p.run_id, p.channel, p.tenant_id, p.monitor_id, p.scheduled_for, p.publication_id,
       p.published_at, p.deadline_at, e.sample_id, e.reason, e.submission_state,
       e.collection_state, e.attempt_no,
       s.submission_state AS current_submission_state,
       s.collection_state AS current_collection_state,
       geo.exclusion_reason(s.submission_state, s.collection_state, s.attempt_no) IS NOT NULL
         AS still_excluded
  FROM analytics.partition_publications p
  JOIN geo.publication_exclusions e ON e.publication_id = p.publication_id
  JOIN geo.samples s ON s.sample_id = e.sample_id;

-- The analyst tables say how many of a cell's samples were not terminal in collection when they
-- were refreshed: excluded from every rate (they are also among analysing_samples, R6).
ALTER TABLE analytics.brand_metrics
  ADD COLUMN collecting_samples integer NOT NULL DEFAULT 0;
ALTER TABLE analytics.channel_brand_metrics
  ADD COLUMN collecting_samples integer NOT NULL DEFAULT 0;

-- sample_status gains the collection state (a new last column; the rest is unchanged).
CREATE OR REPLACE VIEW analytics.sample_status AS
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
       ac.detector_version, ac.answer_revision AS analysed_revision,
       s.collection_state
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.captured_at, a1.validity, a1.validity_reason
                       FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
  LEFT JOIN geo.analysis_current ac ON ac.sample_id = s.sample_id;
