-- An evidence object's sample is checked once per statement, not once per row (issue 33, as
-- 0071 did for citations and 0035 for samples). The foreign key evidence_objects -> samples ran
-- one RI lookup per object row: a completion batch of 500 samples records ~1,500 rows (20-30 ms
-- of the 50-150 ms insert, EXPLAIN ANALYZE on a bench run's data). The same guarantees:
--   * an object row names an existing sample: checked for the statement's distinct samples,
--     each sample row held FOR KEY SHARE until the inserting transaction ends (as the key did:
--     the sample cannot be deleted under the row), with the key's error code;
--   * deleting a sample deletes its object rows (was ON DELETE CASCADE); a sample's id never
--     changes (samples_id_immutable, 0033).
ALTER TABLE geo.evidence_objects DROP CONSTRAINT evidence_objects_sample_id_fkey;

CREATE FUNCTION geo.guard_evidence_object_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad text;
BEGIN
  SELECT k.sample_id INTO bad
  FROM (SELECT DISTINCT n.sample_id FROM new_objects n ORDER BY n.sample_id) k
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.samples s
                      WHERE s.sample_id = k.sample_id
                      FOR KEY SHARE OF s) f ON true
  WHERE f.found IS NULL
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: evidence object of sample %: no such sample', bad
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END $$;
ALTER FUNCTION geo.guard_evidence_object_insert() OWNER TO geo_owner;

CREATE TRIGGER evidence_objects_guard_insert AFTER INSERT ON geo.evidence_objects
  REFERENCING NEW TABLE AS new_objects
  FOR EACH STATEMENT EXECUTE FUNCTION geo.guard_evidence_object_insert();

-- Runs as the deleter (samples are deleted by the owner, with their run).
CREATE FUNCTION geo.delete_evidence_objects_of_deleted_samples() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  DELETE FROM geo.evidence_objects e USING old_samples o WHERE e.sample_id = o.sample_id;
  RETURN NULL;
END $$;
ALTER FUNCTION geo.delete_evidence_objects_of_deleted_samples() OWNER TO geo_owner;

CREATE TRIGGER samples_delete_evidence_objects AFTER DELETE ON geo.samples
  REFERENCING OLD TABLE AS old_samples
  FOR EACH STATEMENT EXECUTE FUNCTION geo.delete_evidence_objects_of_deleted_samples();
