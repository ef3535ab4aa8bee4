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
