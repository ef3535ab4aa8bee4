-- A sample's run is checked once per statement, not once per row (issue 39). The foreign key
-- samples_run (run_id, tenant_id) -> runs ran one lookup of geo.runs per inserted sample: a
-- 100,000-sample COPY made 100,000 index scans of the same row (+0.55 s backend CPU per 100k,
-- measured by server-side COPY with the key alone). The same guarantees, kept by triggers:
--   * a sample names an existing run of its own tenant: checked by the insert guard for the
--     statement's distinct (run_id, tenant_id) pairs, taking the lock the key took (KEY SHARE on
--     the run row: the run cannot be deleted, nor its key changed, until the insert commits; an
--     insert racing a committed delete finds no row and fails), with the key's error code;
--   * a sample's run and tenant never change (run_id is in the id-is-identity-hash check of
--     0033; tenant_id by the trigger below), nor a run's key while samples may name it;
--   * deleting a run deletes its samples (ON DELETE CASCADE).
ALTER TABLE geo.samples DROP CONSTRAINT samples_run;

CREATE OR REPLACE FUNCTION geo.guard_sample_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
BEGIN
  SELECT n.run_id, n.tenant_id INTO bad
  FROM (SELECT DISTINCT run_id, tenant_id FROM new_samples) n
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.runs r
                      WHERE r.run_id = n.run_id AND r.tenant_id = n.tenant_id
                      FOR KEY SHARE OF r) k ON true
  WHERE k.found IS NULL
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: sample of run % (tenant %): no such run of that tenant',
      bad.run_id, bad.tenant_id USING ERRCODE = 'foreign_key_violation';
  END IF;
  -- The insert guard checks each distinct combination of initial states once (0033).
  SELECT n.sample_id, l.lyr, l.state INTO bad
  FROM (SELECT DISTINCT ON (submission_state, collection_state, evidence_state, analysis_state)
               sample_id, submission_state, collection_state, evidence_state, analysis_state
        FROM new_samples) n
  CROSS JOIN LATERAL (VALUES ('submission', n.submission_state), ('collection', n.collection_state),
                             ('evidence', n.evidence_state), ('analysis', n.analysis_state))
    AS l(lyr, state)
  WHERE NOT EXISTS (SELECT 1 FROM geo.allowed_transitions t
                     WHERE t.layer = l.lyr AND t.from_state IS NULL AND t.to_state = l.state)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: % transition (new) -> % is not allowed for sample %',
      bad.lyr, bad.state, bad.sample_id USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION geo.forbid_key_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  RAISE EXCEPTION 'geo: the key (run, tenant) of %.% may not change', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'foreign_key_violation';
END $$;

CREATE TRIGGER samples_tenant_immutable BEFORE UPDATE OF tenant_id ON geo.samples
  FOR EACH ROW WHEN (old.tenant_id IS DISTINCT FROM new.tenant_id)
  EXECUTE FUNCTION geo.forbid_key_change();

CREATE TRIGGER runs_key_immutable BEFORE UPDATE OF run_id, tenant_id ON geo.runs
  FOR EACH ROW WHEN (old.run_id IS DISTINCT FROM new.run_id
                     OR old.tenant_id IS DISTINCT FROM new.tenant_id)
  EXECUTE FUNCTION geo.forbid_key_change();

-- Runs as the deleter, not as a definer (no function here is a definer escape, see
-- test_isolation): only the owner may delete runs (geo_service may not), and it may delete
-- samples; the samples' own cascades (answers, attempts, ...) follow as before.
CREATE FUNCTION geo.delete_samples_of_deleted_runs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  DELETE FROM geo.samples s USING old_runs o WHERE s.run_id = o.run_id;
  RETURN NULL;
END $$;

CREATE TRIGGER runs_delete_samples AFTER DELETE ON geo.runs
  REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT
  EXECUTE FUNCTION geo.delete_samples_of_deleted_runs();
