-- The last analyst-readable tenant rows without a tenant_id (issue #35), given one like the
-- child rows of migration 0064, so a tenant's analyst replica receives them through the
-- publication's row filter `WHERE (tenant_id = '<tenant>')` (which can name the table's own
-- columns only): geo.quote_lines (a quote snapshot belongs to one tenant; quote_id is its
-- primary key), geo.upstream_requests (of a sample) and geo.run_fee_rules (of a run). Filled on
-- INSERT by a trigger (writers do not change), backfilled here, NOT NULL;
-- `geo.enable_replica_identities()` (migration 0058) makes (primary key, tenant_id) their
-- replica identity when a replica is created.
-- Cost: one primary-key lookup per inserted row (a few quote lines and fee rules per run; one
-- upstream request per attempt, as geo.attempts pays since 0064).
CREATE FUNCTION geo.tenant_of_quote() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tenant_id IS NULL THEN
    SELECT q.tenant_id INTO NEW.tenant_id FROM geo.quote_snapshots q WHERE q.quote_id = NEW.quote_id;
  END IF;
  RETURN NEW;
END $$;
ALTER FUNCTION geo.tenant_of_quote() OWNER TO geo_owner;

ALTER TABLE geo.quote_lines ADD COLUMN tenant_id text;
ALTER TABLE geo.quote_lines DISABLE TRIGGER quote_lines_immutable;
UPDATE geo.quote_lines t SET tenant_id = q.tenant_id
FROM geo.quote_snapshots q WHERE q.quote_id = t.quote_id;
ALTER TABLE geo.quote_lines ENABLE TRIGGER quote_lines_immutable;
ALTER TABLE geo.quote_lines ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_quote BEFORE INSERT ON geo.quote_lines
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_quote();

-- geo.upstream_requests
ALTER TABLE geo.upstream_requests ADD COLUMN tenant_id text;
UPDATE geo.upstream_requests t SET tenant_id = s.tenant_id
FROM geo.samples s WHERE s.sample_id = t.sample_id;
ALTER TABLE geo.upstream_requests ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_sample BEFORE INSERT ON geo.upstream_requests
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_sample();

-- geo.run_fee_rules
ALTER TABLE geo.run_fee_rules ADD COLUMN tenant_id text;
ALTER TABLE geo.run_fee_rules DISABLE TRIGGER run_fee_rules_immutable;
UPDATE geo.run_fee_rules t SET tenant_id = r.tenant_id FROM geo.runs r WHERE r.run_id = t.run_id;
ALTER TABLE geo.run_fee_rules ENABLE TRIGGER run_fee_rules_immutable;
ALTER TABLE geo.run_fee_rules ALTER COLUMN tenant_id SET NOT NULL;
CREATE TRIGGER a_tenant_of_run BEFORE INSERT ON geo.run_fee_rules
  FOR EACH ROW EXECUTE FUNCTION geo.tenant_of_run();
