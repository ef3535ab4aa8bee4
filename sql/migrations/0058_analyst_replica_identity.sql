-- A per-tenant analyst replica (issue #35): logical replication publishes each analyst-readable
-- tenant table with a row filter `WHERE (tenant_id = '<tenant>')`, so the tenant's analyst
-- server holds that tenant's rows only (its statistics, planner estimates and role list are
-- the tenant's alone). PostgreSQL 15 publishes UPDATE and DELETE through a row filter only when
-- the filter's columns are in the table's replica identity; the identity is the primary key
-- plus tenant_id, a unique index that the subscriber's copy of the schema (these migrations)
-- has too, so applying an UPDATE there finds its row through an index, not a scan.
-- geo.tenants and geo.tenant_platform_limits already have tenant_id in their primary key;
-- geo.analyst_logins is not replicated (each replica binds its own login).
CREATE UNIQUE INDEX monitors_replica_identity ON geo.monitors (monitor_id, tenant_id);
ALTER TABLE geo.monitors REPLICA IDENTITY USING INDEX monitors_replica_identity;
CREATE UNIQUE INDEX config_snapshots_replica_identity
  ON geo.config_snapshots (snapshot_id, tenant_id);
ALTER TABLE geo.config_snapshots REPLICA IDENTITY USING INDEX config_snapshots_replica_identity;
CREATE UNIQUE INDEX quote_snapshots_replica_identity ON geo.quote_snapshots (quote_id, tenant_id);
ALTER TABLE geo.quote_snapshots REPLICA IDENTITY USING INDEX quote_snapshots_replica_identity;
CREATE UNIQUE INDEX runs_replica_identity ON geo.runs (run_id, tenant_id);
ALTER TABLE geo.runs REPLICA IDENTITY USING INDEX runs_replica_identity;
CREATE UNIQUE INDEX samples_replica_identity ON geo.samples (sample_id, tenant_id);
ALTER TABLE geo.samples REPLICA IDENTITY USING INDEX samples_replica_identity;
CREATE UNIQUE INDEX evidence_objects_replica_identity
  ON geo.evidence_objects (object_id, tenant_id);
ALTER TABLE geo.evidence_objects REPLICA IDENTITY USING INDEX evidence_objects_replica_identity;
CREATE UNIQUE INDEX ledger_entries_replica_identity ON geo.ledger_entries (entry_id, tenant_id);
ALTER TABLE geo.ledger_entries REPLICA IDENTITY USING INDEX ledger_entries_replica_identity;
CREATE UNIQUE INDEX run_accounts_replica_identity ON geo.run_accounts (run_id, tenant_id);
ALTER TABLE geo.run_accounts REPLICA IDENTITY USING INDEX run_accounts_replica_identity;
CREATE UNIQUE INDEX retention_log_replica_identity ON geo.retention_log (retention_id, tenant_id);
ALTER TABLE geo.retention_log REPLICA IDENTITY USING INDEX retention_log_replica_identity;
CREATE UNIQUE INDEX warc_records_replica_identity
  ON geo.warc_records (object_key, record_offset, tenant_id);
ALTER TABLE geo.warc_records REPLICA IDENTITY USING INDEX warc_records_replica_identity;
CREATE UNIQUE INDEX monitor_events_replica_identity ON geo.monitor_events (event_id, tenant_id);
ALTER TABLE geo.monitor_events REPLICA IDENTITY USING INDEX monitor_events_replica_identity;
CREATE UNIQUE INDEX monitor_resample_failures_replica_identity
  ON geo.monitor_resample_failures (monitor_id, day, tenant_id);
ALTER TABLE geo.monitor_resample_failures
  REPLICA IDENTITY USING INDEX monitor_resample_failures_replica_identity;
CREATE UNIQUE INDEX run_platforms_replica_identity
  ON geo.run_platforms (run_id, platform, tenant_id);
ALTER TABLE geo.run_platforms REPLICA IDENTITY USING INDEX run_platforms_replica_identity;
CREATE UNIQUE INDEX brand_metrics_replica_identity ON analytics.brand_metrics
  (run_id, channel, region, mode, question_revision, brand, tenant_id);
ALTER TABLE analytics.brand_metrics REPLICA IDENTITY USING INDEX brand_metrics_replica_identity;
CREATE UNIQUE INDEX channel_brand_metrics_replica_identity
  ON analytics.channel_brand_metrics (run_id, channel, brand, tenant_id);
ALTER TABLE analytics.channel_brand_metrics
  REPLICA IDENTITY USING INDEX channel_brand_metrics_replica_identity;
CREATE UNIQUE INDEX brand_day_changes_replica_identity ON analytics.brand_day_changes
  (monitor_id, scheduled_for, comparison, channel, brand, tenant_id);
ALTER TABLE analytics.brand_day_changes
  REPLICA IDENTITY USING INDEX brand_day_changes_replica_identity;
CREATE UNIQUE INDEX brand_day_trends_replica_identity
  ON analytics.brand_day_trends (monitor_id, scheduled_for, channel, brand, tenant_id);
ALTER TABLE analytics.brand_day_trends
  REPLICA IDENTITY USING INDEX brand_day_trends_replica_identity;

-- The publications' row filters name the tenants (`tenant_id = 'acme'`): on the primary, every
-- login could read them (pg_publication_rel.prqual, pg_publication_tables.rowfilter, and the
-- function behind that view), i.e. the customer list. Kept for superusers (the operator).
REVOKE SELECT ON pg_catalog.pg_publication_rel, pg_catalog.pg_publication_tables FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pg_catalog.pg_get_publication_tables FROM PUBLIC;
DO $$
BEGIN
  IF has_table_privilege('public', 'pg_catalog.pg_publication_rel', 'SELECT')
     OR has_table_privilege('public', 'pg_catalog.pg_publication_tables', 'SELECT') THEN
    RAISE EXCEPTION 'migration 0058 needs a superuser: the publications'' row filters (which name '
                    'tenants) are still readable by PUBLIC (run it as postgres, then go on as '
                    'geo_migrator)';
  END IF;
END $$;
