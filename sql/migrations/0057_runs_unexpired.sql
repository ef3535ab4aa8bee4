-- Retention of a day's runs independent of the history (issue 39). ops.retention_due_runs read
-- every run of every tenant (a sequential scan of geo.runs) and, with the history's runs
-- counted as candidates, checked "raw text left?" as one hashed pass over every sample of the
-- database. Runs whose both windows were marked done (0050) can never be due again until a
-- transition clears a mark, so the query now reads only the unmarked runs, through this index
-- (the runs not yet expired: today's and the retention window's, not the history's).
CREATE INDEX runs_unexpired ON geo.runs (created_at, run_id)
  WHERE raw_expired_at IS NULL OR log_expired_at IS NULL;
