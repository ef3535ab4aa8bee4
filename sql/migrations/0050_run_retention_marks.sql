-- Retention of a day's runs costs that day, not the history (issue 39, D9). ops.retention_due_runs
-- re-checked every run past its window on every pass, and for a run already expired its EXISTS
-- tests (evidence, raw text still held, attempts, transitions) read all of that run's samples
-- before finding nothing: a daily pass over 30 days of daily 200-sample runs read 38,439 rows,
-- over 3 days 8,407 (geo_pipeline_tests/ops/test_retention_growth.py).
--
-- Now the pass marks a run once a window of it has nothing left: raw_expired_at (no evidence
-- object, WARC record or raw text whose analysis is done) and log_expired_at (no attempt or
-- transition), written by ops.retention_mark_run after the run's step, in its transaction. A
-- marked window is not checked again. A step that
-- left something behind (history refused to a role that may not rewrite it) writes no mark, so
-- the next pass tries again, as before. Raw text kept while its analysis is pending does not
-- stop the raw mark: the analysis finishing writes a transition, which clears the mark.
--
-- New work on an old run (a sample queued again: new attempts, evidence, raw text; a review or
-- a re-analysis: new transitions) clears the run's marks, by the trigger below, so the next pass
-- after it checks the run in full.
ALTER TABLE geo.runs
  ADD COLUMN raw_expired_at timestamptz,
  ADD COLUMN log_expired_at timestamptz;

COMMENT ON COLUMN geo.runs.raw_expired_at IS
  'When retention found nothing left of the run''s raw evidence window (NULL: check it)';
COMMENT ON COLUMN geo.runs.log_expired_at IS
  'When retention found nothing left of the run''s execution log window (NULL: check it)';

-- Every change of a sample's state writes geo.state_transitions (0009), and nothing the pass
-- expires arrives without one (an attempt starts with collection going to running; evidence
-- with evidence_state; raw text with an answer's collection; a transition is itself log). So a
-- transition of a run clears that run's marks: one statement per inserting statement, reading
-- the distinct runs of its rows and updating only marked runs (none, for a run in its first
-- pass through the states).
CREATE FUNCTION geo.reopen_run_retention() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE geo.runs r SET raw_expired_at = NULL, log_expired_at = NULL
   WHERE r.run_id IN (SELECT DISTINCT n.run_id FROM new_transitions n)
     AND (r.raw_expired_at IS NOT NULL OR r.log_expired_at IS NOT NULL);
  RETURN NULL;
END $$;

CREATE TRIGGER state_transitions_reopen_retention
  AFTER INSERT ON geo.state_transitions
  REFERENCING NEW TABLE AS new_transitions
  FOR EACH STATEMENT EXECUTE FUNCTION geo.reopen_run_retention();
