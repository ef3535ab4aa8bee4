-- The tenant of every analyst-readable row that hangs off a sample or a run (issue #35): a
-- tenant's analyst replica receives a table through a publication row filter
-- `WHERE (tenant_id = '<tenant>')`, and PostgreSQL 15 row filters can name the table's own
-- columns only (no subquery to geo.samples or geo.runs). So these tables get the tenant_id of
-- their sample or run: filled on INSERT by a trigger (writers do not change), backfilled here,
-- NOT NULL; `geo.enable_replica_identities()` (migration 0058) makes (primary key, tenant_id)
-- their replica identity when the first analyst replica is created.
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

-- geo.answers
ALTER TABLE geo.answers ADD COLUMN tenant_id text;
UPDATE geo.answers t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.answers ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.answers
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.citations
ALTER TABLE geo.citations ADD COLUMN tenant_id text;
UPDATE geo.citations t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.citations ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.citations
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.analysis_results
ALTER TABLE geo.analysis_results ADD COLUMN tenant_id text;
UPDATE geo.analysis_results t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.analysis_results ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.analysis_results
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.mentions
ALTER TABLE geo.mentions ADD COLUMN tenant_id text;
UPDATE geo.mentions t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.mentions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.mentions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.analysis_current
ALTER TABLE geo.analysis_current ADD COLUMN tenant_id text;
UPDATE geo.analysis_current t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.analysis_current ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.analysis_current
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.mention_stances
ALTER TABLE geo.mention_stances ADD COLUMN tenant_id text;
UPDATE geo.mention_stances t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.mention_stances ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.mention_stances
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.review_decisions
ALTER TABLE geo.review_decisions ADD COLUMN tenant_id text;
ALTER TABLE geo.review_decisions DISABLE TRIGGER review_decisions_append_only;
UPDATE geo.review_decisions t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.review_decisions ENABLE TRIGGER review_decisions_append_only;
ALTER TABLE geo.review_decisions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.review_decisions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.publication_exclusions
ALTER TABLE geo.publication_exclusions ADD COLUMN tenant_id text;
UPDATE geo.publication_exclusions t SET tenant_id = s.tenant_id FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.publication_exclusions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.publication_exclusions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.batches
ALTER TABLE geo.batches ADD COLUMN tenant_id text;
UPDATE geo.batches t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.batches ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.batches
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

-- geo.state_transitions
ALTER TABLE geo.state_transitions ADD COLUMN tenant_id text;
ALTER TABLE geo.state_transitions DISABLE TRIGGER state_transitions_append_only;
UPDATE geo.state_transitions t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.state_transitions ENABLE TRIGGER state_transitions_append_only;
ALTER TABLE geo.state_transitions ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.state_transitions
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

-- geo.reconciliation_lines
ALTER TABLE geo.reconciliation_lines ADD COLUMN tenant_id text;
UPDATE geo.reconciliation_lines t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.reconciliation_lines ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.reconciliation_lines
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

-- geo.run_dispatches
ALTER TABLE geo.run_dispatches ADD COLUMN tenant_id text;
UPDATE geo.run_dispatches t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.run_dispatches ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.run_dispatches
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

-- geo.partition_publications
ALTER TABLE geo.partition_publications ADD COLUMN tenant_id text;
UPDATE geo.partition_publications t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.partition_publications ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.partition_publications
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

-- analytics.share_of_voice
ALTER TABLE analytics.share_of_voice ADD COLUMN tenant_id text;
UPDATE analytics.share_of_voice t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE analytics.share_of_voice ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON analytics.share_of_voice
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();

-- analytics.source_domains
ALTER TABLE analytics.source_domains ADD COLUMN tenant_id text;
UPDATE analytics.source_domains t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE analytics.source_domains ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON analytics.source_domains
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
