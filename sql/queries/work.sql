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
