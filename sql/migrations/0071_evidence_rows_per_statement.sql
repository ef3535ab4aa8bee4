-- What recording a completion batch's evidence costs PostgreSQL (issue 33; 0035 and 0064 did
-- the same for samples and child rows). Measured with EXPLAIN (ANALYZE, BUFFERS, WAL) of the
-- batch statements for 500 samples of a bench run (1,500 evidence_objects rows, ~2,500
-- citations): the foreign key citations -> answers ran one RI lookup per citation (42-53 ms of
-- the 76-126 ms insert), the per-row tenant trigger ran PL/pgSQL per row although the caller
-- gives every row its tenant (0064's comment), and evidence_objects kept an index on its long
-- storage_key for one reader. The same guarantees, kept per statement:
--   * a citation names an existing answer revision: checked once per statement for the
--     statement's distinct (sample, revision) pairs, with the key's error code. The sample row
--     is held FOR KEY SHARE until the inserting transaction ends (geo.samples is the only way
--     an answer is deleted: geo_service may not delete answers, the owner deletes runs or
--     samples and the delete cascades), so the answer cannot disappear under the citation;
--   * deleting an answer deletes its citations (was ON DELETE CASCADE); an answer's key
--     (sample, revision) never changes (was: no citation may outlive a key change);
--   * geo.tenant_of_sample runs only for a row without a tenant (WHEN clause: no PL/pgSQL call
--     for the rows that have one);
--   * evidence.object_by_key finds a key through the record index (WARC keys, '<object>#<offset>-
--     <length>') or the sample segment of the key ({tenant}/{run}/{sample}/...) and the
--     (sample_id, kind, ...) unique index, so evidence_objects_storage_key is dropped.
ALTER TABLE geo.citations DROP CONSTRAINT citations_sample_id_revision_fkey;

CREATE FUNCTION geo.guard_citation_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
BEGIN
  PERFORM 1 FROM geo.samples s
   WHERE s.sample_id IN (SELECT DISTINCT n.sample_id FROM new_citations n)
   ORDER BY s.sample_id
   FOR KEY SHARE OF s;
  SELECT k.sample_id, k.revision INTO bad
  FROM (SELECT DISTINCT n.sample_id, n.revision FROM new_citations n) k
  WHERE NOT EXISTS (SELECT 1 FROM geo.answers a
                     WHERE a.sample_id = k.sample_id AND a.revision = k.revision)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: citation of sample % revision %: no such answer revision',
      bad.sample_id, bad.revision USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END $$;
ALTER FUNCTION geo.guard_citation_insert() OWNER TO geo_owner;

CREATE TRIGGER citations_guard_insert AFTER INSERT ON geo.citations
  REFERENCING NEW TABLE AS new_citations
  FOR EACH STATEMENT EXECUTE FUNCTION geo.guard_citation_insert();

-- Runs as the deleter (only the owner deletes answers, by cascade from geo.samples).
CREATE FUNCTION geo.delete_citations_of_deleted_answers() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  DELETE FROM geo.citations c USING old_answers o
   WHERE c.sample_id = o.sample_id AND c.revision = o.revision;
  RETURN NULL;
END $$;
ALTER FUNCTION geo.delete_citations_of_deleted_answers() OWNER TO geo_owner;

CREATE TRIGGER answers_delete_citations AFTER DELETE ON geo.answers
  REFERENCING OLD TABLE AS old_answers
  FOR EACH STATEMENT EXECUTE FUNCTION geo.delete_citations_of_deleted_answers();

CREATE TRIGGER answers_key_immutable BEFORE UPDATE OF sample_id, revision ON geo.answers
  FOR EACH ROW
  WHEN (old.sample_id IS DISTINCT FROM new.sample_id OR old.revision IS DISTINCT FROM new.revision)
  EXECUTE FUNCTION geo.forbid_change();

DROP TRIGGER a_tenant_of_sample ON geo.answers;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.answers
  FOR EACH ROW WHEN (new.tenant_id IS NULL) EXECUTE FUNCTION geo.tenant_of_sample();
DROP TRIGGER a_tenant_of_sample ON geo.citations;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.citations
  FOR EACH ROW WHEN (new.tenant_id IS NULL) EXECUTE FUNCTION geo.tenant_of_sample();

DROP INDEX geo.evidence_objects_storage_key;
