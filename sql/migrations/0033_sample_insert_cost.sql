-- What a sample costs to insert (issue 39): a 100,000-sample run is one COPY, and each row's
-- index and trigger work is most of create_run. Measured with a server-side COPY of 100,000
-- rows (backend CPU; each index, check, trigger and key alone on a bare table), the 7-column
-- samples_identity index was the dearest part (+0.75-1.1 s of ~3.3 s: seven text comparisons
-- per B-tree step); an index on (run_id, channel) costs +0.15 s and the check below +0.18 s.
--
-- R5 stays enforced by the database, more strictly than before: every sample id IS the hash of
-- its identity (the one rule of geo_pipeline.domain.plan.sample_id_for: 's' + the first 24 hex
-- digits of the SHA-256 of run_id, question_revision, platform, device, region, mode and
-- repeat_index joined by U+001F), so two samples of one identity would share a primary key and
-- the second is refused; and an id made up by hand, or an identity changed after insert, is
-- refused by the check. The plan check sample_identities_unique verifies both on its own.
ALTER TABLE geo.samples ADD CONSTRAINT sample_id_is_identity_hash CHECK (
  sample_id = 's' || left(encode(sha256(convert_to(concat_ws(chr(31), run_id, question_revision,
    platform, device, region, mode, repeat_index::text), 'UTF8')), 'hex'), 24));

-- Every "samples of a run" and "samples of a (run, channel) partition" query finds them here
-- (the identity index served only the run_id prefix: its second column was the platform).
CREATE INDEX samples_run_channel ON geo.samples (run_id, channel);

ALTER TABLE geo.samples DROP CONSTRAINT samples_identity;

-- The insert guard checks each distinct combination of initial states once, not four rows per
-- sample (a run's samples all start planned/queued/pending/pending).
CREATE OR REPLACE FUNCTION geo.guard_sample_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  bad record;
BEGIN
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
