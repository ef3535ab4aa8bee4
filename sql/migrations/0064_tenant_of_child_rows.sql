-- The tenant of every analyst-readable row that hangs off a sample or a run (issue #35): a
-- tenant's analyst replica receives a table through a publication row filter
-- `WHERE (tenant_id = '<tenant>')`, and PostgreSQL 15 row filters can name the table's own
-- columns only (no subquery to geo.samples or geo.runs). So these tables get the tenant_id of
-- their sample or run: filled on INSERT by a trigger (writers do not change), backfilled here,
-- NOT NULL, and part of a replica identity (primary key + tenant_id) as in migration 0058.
-- Not here: geo.question_revisions and geo.quote_lines (shared by content / reached through a
-- quote; see docs/operations.md, "Analyst replicas"), the shared reference tables
-- (allowed_transitions, price_versions), and tables analysts cannot read.
-- Cost: one primary-key lookup per inserted row of these tables.
CREATE FUNCTION geo.tenant_of_sample() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tenant_id IS NULL THEN
    SELECT s.tenant_id INTO NEW.tenant_id FROM geo.samples s WHERE s.sample_id = NEW.sample_id;
  END IF;
  RETURN NEW;
END $$;
CREATE FUNCTION geo.tenant_of_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tenant_id IS NULL THEN
    SELECT r.tenant_id INTO NEW.tenant_id FROM geo.runs r WHERE r.run_id = NEW.run_id;
  END IF;
  RETURN NEW;
END $$;
ALTER FUNCTION geo.tenant_of_sample() OWNER TO geo_owner;
ALTER FUNCTION geo.tenant_of_run() OWNER TO geo_owner;


-- geo.attempts
ALTER TABLE geo.attempts ADD COLUMN tenant_id text;
UPDATE geo.attempts t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.attempts ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.attempts
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX attempts_replica_identity ON geo.attempts (sample_id, attempt_no, tenant_id);
ALTER TABLE geo.attempts REPLICA IDENTITY USING INDEX attempts_replica_identity;

-- geo.answers
ALTER TABLE geo.answers ADD COLUMN tenant_id text;
UPDATE geo.answers t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.answers ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.answers
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX answers_replica_identity ON geo.answers (sample_id, revision, tenant_id);
ALTER TABLE geo.answers REPLICA IDENTITY USING INDEX answers_replica_identity;

-- geo.citations
ALTER TABLE geo.citations ADD COLUMN tenant_id text;
UPDATE geo.citations t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.citations ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.citations
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX citations_replica_identity ON geo.citations (sample_id, revision, ordinal, tenant_id);
ALTER TABLE geo.citations REPLICA IDENTITY USING INDEX citations_replica_identity;

-- geo.analysis_results
ALTER TABLE geo.analysis_results ADD COLUMN tenant_id text;
UPDATE geo.analysis_results t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.analysis_results ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.analysis_results
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX analysis_results_replica_identity ON geo.analysis_results (sample_id, detector_version, answer_revision, tenant_id);
ALTER TABLE geo.analysis_results REPLICA IDENTITY USING INDEX analysis_results_replica_identity;

-- geo.mentions
ALTER TABLE geo.mentions ADD COLUMN tenant_id text;
UPDATE geo.mentions t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.mentions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.mentions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX mentions_replica_identity ON geo.mentions (sample_id, detector_version, answer_revision, brand, tenant_id);
ALTER TABLE geo.mentions REPLICA IDENTITY USING INDEX mentions_replica_identity;

-- geo.analysis_current
ALTER TABLE geo.analysis_current ADD COLUMN tenant_id text;
UPDATE geo.analysis_current t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.analysis_current ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.analysis_current
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX analysis_current_replica_identity ON geo.analysis_current (sample_id, tenant_id);
ALTER TABLE geo.analysis_current REPLICA IDENTITY USING INDEX analysis_current_replica_identity;

-- geo.mention_stances
ALTER TABLE geo.mention_stances ADD COLUMN tenant_id text;
UPDATE geo.mention_stances t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.mention_stances ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.mention_stances
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX mention_stances_replica_identity ON geo.mention_stances (sample_id, detector_version, answer_revision, brand, stance_version, tenant_id);
ALTER TABLE geo.mention_stances REPLICA IDENTITY USING INDEX mention_stances_replica_identity;

-- geo.review_decisions
ALTER TABLE geo.review_decisions ADD COLUMN tenant_id text;
ALTER TABLE geo.review_decisions DISABLE TRIGGER review_decisions_append_only;
UPDATE geo.review_decisions t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.review_decisions ENABLE TRIGGER review_decisions_append_only;
ALTER TABLE geo.review_decisions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.review_decisions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX review_decisions_replica_identity ON geo.review_decisions (decision_id, tenant_id);
ALTER TABLE geo.review_decisions REPLICA IDENTITY USING INDEX review_decisions_replica_identity;

-- geo.publication_exclusions
ALTER TABLE geo.publication_exclusions ADD COLUMN tenant_id text;
UPDATE geo.publication_exclusions t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.publication_exclusions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.publication_exclusions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();
CREATE UNIQUE INDEX publication_exclusions_replica_identity ON geo.publication_exclusions (publication_id, sample_id, tenant_id);
ALTER TABLE geo.publication_exclusions REPLICA IDENTITY USING INDEX publication_exclusions_replica_identity;

-- geo.batches
ALTER TABLE geo.batches ADD COLUMN tenant_id text;
UPDATE geo.batches t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.batches ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.batches
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX batches_replica_identity ON geo.batches (run_id, batch_no, tenant_id);
ALTER TABLE geo.batches REPLICA IDENTITY USING INDEX batches_replica_identity;

-- geo.state_transitions
ALTER TABLE geo.state_transitions ADD COLUMN tenant_id text;
ALTER TABLE geo.state_transitions DISABLE TRIGGER state_transitions_append_only;
UPDATE geo.state_transitions t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.state_transitions ENABLE TRIGGER state_transitions_append_only;
ALTER TABLE geo.state_transitions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.state_transitions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX state_transitions_replica_identity ON geo.state_transitions (transition_id, tenant_id);
ALTER TABLE geo.state_transitions REPLICA IDENTITY USING INDEX state_transitions_replica_identity;

-- geo.reconciliation_lines
ALTER TABLE geo.reconciliation_lines ADD COLUMN tenant_id text;
UPDATE geo.reconciliation_lines t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.reconciliation_lines ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.reconciliation_lines
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX reconciliation_lines_replica_identity ON geo.reconciliation_lines (run_id, upstream_id, tenant_id);
ALTER TABLE geo.reconciliation_lines REPLICA IDENTITY USING INDEX reconciliation_lines_replica_identity;

-- geo.run_dispatches
ALTER TABLE geo.run_dispatches ADD COLUMN tenant_id text;
UPDATE geo.run_dispatches t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.run_dispatches ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.run_dispatches
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX run_dispatches_replica_identity ON geo.run_dispatches (run_id, channel, tenant_id);
ALTER TABLE geo.run_dispatches REPLICA IDENTITY USING INDEX run_dispatches_replica_identity;

-- geo.partition_publications
ALTER TABLE geo.partition_publications ADD COLUMN tenant_id text;
UPDATE geo.partition_publications t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.partition_publications ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.partition_publications
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX partition_publications_replica_identity ON geo.partition_publications (publication_id, tenant_id);
ALTER TABLE geo.partition_publications REPLICA IDENTITY USING INDEX partition_publications_replica_identity;

-- analytics.share_of_voice
ALTER TABLE analytics.share_of_voice ADD COLUMN tenant_id text;
UPDATE analytics.share_of_voice t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE analytics.share_of_voice ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON analytics.share_of_voice
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX share_of_voice_replica_identity ON analytics.share_of_voice (run_id, channel, region, mode, brand, tenant_id);
ALTER TABLE analytics.share_of_voice REPLICA IDENTITY USING INDEX share_of_voice_replica_identity;

-- analytics.source_domains
ALTER TABLE analytics.source_domains ADD COLUMN tenant_id text;
UPDATE analytics.source_domains t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE analytics.source_domains ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON analytics.source_domains
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
CREATE UNIQUE INDEX source_domains_replica_identity ON analytics.source_domains (run_id, platform, registrable_domain, relation, tenant_id);
ALTER TABLE analytics.source_domains REPLICA IDENTITY USING INDEX source_domains_replica_identity;
