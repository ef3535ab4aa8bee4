-- Monitors as a product (issue 37): a lifecycle with a history, a cadence per monitor, failed
-- re-samples recorded with their reason, and alert recipients per tenant.

-- The lifecycle: active (re-sampled on its cadence) -> paused (active = false, paused_at set)
-- -> active again; retired is final (active = false, retired_at set; the id is never reused, its
-- runs stay). cron / timezone: the monitor's own cadence; NULL = the deployment's default
-- (GEO_RESAMPLE_AT / GEO_RESAMPLE_TZ). revision: the config revision the next run freezes (R2:
-- a run executes its snapshot; an update changes the monitor from the next run on).
ALTER TABLE geo.monitors
  ADD COLUMN cron text CHECK (cron IS NULL OR length(cron) <= 100),
  ADD COLUMN timezone text CHECK (timezone IS NULL OR length(timezone) <= 64),
  ADD COLUMN paused_at timestamptz,
  ADD COLUMN retired_at timestamptz,
  ADD COLUMN revision integer NOT NULL DEFAULT 1 CHECK (revision >= 1),
  ADD CONSTRAINT monitors_retired_is_inactive CHECK (retired_at IS NULL OR NOT active),
  ADD CONSTRAINT monitors_cadence_whole CHECK ((cron IS NULL) = (timezone IS NULL)),
  -- The key other tables use to say "a monitor of this tenant" (never another tenant's).
  ADD CONSTRAINT monitors_monitor_tenant_key UNIQUE (monitor_id, tenant_id);

-- Append-only history of a monitor: who did what, when, why; for 'created' and 'updated' the
-- config and cadence of that revision (each run also keeps its own frozen snapshot, R2).
CREATE TABLE geo.monitor_events (
  event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  monitor_id  text NOT NULL,
  tenant_id   text NOT NULL,
  event       text NOT NULL CHECK (event IN ('created', 'updated', 'paused', 'resumed', 'retired')),
  revision    integer NOT NULL,
  config      jsonb,
  cron        text,
  timezone    text,
  actor       text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
  reason      text NOT NULL DEFAULT '' CHECK (length(reason) <= 2000),
  created_at  timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (monitor_id, tenant_id) REFERENCES geo.monitors (monitor_id, tenant_id),
  CHECK ((event IN ('created', 'updated')) = (config IS NOT NULL))
);
CREATE INDEX monitor_events_monitor ON geo.monitor_events (monitor_id, event_id);

-- The monitors that existed before: their current config is revision 1.
INSERT INTO geo.monitor_events (monitor_id, tenant_id, event, revision, config, actor, reason)
SELECT monitor_id, tenant_id, 'created', 1, config, 'migration 0046', 'existing monitor'
FROM geo.monitors;

-- A day's re-sample that could not create its run: the reason, what kind of reason, and the
-- Dagster run that tried. One row per (monitor, day), updated by a retry; it stops counting as
-- open (monitors show, the tenant's alert) once the day's run exists.
CREATE TABLE geo.monitor_resample_failures (
  monitor_id      text NOT NULL,
  tenant_id       text NOT NULL,
  day             date NOT NULL,
  reason_kind     text NOT NULL CHECK (reason_kind IN (
                    'insufficient_balance', 'invalid_config', 'disabled_engine', 'quote',
                    'conflict')),
  reason          text NOT NULL,
  dagster_run_id  text,
  tries           integer NOT NULL DEFAULT 1 CHECK (tries >= 1),
  first_failed_at timestamptz NOT NULL DEFAULT now(),
  last_failed_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (monitor_id, day),
  FOREIGN KEY (monitor_id, tenant_id) REFERENCES geo.monitors (monitor_id, tenant_id)
);

-- Who hears about a tenant's alerts: per tenant (monitor_id NULL) or per monitor of that tenant
-- (the composite key makes another tenant's monitor impossible). A webhook's URL is a secret
-- (D2): the row names the environment variable that holds it, never the URL.
CREATE TABLE geo.alert_recipients (
  recipient_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id    text NOT NULL REFERENCES geo.tenants,
  monitor_id   text,
  channel      text NOT NULL CHECK (channel IN ('webhook', 'email')),
  target       text NOT NULL CHECK (
                 (channel = 'webhook' AND target ~ '^GEO_ALERT_WEBHOOK_[A-Z0-9_]{1,64}$')
                 OR (channel = 'email' AND target ~ '^[^@\s,<>]{1,64}@[^@\s,<>]{1,255}$')),
  kinds        text[] NOT NULL
               DEFAULT '{mention_change,resample_failed,reconciliation,stuck_partition}'
               CHECK (kinds <@ '{mention_change,resample_failed,reconciliation,stuck_partition}'::text[]
                      AND cardinality(kinds) >= 1),
  created_at   timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (monitor_id, tenant_id) REFERENCES geo.monitors (monitor_id, tenant_id),
  UNIQUE NULLS NOT DISTINCT (tenant_id, monitor_id, channel, target)
);

-- What each recipient was sent: one row per (alert, recipient), written after the delivery
-- worked (a crash in between re-sends once: at-least-once, never silently lost). A delivery
-- that failed writes nothing and is tried again on the next tick, for that recipient only.
CREATE TABLE geo.alert_deliveries (
  alert_key    text NOT NULL,
  recipient_id bigint NOT NULL REFERENCES geo.alert_recipients ON DELETE CASCADE,
  tenant_id    text NOT NULL REFERENCES geo.tenants,
  kind         text NOT NULL,
  run_id       text,
  summary      text NOT NULL,
  delivered_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (alert_key, recipient_id)
);

ALTER TABLE geo.monitor_events OWNER TO geo_owner;
ALTER TABLE geo.monitor_resample_failures OWNER TO geo_owner;
ALTER TABLE geo.alert_recipients OWNER TO geo_owner;
ALTER TABLE geo.alert_deliveries OWNER TO geo_owner;

GRANT SELECT, INSERT ON geo.monitor_events, geo.alert_deliveries TO geo_service;
GRANT SELECT, INSERT, UPDATE ON geo.monitor_resample_failures TO geo_service;
GRANT SELECT, INSERT, DELETE ON geo.alert_recipients TO geo_service;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA geo TO geo_service;

-- Analysts read their own tenant's monitor history and failed re-samples; recipients and
-- deliveries are the operator's business (addresses, variable names).
GRANT SELECT ON geo.monitor_events, geo.monitor_resample_failures TO geo_analyst;
ALTER TABLE geo.monitor_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE geo.monitor_resample_failures ENABLE ROW LEVEL SECURITY;
ALTER TABLE geo.alert_recipients ENABLE ROW LEVEL SECURITY;
ALTER TABLE geo.alert_deliveries ENABLE ROW LEVEL SECURITY;
CREATE POLICY analyst_tenant ON geo.monitor_events FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.monitor_resample_failures FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
