-- What a sample costs to insert, continued (issue 39; 0033, 0035). Measured by the backend CPU
-- of 100,000 rows (a server-side pass over a 100,000-row table, per row over a bare scan):
-- the format check samples_sample_id_check (sample_id ~ '^s[0-9a-f]{24}$') cost 2.5 us a row,
-- more than the identity hash itself (1.9 us), and says less: an id that is its identity's hash
-- is 's' and 24 hex digits by construction. It goes; sample_id_is_identity_hash stays (R5: a
-- second sample of one identity collides on the primary key, a made-up id is refused).

-- THE rule of a sample's id in SQL, the same as geo_pipeline.domain.plan.sample_id_for: 's' +
-- the first 24 hex digits of the SHA-256 of run_id, question_revision, platform, device, region,
-- mode and repeat_index joined by U+001F. A plain SQL expression, so the planner inlines it
-- (the check below and the plan checks' recount pay no function call per row).
CREATE FUNCTION geo.sample_id_for(run_id text, question_revision text, platform text,
  device text, region text, mode text, repeat_index integer)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT 's' || left(encode(sha256(convert_to(concat_ws(chr(31), run_id, question_revision,
    platform, device, region, mode, repeat_index::text), 'UTF8')), 'hex'), 24)
$$;

-- The check of 0033 over the one rule (the same expression once inlined: validating it here
-- re-reads the table once).
ALTER TABLE geo.samples DROP CONSTRAINT sample_id_is_identity_hash;
ALTER TABLE geo.samples ADD CONSTRAINT sample_id_is_identity_hash CHECK (
  sample_id = geo.sample_id_for(run_id, question_revision, platform, device, region, mode,
                                repeat_index));

ALTER TABLE geo.samples DROP CONSTRAINT samples_sample_id_check;

-- Whether the database itself guarantees every stored sample id is its identity's hash: the
-- check is there, validated and over the one rule. The plan checks (sample_identities_unique)
-- hash a run's samples again only when it is not (a row written while it was dropped could be
-- wrong); while it is, no row can be.
CREATE FUNCTION geo.sample_id_check_in_force() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = 'geo.samples'::regclass AND c.contype = 'c'
      AND c.conname = 'sample_id_is_identity_hash' AND c.convalidated
      AND pg_catalog.pg_get_constraintdef(c.oid) = 'CHECK ((sample_id = geo.sample_id_for(run_id, '
          'question_revision, platform, device, region, mode, repeat_index)))')
$$;
