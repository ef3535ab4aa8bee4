-- name: xact_counters
-- The work this backend's current transaction has made PostgreSQL do so far, over the project's
-- tables and indexes (pg_stat_get_xact_*: counted as it happens, flushed only when the
-- transaction ends). rows_read: heap rows returned by sequential scans plus index entries
-- returned by index scans (every row visit, once); buffers: block requests, hits or reads.
-- The growth tests and bench/scale.py compare two sizes by these, never by the clock.
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint AS rows_read,
       coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint AS buffers,
       coalesce(sum(pg_stat_get_xact_numscans(c.oid)), 0)::bigint AS scans
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('geo', 'analytics')
  AND c.relkind IN ('r', 'i', 'm', 'p');

-- name: cumulative_counters
-- The same counts as xact_counters, from the cumulative statistics of the whole database
-- (pg_stat_get_*: what every transaction has flushed so far), for code that commits by itself
-- and so cannot be measured inside one transaction (analyse_run commits each chunk). Only
-- exact when this connection is the only one working in the database.
SELECT coalesce(sum(pg_stat_get_tuples_returned(c.oid)), 0)::bigint AS rows_read,
       coalesce(sum(pg_stat_get_blocks_fetched(c.oid)), 0)::bigint AS buffers,
       coalesce(sum(pg_stat_get_numscans(c.oid)), 0)::bigint AS scans
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('geo', 'analytics')
  AND c.relkind IN ('r', 'i', 'm', 'p');
