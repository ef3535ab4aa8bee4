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

-- name: replica_hba_admits_analysts
-- The lines of the analyst replica's pg_hba.conf (as the file is now: pg_hba_file_rules, superuser
-- only) that let an analyst login connect to the replica itself over TCP, bypassing the endpoint:
-- a host rule for every user, for geo_analyst's members or for a bound login, to every database
-- or this one, by any method but reject, and not behind an earlier reject of analysts from every
-- address. An approximation (an earlier reject from some addresses only is not subtracted, and a
-- group other than geo_analyst is not expanded), enough to warn. Unix-socket (local) lines are
-- left out: only a person with a shell on the replica's host reaches those.
WITH r AS (
  SELECT line_number, type, database, user_name, address, netmask, auth_method,
         (user_name && ARRAY['all', '+geo_analyst']
          OR user_name && ARRAY(SELECT login FROM geo.analyst_logins))
         AND database && ARRAY['all', current_database()::text] AS for_analysts
  FROM pg_hba_file_rules
  WHERE error IS NULL AND type LIKE 'host%%'
)
SELECT a.line_number, a.type, array_to_string(a.database, ',') AS database,
       array_to_string(a.user_name, ',') AS user_name,
       coalesce(a.address, '') || coalesce('/' || a.netmask, '') AS address, a.auth_method
FROM r a
WHERE a.for_analysts AND a.auth_method <> 'reject'
  AND NOT EXISTS (
    SELECT 1 FROM r b
    WHERE b.line_number < a.line_number AND b.for_analysts AND b.auth_method = 'reject'
      AND (b.type = 'host' OR b.type = a.type)
      AND (b.address = 'all' OR b.netmask IN ('0.0.0.0', '::')))
ORDER BY a.line_number;
