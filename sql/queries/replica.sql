-- A tenant's analyst replica (issue #35): a logical-replication publication on the primary with
-- a row filter per table, and a subscription on a PostgreSQL server of the tenant's own
-- (geo_pipeline/store/analyst_replica.py). Run by the operator, as a superuser on both.

-- name: wal_level
SELECT current_setting('wal_level') AS wal_level;

-- name: replicated_tables
-- The tables a tenant's replica receives: every analyst-readable table of geo/analytics with a
-- NOT NULL tenant_id that its replica identity covers (migration 0058; PostgreSQL publishes
-- UPDATE/DELETE through a row filter only then), except the login bindings (each replica binds
-- its own login). Views are not replicated: the replica's own migrations define them.
SELECT c.oid::regclass::text AS rel
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND a.attnotnull
WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'r'
  AND has_table_privilege('geo_analyst', c.oid, 'SELECT')
  AND c.oid <> 'geo.analyst_logins'::regclass
  AND EXISTS (
    SELECT 1 FROM pg_index i
    WHERE i.indrelid = c.oid AND a.attnum = ANY (i.indkey)
      AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident)))
ORDER BY 1;

-- name: tenant_tables_not_replicated
-- Analyst-readable tables with a tenant_id that replicated_tables leaves out (the login
-- bindings only, unless a new table lacks its replica identity).
SELECT c.oid::regclass::text AS rel
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'r'
  AND has_table_privilege('geo_analyst', c.oid, 'SELECT')
  AND c.oid::regclass::text <> ALL (%(replicated)s::text[])
ORDER BY 1;

-- name: publication_of_tenant
-- The publication that filters geo.tenants to this tenant (the names are opaque: they are
-- visible on the tenant's replica and must not name anyone).
SELECT pubname AS publication FROM pg_publication_tables
WHERE schemaname = 'geo' AND tablename = 'tenants'
  AND rowfilter = format('(tenant_id = %%L::text)', %(tenant_id)s::text)
ORDER BY pubname;

-- name: publication_ddl
-- CREATE PUBLICATION (or, with verb 'ALTER', ALTER PUBLICATION ... SET) for these tables, each
-- with the tenant's row filter; composed here with quoted identifiers and literals.
SELECT format('%%s PUBLICATION %%I %%s %%s', %(verb)s::text, %(publication)s::text,
              CASE WHEN %(verb)s::text = 'CREATE' THEN 'FOR' ELSE 'SET' END,
              string_agg(format('TABLE %%s WHERE (tenant_id = %%L)', t.rel, %(tenant_id)s::text),
                         ', ' ORDER BY t.rel)) AS ddl
FROM unnest(%(tables)s::text[]) AS t(rel);

-- name: drop_publication_ddl
SELECT format('DROP PUBLICATION IF EXISTS %%I', %(publication)s::text) AS ddl;

-- name: publisher_slot
-- The replication slot of a tenant's subscription on the primary, and how far its subscriber
-- has confirmed (flushed) the primary's WAL.
SELECT s.slot_name, s.active, s.confirmed_flush_lsn::text AS confirmed_flush_lsn,
       pg_current_wal_lsn()::text AS primary_lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint AS lag_bytes
FROM pg_replication_slots s WHERE s.slot_name = %(publication)s;

-- name: caught_up
-- Whether the subscriber has confirmed the primary's WAL up to this LSN.
SELECT coalesce(bool_or(s.confirmed_flush_lsn >= %(lsn)s::pg_lsn), false) AS caught_up
FROM pg_replication_slots s WHERE s.slot_name = %(publication)s;

-- name: current_lsn
SELECT pg_current_wal_lsn()::text AS lsn;

-- name: drop_slot
-- The slot left behind when the replica is gone (DROP SUBSCRIPTION there drops it otherwise).
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = %(publication)s AND NOT active;

-- name: subscription
-- The replica's subscription, its tables' sync states and its apply worker's progress.
SELECT s.subname AS subscription, s.subenabled AS enabled,
       (SELECT count(*) FROM pg_subscription_rel r WHERE r.srsubid = s.oid)::int AS tables,
       (SELECT count(*) FROM pg_subscription_rel r
         WHERE r.srsubid = s.oid AND r.srsubstate IN ('r', 's'))::int AS tables_ready,
       st.received_lsn::text AS received_lsn, st.latest_end_lsn::text AS latest_end_lsn,
       st.last_msg_receipt_time
FROM pg_subscription s
LEFT JOIN pg_stat_subscription st ON st.subid = s.oid AND st.relid IS NULL
WHERE s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY s.subname;

-- name: subscription_ddl
SELECT CASE %(verb)s::text
         WHEN 'CREATE' THEN format('CREATE SUBSCRIPTION %%I CONNECTION %%L PUBLICATION %%I',
                                   %(subscription)s::text, %(conninfo)s::text,
                                   %(subscription)s::text)
         WHEN 'REFRESH' THEN format('ALTER SUBSCRIPTION %%I REFRESH PUBLICATION',
                                    %(subscription)s::text)
         WHEN 'DROP' THEN format('DROP SUBSCRIPTION IF EXISTS %%I', %(subscription)s::text)
       END AS ddl;

-- name: truncate_ddl
-- Empty the replicated tables before the first copy (the replica's own migrations may have
-- seeded rows the primary's copy would duplicate). CASCADE: the tables that refer to them on
-- the replica (alert recipients, ...) are not replicated and hold nothing there.
SELECT format('TRUNCATE %%s CASCADE', string_agg(t.rel, ', ')) AS ddl
FROM unnest(%(tables)s::text[]) AS t(rel);

-- name: database_limits_ddl
-- The replica database's own limits, set by the operator (superuser-only parameters cannot be
-- lifted by a login; statement and idle limits are also held by the analyst guard).
SELECT format('ALTER DATABASE %%I CONNECTION LIMIT %%s', current_database(), %(connections)s::int)
       AS ddl
UNION ALL
SELECT format('ALTER DATABASE %%I SET %%I = %%L', current_database(), k, v)
FROM jsonb_each_text(%(settings)s::jsonb) AS s(k, v)
UNION ALL
-- the operator (this connection's role: the guard, migrations, the subscription's owner) writes
SELECT format('ALTER ROLE %%I IN DATABASE %%I SET default_transaction_read_only = off',
              current_user, current_database());

-- name: tenant_question_texts
-- The question texts the tenant's samples ask (geo.question_revisions is content-addressed and
-- shared by tenants, so no row filter can publish it: the operator copies the tenant's texts).
SELECT q.question_revision, q.text, q.created_at FROM geo.question_revisions q
WHERE q.question_revision IN (SELECT s.question_revision FROM geo.samples s
                              WHERE s.tenant_id = %(tenant_id)s)
ORDER BY q.question_revision;

-- name: insert_question_texts
INSERT INTO geo.question_revisions (question_revision, text, created_at)
SELECT * FROM unnest(%(revisions)s::text[], %(texts)s::text[], %(created)s::timestamptz[])
ON CONFLICT (question_revision) DO NOTHING;

-- name: enable_replica_identities
-- Makes (primary key, tenant_id) the replica identity of every table replicated_tables needs it
-- for (migration 0058); builds the indexes the first time only, returns how many it made. Each
-- build holds a write lock on its table for the build's length.
SELECT geo.enable_replica_identities() AS made;

-- name: replica_tenant
-- The tenant whose rows this replica holds (geo.tenants arrives filtered: one row, or none
-- before the first `create`).
SELECT tenant_id FROM geo.tenants ORDER BY tenant_id;

-- name: missing_question_texts
-- On the replica: the (run, question revision) pairs its samples ask whose text it lacks (texts
-- are copied, not replicated: runs made after the last copy). Reads the replica's samples only.
SELECT DISTINCT s.run_id, s.question_revision FROM geo.samples s
WHERE NOT EXISTS (SELECT 1 FROM geo.question_revisions q
                  WHERE q.question_revision = s.question_revision)
ORDER BY 1, 2;

-- name: question_texts_of_runs
-- On the primary: the texts of those revisions, each only if the named run of this tenant asks
-- it (the replica's list is not taken on trust; samples_run_channel finds the run's samples).
SELECT DISTINCT q.question_revision, q.text, q.created_at
FROM unnest(%(run_ids)s::text[], %(revisions)s::text[]) AS m(run_id, revision)
JOIN geo.question_revisions q ON q.question_revision = m.revision
WHERE EXISTS (SELECT 1 FROM geo.samples s
              WHERE s.run_id = m.run_id AND s.question_revision = m.revision
                AND s.tenant_id = %(tenant_id)s)
ORDER BY q.question_revision;
