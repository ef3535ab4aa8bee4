-- Reconciliation against vendors' cost APIs (day totals, not requests): migration 0020.

-- name: day_total_lines
-- Day-total lines of the latest imported statement of each (platform, day).
WITH latest AS (
  SELECT DISTINCT ON (platform, statement_date) statement_id, platform, statement_date
  FROM geo.fee_statements
  WHERE platform = ANY(%(platforms)s::text[])
  ORDER BY platform, statement_date, imported_at DESC, statement_id DESC
)
SELECT latest.platform, latest.statement_date, l.item, l.amount_minor, l.currency
FROM geo.fee_statement_lines l JOIN latest USING (statement_id)
WHERE l.upstream_id LIKE 'day-total:%%'
ORDER BY latest.platform, latest.statement_date, l.line_no;

-- name: platform_day_charges
-- Every run's charges (net of refunds) on one platform and UTC day: a vendor's day total
-- covers all of them, whichever run they belong to.
SELECT e.run_id, (sum(e.amount_minor) - coalesce(sum(rf.refunded), 0))::bigint AS charged_minor,
       min(e.currency) AS currency
FROM geo.ledger_entries e
LEFT JOIN LATERAL (
  SELECT sum(r.amount_minor) AS refunded FROM geo.ledger_entries r
  WHERE r.kind = 'refund' AND r.run_id = e.run_id AND r.upstream_id = e.upstream_id
) rf ON true
WHERE e.kind = 'charge' AND e.details->>'platform' = %(platform)s
  AND (e.created_at AT TIME ZONE 'UTC')::date = %(day)s
GROUP BY e.run_id
ORDER BY e.run_id;
