-- What a sample costs to insert, continued (issue 39; 0033, 0035, 0051). The statement-level
-- insert guard of 0035 read the inserted rows twice: once hashed for their distinct (run,
-- tenant), once SORTED for their distinct combination of initial states (DISTINCT ON sorts all
-- 100,000 rows of a run: 60-85 ms of a 100k COPY's backend time, spilling to disk at the
-- default work_mem). Now ONE hashed pass groups the rows by (run, tenant, the four states) --
-- a run's rows share one group -- and both rules are checked on those few groups. What it
-- guarantees is unchanged (DESIGN R6, R5's key; tests: test_sample_insert_cost's run and
-- tenant tests, test_create_run_insert's initial state test):
--   * every inserted sample names a run of ITS tenant, and that run row is held FOR KEY SHARE
--     until the inserting transaction ends (a concurrent delete of the run waits), as the
--     foreign key it replaced did (0035);
--   * every layer's state of a new sample is an allowed initial state (allowed_transitions
--     from NULL), with the same errors (foreign_key_violation / check_violation) and messages.
CREATE OR REPLACE FUNCTION geo.guard_sample_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
  bad_id text;
BEGIN
  WITH g AS MATERIALIZED (  -- one hashed pass over the inserted rows
    SELECT run_id, tenant_id, submission_state, collection_state, evidence_state, analysis_state
    FROM new_samples
    GROUP BY run_id, tenant_id, submission_state, collection_state, evidence_state,
             analysis_state
  )
  SELECT x.* INTO bad
  FROM (
    -- Every (run, tenant) is looked up and its run row locked; the ones with no such run.
    SELECT 1 AS ord, k.run_id, k.tenant_id, NULL::text AS lyr, NULL::text AS state
    FROM (SELECT DISTINCT g.run_id, g.tenant_id FROM g) k
    LEFT JOIN LATERAL (SELECT true AS found FROM geo.runs r
                        WHERE r.run_id = k.run_id AND r.tenant_id = k.tenant_id
                        FOR KEY SHARE OF r) f ON true
    WHERE f.found IS NULL
    UNION ALL
    -- Each combination of states: a layer whose state is no allowed initial state.
    SELECT 2, g.run_id, g.tenant_id, l.lyr, l.state
    FROM g
    CROSS JOIN LATERAL (VALUES ('submission', g.submission_state),
                               ('collection', g.collection_state),
                               ('evidence', g.evidence_state), ('analysis', g.analysis_state))
      AS l(lyr, state)
    WHERE NOT EXISTS (SELECT 1 FROM geo.allowed_transitions t
                       WHERE t.layer = l.lyr AND t.from_state IS NULL AND t.to_state = l.state)
  ) x
  ORDER BY x.ord
  LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF bad.ord = 1 THEN
    RAISE EXCEPTION 'geo: sample of run % (tenant %): no such run of that tenant',
      bad.run_id, bad.tenant_id USING ERRCODE = 'foreign_key_violation';
  END IF;
  -- Only on the way to the error: a sample that has the refused state, for the message.
  SELECT n.sample_id INTO bad_id
  FROM new_samples n
  WHERE n.run_id = bad.run_id AND n.tenant_id = bad.tenant_id
    AND CASE bad.lyr WHEN 'submission' THEN n.submission_state
                     WHEN 'collection' THEN n.collection_state
                     WHEN 'evidence' THEN n.evidence_state
                     ELSE n.analysis_state END = bad.state
  LIMIT 1;
  RAISE EXCEPTION 'geo: % transition (new) -> % is not allowed for sample %',
    bad.lyr, bad.state, bad_id USING ERRCODE = 'check_violation';
END $$;
