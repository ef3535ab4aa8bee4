-- No analyst logs in to the service's server (issue 35). A login here could `ALTER ROLE` itself
-- (PostgreSQL 15 lets any role set its own defaults: statement_timeout = 0,
-- default_transaction_read_only = off), its time limit was only the analyst guard's cancel, and
-- the shared catalogue (planner estimates, reltuples, role names) tells it about other tenants.
-- An analyst's login now lives on the tenant's analyst replica only and is reached through the
-- analyst endpoint (`tenants analyst-replica create` / `endpoint`: a hot standby behind
-- PgBouncer, where the server and the pooler hold the limits).
--
-- The roles `tenants grant-analyst` made here are the members of geo_analyst that
-- geo.analyst_logins binds in this database: they stay, bound, so that row-level security can
-- still be checked by an operator (`SET ROLE`), but NOLOGIN. Roles are shared by the server's
-- databases; only those bound here are touched. A tenant's replica runs these migrations too
-- (`analyst-replica create`): there the login is the analyst's way in (through its standby), so
-- a database that subscribes (an analyst replica) is left alone.
DO $$
DECLARE
  r record;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_subscription s JOIN pg_database d ON d.oid = s.subdbid
             WHERE d.datname = current_database()) THEN
    RETURN;
  END IF;
  FOR r IN SELECT a.rolname FROM geo.analyst_logins l JOIN pg_roles a ON a.rolname = l.login
           WHERE a.rolcanlogin AND NOT a.rolsuper AND pg_has_role(a.oid, 'geo_analyst', 'MEMBER')
           ORDER BY a.rolname LOOP
    EXECUTE format('ALTER ROLE %I NOLOGIN', r.rolname);
  END LOOP;
END $$;
