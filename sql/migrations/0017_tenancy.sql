-- Tenants who cannot see each other. Competing brands share this database and analysts query it
-- directly, so isolation lives in PostgreSQL itself: roles, grants and row-level security.
--
--   geo_owner    owns every object of geo and analytics; migrations run as it (or a superuser).
--   geo_service  what the worker, relay, sweeper, Dagster and the operator CLI connect as (through a
--                login that is a member): all tenants (BYPASSRLS, because the run planner and the
--                analysis COPY rows in, and COPY FROM refuses tables whose RLS applies), no DDL,
--                and no UPDATE or DELETE on the append-only tables.
--   geo_analyst  the group of every analyst login. A login sees the rows of the ONE tenant that
--                geo.analyst_logins binds it to, read through current_user -- never through a
--                setting, which any session could change with set_config.
--
-- Roles are cluster-wide and many databases (one per test) run this file at the same time: the
-- three group roles have fixed names and are created only if missing, tolerating a concurrent
-- creator. Analyst logins are created by `geo-pipeline tenants grant-analyst`, not here.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT * FROM (VALUES ('geo_owner', 'NOLOGIN'),
                                 ('geo_service', 'NOLOGIN BYPASSRLS'),
                                 ('geo_analyst', 'NOLOGIN')) AS v(name, options) LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.name) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I %s', r.name, r.options);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;  -- another database's migration created it a moment ago
      END;
    END IF;
  END LOOP;
  IF NOT (SELECT rolbypassrls FROM pg_roles WHERE rolname = 'geo_service') THEN
    RAISE EXCEPTION 'role geo_service exists without BYPASSRLS; a superuser must run: '
                    'ALTER ROLE geo_service BYPASSRLS';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'geo_analyst'
               AND (rolbypassrls OR rolsuper OR rolcanlogin)) THEN
    RAISE EXCEPTION 'role geo_analyst must be a plain NOLOGIN group without BYPASSRLS';
  END IF;
END $$;

-- ---------------------------------------------------------------- tenant bindings and caps
-- Which tenant an analyst login reads. One login, one tenant: a person working for two brands
-- gets two logins, so a query can never mix them.
CREATE TABLE geo.analyst_logins (
  login           text PRIMARY KEY CHECK (login ~ '^[a-z_][a-z0-9_]{0,62}$'
                                          AND login NOT LIKE 'pg\_%'
                                          AND login NOT IN ('geo_owner', 'geo_service',
                                                            'geo_analyst', 'postgres')),
  tenant_id       text NOT NULL REFERENCES geo.tenants ON DELETE CASCADE,
  granted_at      timestamptz NOT NULL DEFAULT now(),
  granted_by      text NOT NULL DEFAULT current_user
);
CREATE INDEX analyst_logins_tenant ON geo.analyst_logins (tenant_id);

-- A tenant's submit rate per platform (R10), on top of the platform's own limit: one customer's
-- large run cannot use all of an engine's quota. No row = only the platform's limit applies.
CREATE TABLE geo.tenant_platform_limits (
  tenant_id       text NOT NULL REFERENCES geo.tenants ON DELETE CASCADE,
  platform        text NOT NULL,
  -- The upper bound also refuses NaN and infinity (NaN compares greater than any number).
  submits_per_second double precision NOT NULL
    CHECK (submits_per_second > 0 AND submits_per_second <= 100000),
  burst           integer NOT NULL CHECK (burst >= 1),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, platform)
);

-- The tenant of the connected analyst login; NULL for every other role (which then matches no
-- row). Not SECURITY DEFINER: it reads geo.analyst_logins as the caller, whose own policy shows
-- it its own row only.
CREATE FUNCTION geo.analyst_tenant() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT l.tenant_id FROM geo.analyst_logins l WHERE l.login = current_user
$$;

-- ---------------------------------------------------------------- ownership
DO $$
DECLARE
  o record;
BEGIN
  EXECUTE 'ALTER SCHEMA geo OWNER TO geo_owner';
  EXECUTE 'ALTER SCHEMA analytics OWNER TO geo_owner';
  FOR o IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname IN ('geo', 'analytics') AND c.relkind IN ('r', 'p', 'v', 'm') LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO geo_owner', o.name);
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname IN ('geo', 'analytics') LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO geo_owner', o.name);
  END LOOP;
END $$;

-- ---------------------------------------------------------------- the service role
GRANT USAGE ON SCHEMA geo, analytics TO geo_service;
GRANT SELECT ON ALL TABLES IN SCHEMA geo, analytics TO geo_service;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA geo, analytics TO geo_service;
-- Inserts where the processes write. Append-only and immutable tables get INSERT alone.
GRANT INSERT ON geo.tenants, geo.monitors, geo.config_snapshots, geo.question_revisions,
  geo.quote_snapshots, geo.quote_lines, geo.runs, geo.batches, geo.samples, geo.state_transitions,
  geo.attempts,
  geo.upstream_requests, geo.outbox, geo.dead_letters, geo.evidence_objects, geo.answers,
  geo.citations, geo.analysis_results, geo.mentions, geo.review_decisions, geo.ledger_entries,
  geo.fee_statements, geo.fee_statement_lines, geo.reconciliation_lines, geo.run_fee_rules,
  geo.run_accounts, geo.retention_log, geo.analysis_current, geo.run_dispatches,
  geo.partition_publications, geo.publication_exclusions, geo.tenant_platform_limits,
  analytics.brand_metrics, analytics.channel_brand_metrics, analytics.share_of_voice,
  analytics.source_domains
  TO geo_service;
-- Mutable state: leases and layers, attempt ends, acceptance records, relay marks, run
-- lifecycle, saved monitor configs, the analysis pointer, claim locks on tenants (FOR NO KEY
-- UPDATE needs UPDATE), rate caps, and the run accounts (written only by the ledger's trigger,
-- which runs as the caller; a trigger refuses direct writes).
GRANT UPDATE ON geo.tenants, geo.monitors, geo.runs, geo.samples, geo.attempts,
  geo.upstream_requests, geo.outbox, geo.analysis_current, geo.run_accounts,
  geo.tenant_platform_limits
  TO geo_service;
-- Deletes: retention (attempts, evidence records), re-analysis and re-reconciliation (a
-- partition write deletes then inserts), the analytics refresh, rate caps.
GRANT DELETE ON geo.attempts, geo.evidence_objects, geo.analysis_results, geo.analysis_current,
  geo.reconciliation_lines, geo.tenant_platform_limits, analytics.brand_metrics,
  analytics.channel_brand_metrics, analytics.share_of_voice, analytics.source_domains
  TO geo_service;
-- The service never reads or writes the login bindings: it cannot move an analyst to a tenant.
REVOKE ALL ON geo.analyst_logins FROM geo_service;

-- ---------------------------------------------------------------- analysts
GRANT USAGE ON SCHEMA geo, analytics TO geo_analyst;
-- Every object with tenant data, and the shared state rules. Not granted, on purpose:
-- geo.outbox and geo.dead_letters (stream transport: ids and routing, no business facts) and
-- geo.fee_statements / geo.fee_statement_lines (a platform's statement covers every tenant; a
-- tenant reads its own side in geo.reconciliation_lines).
GRANT SELECT ON geo.tenants, geo.monitors, geo.config_snapshots, geo.question_revisions,
  geo.quote_snapshots, geo.quote_lines, geo.runs, geo.batches, geo.allowed_transitions,
  geo.samples, geo.state_transitions, geo.attempts, geo.upstream_requests, geo.evidence_objects,
  geo.answers, geo.citations, geo.analysis_results, geo.mentions, geo.review_decisions,
  geo.ledger_entries, geo.reconciliation_lines, geo.run_fee_rules, geo.run_accounts,
  geo.retention_log, geo.analysis_current, geo.run_dispatches, geo.partition_publications,
  geo.publication_exclusions, geo.analyst_logins, geo.tenant_platform_limits,
  geo.account_balances, geo.run_billing, geo.run_publish_deadlines
  TO geo_analyst;
GRANT SELECT ON ALL TABLES IN SCHEMA analytics TO geo_analyst;

-- Views check permissions and policies as the querying role, not as their owner: otherwise a
-- view would read every tenant's rows with the owner's rights.
DO $$
DECLARE
  v record;
BEGIN
  FOR v IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'v' LOOP
    EXECUTE format('ALTER VIEW %s SET (security_invoker = true)', v.name);
  END LOOP;
END $$;

-- ---------------------------------------------------------------- row-level security
-- Enabled on every table: a role that is neither owner nor geo_service sees nothing unless a
-- policy lets it. Analyst policies key on geo.analyst_tenant() (evaluated once per query) or on
-- the parent row the analyst can already see; "x IN (SELECT ...)" plans as one hashed subplan.
DO $$
DECLARE
  t record;
BEGIN
  FOR t IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname IN ('geo', 'analytics') AND c.relkind IN ('r', 'p') LOOP
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t.name);
  END LOOP;
END $$;

-- Rows carrying their tenant.
CREATE POLICY analyst_tenant ON geo.tenants FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.monitors FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.config_snapshots FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.quote_snapshots FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.runs FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.samples FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.evidence_objects FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.ledger_entries FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.run_accounts FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.retention_log FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.tenant_platform_limits FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON analytics.brand_metrics FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON analytics.channel_brand_metrics FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
-- An analyst sees its own binding (geo.analyst_tenant() reads it), nobody else's.
CREATE POLICY analyst_own_login ON geo.analyst_logins FOR SELECT TO geo_analyst
  USING (login = current_user);

-- Rows of a run.
CREATE POLICY analyst_tenant ON geo.batches FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.state_transitions FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.reconciliation_lines FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.run_fee_rules FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.run_dispatches FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.partition_publications FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON analytics.share_of_voice FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON analytics.source_domains FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));

-- Rows of a sample.
CREATE POLICY analyst_tenant ON geo.attempts FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.upstream_requests FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.answers FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.citations FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.analysis_results FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.mentions FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.review_decisions FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.analysis_current FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));

-- Rows of a quote, a publication, a question.
CREATE POLICY analyst_tenant ON geo.quote_lines FOR SELECT TO geo_analyst
  USING (quote_id IN (SELECT q.quote_id FROM geo.quote_snapshots q));
CREATE POLICY analyst_tenant ON geo.publication_exclusions FOR SELECT TO geo_analyst
  USING (publication_id IN (SELECT p.publication_id FROM geo.partition_publications p));
-- Question revisions are content-addressed and shared: a tenant sees a question's text only if
-- one of its own samples asked it (two tenants asking the same words each see their own ask).
CREATE POLICY analyst_tenant ON geo.question_revisions FOR SELECT TO geo_analyst
  USING (question_revision IN (SELECT s.question_revision FROM geo.samples s));

-- The state rules are the same for everyone and hold no tenant data.
CREATE POLICY analyst_shared ON geo.allowed_transitions FOR SELECT TO geo_analyst
  USING (true);
