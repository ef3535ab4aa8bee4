-- A tenant's own alerts (issue 37), routed to the recipients that tenant registered (geo.alert_recipients),
-- never to another tenant's. Each query returns one row per incident with the tenant (and the
-- monitor where there is one) that owns it, and the run it links to.

-- name: recipients
SELECT recipient_id, tenant_id, monitor_id, channel, target, kinds, created_at
FROM geo.alert_recipients
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY tenant_id, monitor_id NULLS FIRST, recipient_id;

-- name: add_recipient
INSERT INTO geo.alert_recipients (tenant_id, monitor_id, channel, target, kinds)
VALUES (%(tenant_id)s, %(monitor_id)s, %(channel)s, %(target)s, %(kinds)s)
ON CONFLICT (tenant_id, monitor_id, channel, target) DO UPDATE SET kinds = EXCLUDED.kinds
RETURNING recipient_id;

-- name: remove_recipient
DELETE FROM geo.alert_recipients
WHERE recipient_id = %(recipient_id)s AND tenant_id = %(tenant_id)s
RETURNING recipient_id;

-- name: resample_failures
-- Days whose re-sample made no run (and still has none), of recent days.
SELECT f.tenant_id, f.monitor_id, f.day, f.reason_kind, f.reason, f.tries, f.dagster_run_id
FROM geo.monitor_resample_failures f
WHERE f.day >= current_date - %(recent_days)s
  AND NOT EXISTS (SELECT 1 FROM geo.runs r
                   WHERE r.monitor_id = f.monitor_id AND r.scheduled_for = f.day)
ORDER BY f.day, f.monitor_id
LIMIT 200;

-- name: mention_changes
-- THE change flag of analytics.brand_changes (question-clustered test, Benjamini-Hochberg across
-- the day's family): flagged rows only, with the tenant, and the day's interval and runs from
-- analytics.brand_trends (as alerts.flagged_mention_changes, for the operator).
SELECT c.tenant_id, c.monitor_id, c.channel, c.brand, c.is_target, c.scheduled_for,
       c.comparison, c.prev_from, c.prev_to, c.n, c.mentions, c.mention_rate, c.prev_n,
       c.prev_mentions, c.prev_mention_rate, c.rate_change, c.questions, c.p_value, c.q_value,
       c.fdr_q, c.family_size, t.run_ids, t.n_effective, t.mention_rate_lower,
       t.mention_rate_upper
FROM analytics.brand_changes c
LEFT JOIN analytics.brand_trends t
  ON t.monitor_id = c.monitor_id AND t.channel = c.channel AND t.brand = c.brand
 AND t.scheduled_for = c.scheduled_for
WHERE c.flagged
  AND c.scheduled_for >= current_date - %(recent_days)s
ORDER BY c.scheduled_for, c.monitor_id, c.channel, c.brand, c.comparison
LIMIT 200;

-- name: reconciliation_differences
-- A tenant's runs whose charges and fee statements disagree beyond what is explained;
-- %(explained)s is THE predicate, geo_pipeline.domain.billing.EXPLAINED.
SELECT r.tenant_id, r.monitor_id, l.run_id, l.currency,
       round(sum(coalesce((l.detail->>'cost_exact_minor')::numeric, l.theirs_minor)
                 - l.ours_minor))::bigint AS difference_minor, count(*) AS lines
FROM geo.reconciliation_lines l
JOIN geo.runs r ON r.run_id = l.run_id
WHERE NOT (l.classification = ANY(%(explained)s::text[]))
  AND r.created_at > now() - make_interval(days => %(recent_days)s)
GROUP BY r.tenant_id, r.monitor_id, l.run_id, l.currency
HAVING round(sum(coalesce((l.detail->>'cost_exact_minor')::numeric, l.theirs_minor)
                 - l.ours_minor)) <> 0
ORDER BY l.run_id, l.currency
LIMIT 200;

-- name: stuck_partitions
-- A tenant's partitions (run x channel) past their publish deadline plus the grace, unpublished
-- (the operator's alerts.stuck_partitions, with the tenant and monitor).
SELECT r.tenant_id, r.monitor_id, s.run_id, s.channel, d.publish_deadline_at,
       count(*) FILTER (WHERE s.collection_state IN ('queued', 'running')) AS open_samples,
       count(*) AS samples
FROM geo.samples s
JOIN geo.runs r ON r.run_id = s.run_id
JOIN geo.run_publish_deadlines d ON d.run_id = s.run_id
WHERE r.created_at > now() - make_interval(days => %(recent_days)s)
  AND r.confirmed_at IS NOT NULL
  AND r.cancel_requested_at IS NULL
  AND d.publish_deadline_at < now() - make_interval(secs => %(grace_s)s)
  AND NOT EXISTS (SELECT 1 FROM geo.partition_publications p
                   WHERE p.run_id = s.run_id AND p.channel = s.channel)
GROUP BY r.tenant_id, r.monitor_id, s.run_id, s.channel, d.publish_deadline_at
ORDER BY d.publish_deadline_at, s.run_id, s.channel
LIMIT 200;

-- name: delivered
SELECT alert_key, recipient_id FROM geo.alert_deliveries WHERE alert_key = ANY(%(keys)s);

-- name: record_delivery
INSERT INTO geo.alert_deliveries (alert_key, recipient_id, tenant_id, kind, run_id, summary)
VALUES (%(alert_key)s, %(recipient_id)s, %(tenant_id)s, %(kind)s, %(run_id)s, %(summary)s)
ON CONFLICT DO NOTHING;

-- name: tenant_exists
SELECT 1 AS found FROM geo.tenants WHERE tenant_id = %(tenant_id)s;
