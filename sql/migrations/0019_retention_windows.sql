-- Retention beyond evidence objects and attempts (D9): raw answer text past the tenant's raw
-- window, the execution log (attempts, state transitions) past its own window, published outbox
-- rows and settled dead letters. Aggregates, analysis results and the ledger are never touched.

-- The execution log may expire sooner than raw evidence; NULL means "with the raw window", so
-- existing tenants keep today's behaviour until someone sets it.
ALTER TABLE geo.tenants
  ADD COLUMN log_retention_days integer CHECK (log_retention_days > 0);
COMMENT ON COLUMN geo.tenants.log_retention_days IS
  'Days the attempts and the state-transition log of a finished run are kept; NULL: retention_days.';

-- Expired raw text is NULL, never '' (an empty answer is a real, invalid answer); its digest
-- stays, so a copy held elsewhere can still be proven to be this answer.
ALTER TABLE geo.answers ALTER COLUMN raw_text DROP NOT NULL;
ALTER TABLE geo.answers ADD COLUMN raw_expired_at timestamptz;
ALTER TABLE geo.answers ADD CONSTRAINT raw_text_or_expired
  CHECK (raw_text IS NOT NULL OR raw_expired_at IS NOT NULL);

ALTER TABLE geo.retention_log
  ADD COLUMN log_retention_days integer CHECK (log_retention_days > 0),
  ADD COLUMN answers_cleared integer NOT NULL DEFAULT 0 CHECK (answers_cleared >= 0),
  ADD COLUMN transitions_deleted integer NOT NULL DEFAULT 0 CHECK (transitions_deleted >= 0);

-- Dead letters were found by sample; retention finds them by age.
CREATE INDEX dead_letters_at ON geo.dead_letters (at);

-- The service may delete published outbox rows and dead letters (operational, not history). It
-- may not expire raw answer text or the transition log: those are the record of what happened,
-- and the processes' role must not be able to rewrite it. That step of retention runs as the
-- owner (a geo_owner login in GEO_RETENTION_DATABASE_URL); as the service it is reported as
-- refused, and the rest of the pass still runs.
GRANT DELETE ON geo.outbox, geo.dead_letters TO geo_service;
