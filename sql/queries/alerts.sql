-- Conditions the alert sensor watches (docs/operations.md has a runbook section for each). Each
-- query returns one row per open incident with a stable key, so the sensor can tell a new
-- incident from one it has already reported, and report when it clears.

-- name: stuck_partitions
-- Partitions (run x channel) past their publish deadline plus a grace with no publication: the
-- deadline publication should have happened and did not (sensor down, Dagster run failing).
-- Recent runs only; cancelled runs publish nothing on purpose.
SELECT s.run_id, s.channel, d.publish_deadline_at,
       count(*) FILTER (WHERE s.collection_state IN ('queued', 'running')) AS open_samples,
       count(*) AS samples
FROM geo.samples s
JOIN geo.runs r ON r.run_id = s.run_id
JOIN geo.run_publish_deadlines d ON d.run_id = s.run_id
WHERE r.created_at > now() - make_interval(days => %(recent_days)s)
  AND r.confirmed_at IS NOT NULL  -- an unconfirmed run never started: nothing is late
  AND r.cancel_requested_at IS NULL
  AND d.publish_deadline_at < now() - make_interval(secs => %(grace_s)s)
  AND NOT EXISTS (SELECT 1 FROM geo.partition_publications p
                   WHERE p.run_id = s.run_id AND p.channel = s.channel)
GROUP BY s.run_id, s.channel, d.publish_deadline_at
ORDER BY d.publish_deadline_at, s.run_id, s.channel
LIMIT 50;

-- name: open_counts
-- Dead letters whose sample has not settled, and samples whose upstream acceptance is unknown.
SELECT (SELECT count(*) FROM geo.dead_letters d
         WHERE NOT EXISTS (SELECT 1 FROM geo.samples s WHERE s.sample_id = d.sample_id
                            AND s.collection_state IN ('completed', 'failed'))) AS dead_letters,
       (SELECT count(*) FROM geo.samples WHERE submission_state = 'uncertain') AS uncertain;

-- name: reconciliation_differences
-- Runs whose charges and fee statements disagree beyond what is explained. %(explained)s is
-- THE predicate, geo_pipeline.domain.billing.EXPLAINED (summary, check and gauge use it too).
-- absolute_minor (sum of |theirs - ours|) is what the R26 gauge sums: +x and -x never cancel.
-- Exact per-line differences (detail.cost_exact_minor), summed and rounded once (round_minor).
SELECT run_id, currency, round(sum(exact))::bigint AS difference_minor,
       round(sum(abs(exact)))::bigint AS absolute_minor, count(*) AS lines
FROM (SELECT run_id, currency, classification,
             coalesce((detail->>'cost_exact_minor')::numeric, theirs_minor) - ours_minor AS exact
      FROM geo.reconciliation_lines) AS l
WHERE NOT (classification = ANY(%(explained)s::text[]))
GROUP BY run_id, currency
HAVING round(sum(abs(exact))) <> 0
ORDER BY run_id, currency
LIMIT 50;

-- name: flagged_mention_changes
-- Mention-rate changes analytics.brand_changes flags (THE change-flag rule: each question one
-- cluster, Benjamini-Hochberg across the day's brand x channel family at fdr_q), both
-- comparisons, with the day's question-clustered interval and effective n of
-- analytics.brand_trends for the message.
SELECT c.monitor_id, c.channel, c.brand, c.is_target, c.scheduled_for, c.comparison,
       c.prev_from, c.prev_to, c.n, c.mentions, c.mention_rate, c.prev_n, c.prev_mentions,
       c.prev_mention_rate, c.rate_change, c.questions, c.p_value, c.q_value, c.fdr_q,
       c.family_size, t.run_ids, t.n_effective, t.mention_rate_lower, t.mention_rate_upper
FROM analytics.brand_changes c
LEFT JOIN analytics.brand_trends t
  ON t.monitor_id = c.monitor_id AND t.channel = c.channel AND t.brand = c.brand
 AND t.scheduled_for = c.scheduled_for
WHERE c.flagged
  AND c.scheduled_for >= current_date - %(recent_days)s
ORDER BY c.scheduled_for, c.monitor_id, c.channel, c.brand, c.comparison
LIMIT 50;

-- name: accounts_needing_a_person
-- Browser-lane accounts out of the pool until a person acts (issue #32): a captcha or risk
-- page suspended it, or its login expired. One incident per account while it stays so.
SELECT platform, account_id, state, state_reason, state_changed_at
FROM geo.accounts
WHERE state IN ('suspended', 'needs_login')
ORDER BY platform, account_id;

-- name: pages_changed
-- Browser-lane platforms whose page no longer has the controls the selectors name (issue #32):
-- one incident per platform while an account records it (cleared by that account's next
-- successful send).
SELECT platform, min(page_changed_at) AS since, max(page_changed_detail) AS detail,
       array_agg(account_id ORDER BY account_id) AS accounts
FROM geo.accounts
WHERE page_changed_at IS NOT NULL
GROUP BY platform
ORDER BY platform;
