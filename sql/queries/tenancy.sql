-- Tenants, analyst logins and per-tenant rate caps (R10). The roles themselves are created with
-- DDL built in geo_pipeline/store/tenancy.py (role names cannot be bound as parameters).

-- name: create_tenant
INSERT INTO geo.tenants (tenant_id, name, currency, max_in_flight)
VALUES (%(tenant_id)s, %(name)s, %(currency)s, %(max_in_flight)s)
ON CONFLICT (tenant_id) DO NOTHING
RETURNING tenant_id;

-- name: get_tenant
SELECT tenant_id, name, currency, max_in_flight, retention_days, created_at
FROM geo.tenants WHERE tenant_id = %(tenant_id)s;

-- name: list_tenants
SELECT t.tenant_id, t.name, t.currency, t.max_in_flight,
       (SELECT count(*) FROM geo.analyst_logins l WHERE l.tenant_id = t.tenant_id)::int
         AS analyst_logins
FROM geo.tenants t ORDER BY t.tenant_id;

-- name: role_facts
-- What the cluster knows of a role name: whether it exists, may log in, belongs to the analyst
-- group; and whom this database binds it to.
SELECT r.rolname, r.rolcanlogin, r.rolsuper,
       pg_has_role(r.oid, 'geo_analyst', 'MEMBER') AS is_analyst,
       l.tenant_id AS bound_tenant
FROM pg_roles r LEFT JOIN geo.analyst_logins l ON l.login = r.rolname
WHERE r.rolname = %(login)s;

-- name: is_analyst_replica
-- Whether this database is a tenant's analyst replica (it subscribes to the service's
-- publication: store/analyst_replica.py). Analyst logins are made there only (issue 35).
SELECT EXISTS (SELECT 1 FROM pg_subscription s JOIN pg_database d ON d.oid = s.subdbid
               WHERE d.datname = current_database()) AS is_replica;

-- name: bind_login
INSERT INTO geo.analyst_logins (login, tenant_id) VALUES (%(login)s, %(tenant_id)s);

-- name: unbind_login
DELETE FROM geo.analyst_logins WHERE login = %(login)s AND tenant_id = %(tenant_id)s
RETURNING login;

-- name: analyst_logins
SELECT login, tenant_id, granted_at, granted_by FROM geo.analyst_logins
WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s
ORDER BY tenant_id, login;

-- name: end_sessions
-- A revoked login's open sessions end now, not at their next reconnect.
SELECT count(pg_terminate_backend(a.pid))::int AS ended
FROM pg_stat_activity a WHERE a.usename = %(login)s AND a.pid <> pg_backend_pid();

-- name: connection_facts
SELECT current_database() AS dbname, inet_server_port() AS port, current_user AS login,
       (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user)
         AS can_create_roles;

-- name: set_platform_limit
INSERT INTO geo.tenant_platform_limits (tenant_id, platform, submits_per_second, burst)
VALUES (%(tenant_id)s, %(platform)s, %(submits_per_second)s, %(burst)s)
ON CONFLICT (tenant_id, platform) DO UPDATE
  SET submits_per_second = EXCLUDED.submits_per_second, burst = EXCLUDED.burst,
      updated_at = now();

-- name: clear_platform_limit
DELETE FROM geo.tenant_platform_limits WHERE tenant_id = %(tenant_id)s AND platform = %(platform)s
RETURNING tenant_id;

-- name: platform_limits
-- Every tenant's submit cap on the given platforms (the worker reloads these every few seconds).
SELECT tenant_id, platform, submits_per_second, burst FROM geo.tenant_platform_limits
WHERE platform = ANY(%(platforms)s::text[])
ORDER BY tenant_id, platform;

-- name: guard_refuse_temp
-- Temp tables are disk any session could fill: TEMPORARY is taken from PUBLIC (so from every
-- analyst) and kept for the pipeline's own roles. A database privilege, so run per database,
-- whenever the guard runs (a restore or a copy of the database brings PUBLIC's default back).
DO $$
BEGIN
  EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
  EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO geo_owner, geo_service', current_database());
END $$;

-- name: guard_role_settings
-- Every analyst login bound here with its role defaults, global and for this database: a login
-- may ALTER ROLE itself (PostgreSQL allows any role to set its own defaults).
SELECT l.login,
       coalesce((SELECT s.setconfig FROM pg_db_role_setting s
                 WHERE s.setrole = r.oid AND s.setdatabase = 0), '{}') AS global_settings,
       coalesce((SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
                 WHERE s.setrole = r.oid AND d.datname = current_database()), '{}') AS local_settings
FROM geo.analyst_logins l JOIN pg_roles r ON r.rolname = l.login
ORDER BY l.login;

-- name: guard_cancel_overrunning
-- Analyst statements of this database running longer than the limit: cancelled (the session
-- stays). The login may have set its own statement_timeout to 0; this does not ask it.
SELECT a.usename AS login, a.pid, pg_cancel_backend(a.pid) AS signalled
FROM pg_stat_activity a JOIN geo.analyst_logins l ON l.login = a.usename
WHERE a.datname = current_database() AND a.state = 'active'
  AND a.query_start < clock_timestamp() - make_interval(secs => %(limit_seconds)s)
ORDER BY a.pid;

-- name: guard_end_idle_transactions
-- Analyst transactions left open (idle) longer than the limit hold locks and a snapshot that
-- keeps VACUUM from cleaning up: the session is ended.
SELECT a.usename AS login, a.pid, pg_terminate_backend(a.pid) AS signalled
FROM pg_stat_activity a JOIN geo.analyst_logins l ON l.login = a.usename
WHERE a.datname = current_database()
  AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
  AND a.state_change < clock_timestamp() - make_interval(secs => %(limit_seconds)s)
ORDER BY a.pid;
