-- Retention (D9, issue 9): what each pass removed, so a missing screenshot of an old run is
-- explained by a row here rather than by silence. Aggregates and the ledger are never touched.
CREATE TABLE geo.retention_log (
  retention_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  retention_days  integer NOT NULL CHECK (retention_days > 0),
  cutoff          timestamptz NOT NULL,
  objects_deleted integer NOT NULL CHECK (objects_deleted >= 0),
  bytes_deleted   bigint NOT NULL CHECK (bytes_deleted >= 0),
  attempts_deleted integer NOT NULL CHECK (attempts_deleted >= 0),
  applied_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX retention_log_run ON geo.retention_log (run_id);
CREATE TRIGGER retention_log_append_only BEFORE UPDATE ON geo.retention_log
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();
