-- Monitors as a product (issue 37): the lifecycle, its history, the cadence the schedules read and
-- the failed re-samples. Every state change is a guarded UPDATE whose WHERE names the states it
-- may leave (design principle 2), followed by an event row in the same transaction.

-- name: insert_monitor
-- A new monitor; nothing when the id exists (whatever its state: a retired id is never reused).
INSERT INTO geo.monitors (monitor_id, tenant_id, config, cron, timezone, revision)
VALUES (%(monitor_id)s, %(tenant_id)s, %(config)s, %(cron)s, %(timezone)s, 1)
ON CONFLICT (monitor_id) DO NOTHING
RETURNING monitor_id;

-- name: get_monitor
SELECT monitor_id, tenant_id, config, active, cron, timezone, paused_at, retired_at, revision,
       created_at, updated_at,
       CASE WHEN retired_at IS NOT NULL THEN 'retired'
            WHEN active THEN 'active' ELSE 'paused' END AS status
FROM geo.monitors WHERE monitor_id = %(monitor_id)s;

-- name: update_config
-- A new revision of an active or paused monitor, used from its next run on (R2: runs already
-- created keep their frozen snapshot).
UPDATE geo.monitors
   SET config = %(config)s, cron = %(cron)s, timezone = %(timezone)s,
       revision = revision + 1, updated_at = now()
 WHERE monitor_id = %(monitor_id)s AND retired_at IS NULL
RETURNING revision;

-- name: pause
UPDATE geo.monitors SET active = false, paused_at = now(), updated_at = now()
 WHERE monitor_id = %(monitor_id)s AND active AND retired_at IS NULL
RETURNING revision;

-- name: resume
UPDATE geo.monitors SET active = true, paused_at = NULL, updated_at = now()
 WHERE monitor_id = %(monitor_id)s AND NOT active AND retired_at IS NULL
RETURNING revision;

-- name: retire
UPDATE geo.monitors SET active = false, retired_at = now(), updated_at = now()
 WHERE monitor_id = %(monitor_id)s AND retired_at IS NULL
RETURNING revision;

-- name: insert_event
INSERT INTO geo.monitor_events
  (monitor_id, tenant_id, event, revision, config, cron, timezone, actor, reason)
VALUES (%(monitor_id)s, %(tenant_id)s, %(event)s, %(revision)s, %(config)s, %(cron)s,
        %(timezone)s, %(actor)s, %(reason)s);

-- name: events
SELECT event_id, event, revision, cron, timezone, actor, reason, created_at,
       config IS NOT NULL AS has_config
FROM geo.monitor_events WHERE monitor_id = %(monitor_id)s ORDER BY event_id;

-- name: list
-- Every monitor (of one tenant when given) with its last run and its open failed re-samples
-- (a failure stops being open once the day's run exists).
SELECT m.monitor_id, m.tenant_id, m.cron, m.timezone, m.revision, m.created_at,
       CASE WHEN m.retired_at IS NOT NULL THEN 'retired'
            WHEN m.active THEN 'active' ELSE 'paused' END AS status,
       (SELECT max(r.scheduled_for) FROM geo.runs r WHERE r.monitor_id = m.monitor_id) AS last_day,
       (SELECT count(*) FROM geo.monitor_resample_failures f
         WHERE f.monitor_id = m.monitor_id
           AND NOT EXISTS (SELECT 1 FROM geo.runs r
                            WHERE r.monitor_id = f.monitor_id AND r.scheduled_for = f.day))
         AS open_failures
FROM geo.monitors m
WHERE (%(tenant_id)s::text IS NULL OR m.tenant_id = %(tenant_id)s)
  AND (%(all)s OR m.retired_at IS NULL)
ORDER BY m.tenant_id, m.monitor_id;

-- name: runs
-- A monitor's runs, newest first, each with the snapshot it executes (R2).
SELECT r.run_id, r.scheduled_for, r.snapshot_id, r.sample_count, r.created_at,
       r.cancel_requested_at, r.closed_at
FROM geo.runs r WHERE r.monitor_id = %(monitor_id)s
ORDER BY r.scheduled_for DESC NULLS LAST, r.created_at DESC
LIMIT %(limit)s;

-- name: failures
SELECT f.day, f.reason_kind, f.reason, f.tries, f.first_failed_at, f.last_failed_at,
       f.dagster_run_id,
       (SELECT r.run_id FROM geo.runs r
         WHERE r.monitor_id = f.monitor_id AND r.scheduled_for = f.day) AS later_run_id
FROM geo.monitor_resample_failures f WHERE f.monitor_id = %(monitor_id)s
ORDER BY f.day DESC
LIMIT %(limit)s;

-- name: record_failure
-- One row per (monitor, day): a retry that fails again updates the reason and counts the try.
INSERT INTO geo.monitor_resample_failures AS f
  (monitor_id, tenant_id, day, reason_kind, reason, dagster_run_id)
VALUES (%(monitor_id)s, %(tenant_id)s, %(day)s, %(reason_kind)s, %(reason)s, %(dagster_run_id)s)
ON CONFLICT (monitor_id, day) DO UPDATE
   SET reason_kind = EXCLUDED.reason_kind, reason = EXCLUDED.reason,
       dagster_run_id = EXCLUDED.dagster_run_id, tries = f.tries + 1, last_failed_at = now();

-- name: default_cadence
-- Active monitors without a cadence of their own: the daily_resampling schedule's (GEO_RESAMPLE_AT).
SELECT monitor_id, tenant_id, config FROM geo.monitors
WHERE active AND cron IS NULL ORDER BY monitor_id;

-- name: own_cadence
-- Active monitors with a cadence of their own: the monitor_resampling schedule's.
SELECT monitor_id, tenant_id, cron, timezone FROM geo.monitors
WHERE active AND cron IS NOT NULL ORDER BY monitor_id;
