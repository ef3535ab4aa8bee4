-- The citation guard of 0071 finds the batch's samples by index, one probe per distinct sample,
-- as the evidence object guard of 0072 does (issue 33: the S3 row's database share). Its lock
-- query, `WHERE s.sample_id IN (SELECT DISTINCT ... FROM new_citations) FOR KEY SHARE`, was
-- planned as a hash join over a sequential scan of the whole of geo.samples (the transition
-- table's estimate is 200 rows whatever the batch): auto_explain of one 50-sample batch on a
-- 20,000-sample table, 4.8 ms of the 8.3 ms insert, growing with the table, not the batch.
-- bench/evidence_rows_cost.py, batches of 10: the guard 0.084 ms of 0.39 ms per sample.
-- The same guarantees, in one query:
--   * each distinct sample of the statement is held FOR KEY SHARE until the inserting
--     transaction ends, in sample order (two batches never wait on each other in a circle);
--     a LATERAL subquery with a locking clause is never flattened, so it stays an index probe
--     of samples_pkey per sample;
--   * each distinct (sample, revision) names an existing answer revision (a LATERAL probe of
--     answers_pkey, LIMIT 1 keeps it a probe), else the key's error code, as before.
CREATE OR REPLACE FUNCTION geo.guard_citation_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
BEGIN
  SELECT k.sample_id, k.revision INTO bad
  FROM (SELECT DISTINCT n.sample_id, n.revision FROM new_citations n
         ORDER BY n.sample_id, n.revision) k
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.samples s
                      WHERE s.sample_id = k.sample_id
                      FOR KEY SHARE OF s) f ON true
  LEFT JOIN LATERAL (SELECT true AS found FROM geo.answers a
                      WHERE a.sample_id = k.sample_id AND a.revision = k.revision
                      LIMIT 1) a ON true
  WHERE f.found IS NULL OR a.found IS NULL
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: citation of sample % revision %: no such answer revision',
      bad.sample_id, bad.revision USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END $$;
