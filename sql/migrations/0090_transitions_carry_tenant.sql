-- A sample's transition rows carry its tenant (issue 33: the S3 row's database share). Each
-- finish writes one geo.state_transitions row per layer that moved -- the collection's, and
-- with evidence on the evidence layer's pending -> stored as well (bench/throughput.py --mode
-- http, pg_per_sample: 4.97 transition rows a sample with S3 evidence against 3.99 with it
-- off) -- and log_sample_transitions left tenant_id NULL, so the per-row trigger
-- a_tenant_of_run ran PL/pgSQL and looked the run up in geo.runs for every one of them.
-- The tenant is the sample's own (geo.samples.tenant_id: guard_sample_insert checks the pair
-- (run, tenant) against geo.runs, samples_tenant_immutable keeps it), the same value the
-- lookup found. As 0071 did for answers and citations:
--   * log_sample_transitions inserts n.tenant_id;
--   * a_tenant_of_run on state_transitions runs only for a row without a tenant (WHEN clause:
--     no PL/pgSQL call for the rows that have one); a writer that gives none still gets the
--     run's tenant, and tenant_id stays NOT NULL.
-- Backend CPU, 50 transition rows a statement, alternated, medians of 30 (load 3): 0.0106 ->
-- 0.0078 ms a row.
CREATE OR REPLACE FUNCTION geo.log_sample_transitions() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
  actor text := nullif(current_setting('geo.actor', true), '');
BEGIN
  -- MATERIALIZED: under the LIMIT the planner would join old and new rows by nested loop.
  WITH c AS MATERIALIZED (
    SELECT n.sample_id, l.layer, l.from_state, l.to_state, o.fencing_token AS old_token,
           n.fencing_token AS new_token
    FROM old_samples o JOIN new_samples n USING (sample_id)
    CROSS JOIN LATERAL (VALUES
        ('submission', o.submission_state, n.submission_state),
        ('collection', o.collection_state, n.collection_state),
        ('evidence', o.evidence_state, n.evidence_state),
        ('analysis', o.analysis_state, n.analysis_state)) AS l(layer, from_state, to_state)
    WHERE n.fencing_token < o.fencing_token OR l.from_state <> l.to_state
  )
  SELECT c.* INTO bad
  FROM c LEFT JOIN geo.allowed_transitions t
    ON t.layer = c.layer AND t.from_state = c.from_state AND t.to_state = c.to_state
  WHERE c.new_token < c.old_token OR (c.from_state <> c.to_state AND t.layer IS NULL)
  LIMIT 1;
  IF FOUND THEN
    IF bad.new_token < bad.old_token THEN
      RAISE EXCEPTION 'geo: fencing token of sample % may not go back (% -> %)',
        bad.sample_id, bad.old_token, bad.new_token USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'geo: % transition % -> % is not allowed for sample %',
      bad.layer, bad.from_state, bad.to_state, bad.sample_id
      USING ERRCODE = 'check_violation';
  END IF;
  INSERT INTO geo.state_transitions
    (sample_id, run_id, tenant_id, layer, from_state, to_state, reason, fencing_token,
     attempt_no, actor)
  SELECT n.sample_id, n.run_id, n.tenant_id, l.layer, l.from_state, l.to_state, l.reason,
         n.fencing_token, n.attempt_no, actor
  FROM old_samples o JOIN new_samples n USING (sample_id)
  CROSS JOIN LATERAL (VALUES
      (1, 'submission', o.submission_state, n.submission_state, n.submission_reason),
      (2, 'collection', o.collection_state, n.collection_state, n.collection_reason),
      (3, 'evidence', o.evidence_state, n.evidence_state, n.evidence_reason),
      (4, 'analysis', o.analysis_state, n.analysis_state, n.analysis_reason))
    AS l(ord, layer, from_state, to_state, reason)
  WHERE l.from_state <> l.to_state
  ORDER BY n.sample_id, l.ord;
  RETURN NULL;
END $$;

DROP TRIGGER a_tenant_of_run ON geo.state_transitions;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.state_transitions
  FOR EACH ROW WHEN (new.tenant_id IS NULL) EXECUTE FUNCTION geo.tenant_of_run();
