-- The analyst endpoint (issue #35; geo_pipeline/runtime/analyst_pooler.py): the SCRAM verifiers
-- PgBouncer checks analyst logins against, read by the operator (a superuser: pg_authid) from the
-- analyst server's catalogue. A verifier is not a password and cannot be replayed as one.

-- name: analyst_verifiers
SELECT l.login, a.rolpassword AS verifier
FROM geo.analyst_logins l
JOIN pg_authid a ON a.rolname = l.login
WHERE a.rolcanlogin
ORDER BY l.login;

-- name: in_recovery
-- A hot standby: the guard only cancels and ends sessions there (nothing can be written).
SELECT pg_is_in_recovery() AS in_recovery;
