-- A per-tenant analyst replica (issue #35): logical replication publishes each analyst-readable
-- tenant table with a row filter `WHERE (tenant_id = '<tenant>')`, so the tenant's analyst
-- server holds that tenant's rows only (its statistics, planner estimates and role list are
-- the tenant's alone). PostgreSQL 15 publishes UPDATE and DELETE through a row filter only when
-- the filter's columns are in the table's replica identity: for each such table whose primary
-- key lacks tenant_id, a unique index on (primary key, tenant_id) made its replica identity.
-- Those indexes are built by `geo.enable_replica_identities()`, which the first
-- `tenants analyst-replica create` calls on the primary -- not here: every index is a cost on
-- every insert (geo.samples' would add ~26 % to the buffers and ~20 % to the backend CPU of a
-- 100,000-sample create_run, issue #39), paid only by a deployment that runs analyst replicas.
-- The subscriber needs none of them: it finds a replicated UPDATE's row by its own primary key,
-- whose columns the published identity contains.
-- geo.tenants and geo.tenant_platform_limits already have tenant_id in their primary key;
-- geo.analyst_logins is not replicated (each replica binds its own login).
CREATE FUNCTION geo.enable_replica_identities() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  t record;
  made integer := 0;
BEGIN
  FOR t IN
    SELECT c.oid::regclass AS rel, c.relname || '_replica_identity' AS ix,
           (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.o)
              FROM unnest(i.indkey) WITH ORDINALITY k(attnum, o)
              JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum) AS key_columns
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
    JOIN pg_attribute tid ON tid.attrelid = c.oid AND tid.attname = 'tenant_id' AND tid.attnotnull
    WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'r'
      AND has_table_privilege('geo_analyst', c.oid, 'SELECT')
      AND c.oid <> 'geo.analyst_logins'::regclass
      AND NOT (tid.attnum = ANY (i.indkey))
      AND c.relreplident <> 'i'
    ORDER BY 1
  LOOP
    EXECUTE format('CREATE UNIQUE INDEX IF NOT EXISTS %I ON %s (%s, tenant_id)',
                   t.ix, t.rel, t.key_columns);
    EXECUTE format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', t.rel, t.ix);
    made := made + 1;
  END LOOP;
  RETURN made;
END $$;
ALTER FUNCTION geo.enable_replica_identities() OWNER TO geo_owner;
REVOKE EXECUTE ON FUNCTION geo.enable_replica_identities() FROM PUBLIC;

-- The publications' row filters name the tenants (`tenant_id = 'acme'`): on the primary, every
-- login could read them (pg_publication_rel.prqual, pg_publication_tables.rowfilter, and the
-- function behind that view), i.e. the customer list. Kept for superusers (the operator).
REVOKE SELECT ON pg_catalog.pg_publication_rel, pg_catalog.pg_publication_tables FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pg_catalog.pg_get_publication_tables FROM PUBLIC;
DO $$
BEGIN
  IF has_table_privilege('public', 'pg_catalog.pg_publication_rel', 'SELECT')
     OR has_table_privilege('public', 'pg_catalog.pg_publication_tables', 'SELECT') THEN
    RAISE EXCEPTION 'migration 0058 needs a superuser: the publications'' row filters (which name '
                    'tenants) are still readable by PUBLIC (run it as postgres, then go on as '
                    'geo_migrator)';
  END IF;
END $$;
