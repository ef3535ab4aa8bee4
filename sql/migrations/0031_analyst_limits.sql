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

-- REVOKE by a role that does not own the functions only warns; refuse to continue silently.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
              WHERE p.oid IN ('pg_catalog.lo_create(oid)'::regprocedure,
                              'pg_catalog.lo_creat(integer)'::regprocedure,
                              'pg_catalog.lo_from_bytea(oid, bytea)'::regprocedure)
                AND a.grantee = 0 AND a.privilege_type = 'EXECUTE') THEN
    RAISE EXCEPTION 'large-object creation is still granted to PUBLIC; a superuser must run '
                    'this migration (REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), '
                    'lo_from_bytea(oid, bytea) FROM PUBLIC)';
  END IF;
END $$;
