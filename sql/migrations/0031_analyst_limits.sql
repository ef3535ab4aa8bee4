-- Analysts cannot fill the database's disk (issue 35). Large objects live in pg_largeobject,
-- outside every table's grants and row-level security, and any role may create them through
-- these functions (granted to PUBLIC), even in a read-only transaction. No process of the
-- pipeline uses large objects (evidence is in object storage), so creating them is taken from
-- everyone but superusers. Function privileges live in this database's pg_proc and are copied
-- with it (CREATE DATABASE ... TEMPLATE).
--
-- The other half, temp tables, is a privilege on the database itself (pg_database is shared by
-- the cluster and not copied by a template): the analyst guard (geo_pipeline/store/analyst_guard.py)
-- revokes TEMPORARY from PUBLIC whenever it runs and when an analyst login is granted.
REVOKE EXECUTE ON FUNCTION pg_catalog.lo_create(oid), pg_catalog.lo_creat(integer),
  pg_catalog.lo_from_bytea(oid, bytea) FROM PUBLIC;

-- Other sessions are not an analyst's business (issue 35): every role may read, of every session
-- of the server, its user name, application name and database (pg_stat_activity hides only the
-- query and times), and every lock (pg_locks), including the service's per-tenant advisory locks
-- (hashtext('geo.billing.tenant:' || tenant) -- a key anyone can compute for a guessed tenant).
-- Taken from PUBLIC here: the views, the functions under them, and the per-database activity
-- counters. Kept for superusers and pg_read_all_stats (monitoring; the analyst guard's login).
-- Nothing of the pipeline reads these as geo_service.
REVOKE SELECT ON pg_catalog.pg_stat_activity, pg_catalog.pg_locks FROM PUBLIC;
GRANT SELECT ON pg_catalog.pg_stat_activity, pg_catalog.pg_locks TO pg_read_all_stats;
DO $$
DECLARE
  f record;
BEGIN
  FOR f IN SELECT p.oid::regprocedure AS name FROM pg_proc p
            WHERE p.pronamespace = 'pg_catalog'::regnamespace
              AND (p.proname IN ('pg_stat_get_activity', 'pg_lock_status', 'pg_blocking_pids',
                                 'pg_safe_snapshot_blocking_pids', 'pg_stat_get_progress_info')
                   OR p.proname LIKE 'pg\_stat\_get\_backend\_%'
                   OR p.proname LIKE 'pg\_stat\_get\_db\_%') LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pg_read_all_stats', f.name);
  END LOOP;
END $$;

-- Advisory locks are how the service serialises work per run, per sample and per tenant's
-- billing (keys: hashtext of 'geo.run:' / 'geo.evidence:' / 'geo.billing.tenant:' and the id).
-- Any role may take them, and a session-level lock held by an idle session lasts until it ends:
-- an analyst could stop another tenant's billing for good with a guessed tenant id. Taken from
-- PUBLIC, given to the pipeline's roles.
DO $$
DECLARE
  f record;
BEGIN
  FOR f IN SELECT p.oid::regprocedure AS name FROM pg_proc p
            WHERE p.pronamespace = 'pg_catalog'::regnamespace
              AND p.proname LIKE 'pg\_%advisory%' LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO geo_owner, geo_service', f.name);
  END LOOP;
END $$;

-- REVOKE by a role that does not own the objects (they belong to the bootstrap superuser) only
-- warns; refuse to continue silently.
DO $$
BEGIN
  IF has_function_privilege('public', 'pg_catalog.lo_create(oid)', 'EXECUTE')
     OR has_function_privilege('public', 'pg_catalog.lo_from_bytea(oid, bytea)', 'EXECUTE')
     OR has_table_privilege('public', 'pg_catalog.pg_stat_activity', 'SELECT')
     OR has_function_privilege('public', 'pg_catalog.pg_stat_get_activity(integer)', 'EXECUTE')
     OR has_function_privilege('public', 'pg_catalog.pg_advisory_lock(bigint)', 'EXECUTE') THEN
    RAISE EXCEPTION 'migration 0031 needs a superuser: large-object creation, advisory locks or '
                    'other sessions'' activity are still granted to PUBLIC (run it as postgres, then go on as '
                    'geo_migrator)';
  END IF;
END $$;
