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
-- Every charge (net of refunds) on one platform and UTC day, whichever run it belongs to (a
-- vendor's day total covers all of them), with the usage its attempt recorded and the price
-- version the run's quote froze for the platform: what each answer is expected to cost. With the
-- currency each charge was booked in: a day's charges in two currencies are never added.
SELECT e.run_id, e.upstream_id, e.currency,
       (e.amount_minor - coalesce(rf.refunded, 0))::bigint AS charged_minor,
       a.usage_input_tokens AS input_tokens, a.usage_output_tokens AS output_tokens,
       a.usage_total_tokens AS total_tokens, a.usage_cached_input_tokens AS cached_input_tokens,
       a.usage_reasoning_tokens AS reasoning_tokens,
       a.usage_web_search_requests AS web_search_requests,
       a.usage_search_context AS search_context, a.usage_source AS source,
       (SELECT min(ql.price_version) FROM geo.runs r
          JOIN geo.quote_lines ql ON ql.quote_id = r.quote_id
         WHERE r.run_id = e.run_id AND ql.platform = %(platform)s) AS price_version
FROM geo.ledger_entries e
LEFT JOIN LATERAL (
  SELECT sum(r.amount_minor) AS refunded FROM geo.ledger_entries r
  WHERE r.kind = 'refund' AND r.run_id = e.run_id AND r.upstream_id = e.upstream_id
) rf ON true
LEFT JOIN geo.attempts a ON a.sample_id = e.sample_id AND a.attempt_no = e.attempt_no
WHERE e.kind = 'charge' AND e.details->>'platform' = %(platform)s
  AND (e.created_at AT TIME ZONE 'UTC')::date = %(day)s
ORDER BY e.run_id, e.entry_id;

-- name: record_attempt_usage
-- Request-level usage of many attempts in one statement (migration 0022), written with the end
-- of those attempts in the completion transaction: one array per column, NULL = not reported.
UPDATE geo.attempts a
SET usage_input_tokens = u.input_tokens,
    usage_output_tokens = u.output_tokens,
    usage_total_tokens = u.total_tokens,
    usage_cached_input_tokens = u.cached_input_tokens,
    usage_reasoning_tokens = u.reasoning_tokens,
    usage_web_search_requests = u.web_search_requests,
    usage_search_context = u.search_context,
    usage_source = u.source
FROM unnest(%(ids)s::text[], %(attempt_nos)s::int[], %(input_tokens)s::bigint[],
            %(output_tokens)s::bigint[], %(total_tokens)s::bigint[],
            %(cached_input_tokens)s::bigint[], %(reasoning_tokens)s::bigint[],
            %(web_search_requests)s::int[], %(search_context)s::text[], %(source)s::text[])
  AS u(sample_id, attempt_no, input_tokens, output_tokens, total_tokens, cached_input_tokens,
       reasoning_tokens, web_search_requests, search_context, source)
WHERE a.sample_id = u.sample_id AND a.attempt_no = u.attempt_no;

-- name: run_attempt_usage
-- The recorded usage of every attempt of a run that reached its upstream task, with the
-- price version and mode its charge was quoted with (for reconciliation from usage fields).
SELECT s.platform, u.upstream_id, a.sample_id, a.attempt_no, a.outcome,
       a.usage_input_tokens AS input_tokens, a.usage_output_tokens AS output_tokens,
       a.usage_total_tokens AS total_tokens, a.usage_cached_input_tokens AS cached_input_tokens,
       a.usage_reasoning_tokens AS reasoning_tokens,
       a.usage_web_search_requests AS web_search_requests,
       a.usage_search_context AS search_context, a.usage_source AS source
FROM geo.attempts a
JOIN geo.samples s ON s.sample_id = a.sample_id
JOIN geo.upstream_requests u ON u.sample_id = a.sample_id AND u.attempt_no = a.attempt_no
WHERE s.run_id = %(run_id)s AND u.upstream_id IS NOT NULL
ORDER BY s.platform, u.upstream_id;

-- name: run_quote_versions
-- The price version the run's frozen quote priced each platform with.
SELECT DISTINCT ql.platform, ql.price_version
FROM geo.runs r JOIN geo.quote_lines ql ON ql.quote_id = r.quote_id
WHERE r.run_id = %(run_id)s
ORDER BY ql.platform;
