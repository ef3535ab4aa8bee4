-- Billing: the append-only ledger, balances and reconciliation (R15, R23, R24).

-- name: upsert_tenant
-- A deposit may arrive before the tenant's first run; the tenant's currency is the ledger's.
INSERT INTO geo.tenants (tenant_id, name, currency)
VALUES (%(tenant_id)s, %(tenant_id)s, %(currency)s)
ON CONFLICT (tenant_id) DO NOTHING;

-- name: get_tenant
SELECT tenant_id, currency FROM geo.tenants WHERE tenant_id = %(tenant_id)s;

-- name: lock_tenant
-- Serialises reservations of one tenant, so two runs cannot both spend the same available money.
SELECT pg_advisory_xact_lock(hashtext('geo.billing.tenant:' || %(tenant_id)s));

-- name: insert_entry
-- Idempotent by key: a replay finds the existing entry and posts nothing (R24).
INSERT INTO geo.ledger_entries (tenant_id, kind, amount_minor, currency, run_id, sample_id,
                                attempt_no, upstream_id, price_version, idempotency_key,
                                details, adjusts)
VALUES (%(tenant_id)s, %(kind)s, %(amount_minor)s, %(currency)s, %(run_id)s, %(sample_id)s,
        %(attempt_no)s, %(upstream_id)s, %(price_version)s, %(idempotency_key)s,
        %(details)s, %(adjusts)s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING entry_id;

-- name: insert_entries
-- insert_entry for a batch, in one statement (the completion batches of the execution core):
-- entries are inserted in the order given; replays (existing keys) post nothing (R24).
INSERT INTO geo.ledger_entries (tenant_id, kind, amount_minor, currency, run_id, sample_id,
                                attempt_no, upstream_id, price_version, idempotency_key,
                                details, adjusts)
SELECT e.tenant_id, e.kind, e.amount_minor, e.currency, e.run_id, e.sample_id, e.attempt_no,
       e.upstream_id, e.price_version, e.idempotency_key, e.details::jsonb, e.adjusts
FROM unnest(%(tenant_id)s::text[], %(kind)s::text[], %(amount_minor)s::bigint[],
            %(currency)s::text[], %(run_id)s::text[], %(sample_id)s::text[],
            %(attempt_no)s::int[], %(upstream_id)s::text[], %(price_version)s::text[],
            %(idempotency_key)s::text[], %(details)s::text[], %(adjusts)s::text[])
  WITH ORDINALITY AS e(tenant_id, kind, amount_minor, currency, run_id, sample_id, attempt_no,
                       upstream_id, price_version, idempotency_key, details, adjusts, ord)
ORDER BY e.ord
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key, entry_id;

-- name: entry_by_key
SELECT entry_id, tenant_id, kind, amount_minor, currency, run_id, sample_id, attempt_no,
       upstream_id, adjusts, details
FROM geo.ledger_entries WHERE idempotency_key = %(idempotency_key)s;

-- name: tenant_balance
-- The same sums as the geo.account_balances view, but the run-linked movements come from the
-- maintained run accounts (one row per run, kept equal to the entries by the ledger trigger and
-- checked by account_drift), so a reservation check costs O(runs), not O(every charge ever).
WITH per_run AS (
  SELECT coalesce(sum(reserved_minor), 0) AS reserved, coalesce(sum(overrun_minor), 0) AS overrun,
         coalesce(sum(charged_minor), 0) AS charged, coalesce(sum(released_minor), 0) AS released,
         coalesce(sum(refunded_minor), 0) AS refunded
  FROM geo.run_accounts WHERE tenant_id = %(tenant_id)s AND currency = %(currency)s
), outside AS (
  -- deposits and 'available' adjustments (with or without a run) are not in the run accounts
  SELECT coalesce(sum(amount_minor) FILTER (WHERE kind = 'deposit'), 0) AS deposited,
         coalesce(sum(amount_minor) FILTER (WHERE kind = 'adjustment' AND adjusts = 'available'),
                  0) AS adjusted
  FROM geo.ledger_entries
  WHERE tenant_id = %(tenant_id)s AND currency = %(currency)s
    AND kind IN ('deposit', 'adjustment')
)
SELECT %(tenant_id)s::text AS tenant_id, %(currency)s::text AS currency,
       o.deposited::bigint AS deposited_minor,
       (o.deposited - r.reserved + r.released + r.refunded + o.adjusted - r.overrun)::bigint
         AS available_minor,
       (r.reserved - r.charged - r.released + r.overrun)::bigint AS reserved_minor,
       (r.charged - r.refunded)::bigint AS spent_minor
FROM per_run r, outside o;

-- name: tenant_balance_from_entries
-- The plain definition over every entry (the view): what the fast query must always equal.
SELECT tenant_id, currency, deposited_minor, available_minor, reserved_minor, spent_minor
FROM geo.account_balances
WHERE tenant_id = %(tenant_id)s AND currency = %(currency)s;

-- name: tenant_entry_sums
-- Every kind's plain sum, for recomputing balances outside the view (the property tests).
SELECT kind, coalesce(adjusts, '') AS adjusts, sum(amount_minor)::bigint AS total_minor,
       count(*) AS entries
FROM geo.ledger_entries WHERE tenant_id = %(tenant_id)s
GROUP BY kind, adjusts ORDER BY kind, adjusts;

-- name: run_for_billing
SELECT r.run_id, r.tenant_id, r.quote_id, r.confirmed_at, r.cancel_requested_at, r.closed_at,
       q.currency, q.estimated_max_minor, q.price_versions
FROM geo.runs r JOIN geo.quote_snapshots q USING (quote_id)
WHERE r.run_id = %(run_id)s;

-- name: lock_run_account
-- The row lock serialises every money movement of one run (charges of many workers, close,
-- refunds), so "what is left of the reservation" is exact when a charge is decided.
SELECT run_id, tenant_id, currency, estimated_minor, reserved_minor, overrun_minor,
       charged_minor, released_minor, refunded_minor,
       reserved_minor + overrun_minor - charged_minor - released_minor AS reservation_left_minor
FROM geo.run_accounts WHERE run_id = %(run_id)s
FOR UPDATE;

-- name: insert_fee_rule
INSERT INTO geo.run_fee_rules (run_id, platform, price_version, retry_fee_rule)
VALUES (%(run_id)s, %(platform)s, %(price_version)s, %(retry_fee_rule)s)
ON CONFLICT (run_id, platform) DO NOTHING;

-- name: run_fee_rules
SELECT platform, price_version, retry_fee_rule FROM geo.run_fee_rules
WHERE run_id = %(run_id)s ORDER BY platform;

-- name: set_confirmed
UPDATE geo.runs SET confirmed_at = now()
WHERE run_id = %(run_id)s AND confirmed_at IS NULL;

-- name: set_closed
UPDATE geo.runs SET closed_at = now()
WHERE run_id = %(run_id)s AND closed_at IS NULL
RETURNING closed_at;

-- name: run_activity
-- Samples that may still cost money: not terminal, or accepted-unknown upstream (R12, R24).
-- An uncertain sample is counted apart: it waits for verification (a lookup, a re-send under
-- its key, or an operator) and does not block a close; its charge, if any, comes later as a
-- reservation adjustment flagged for review.
SELECT count(*) FILTER (WHERE collection_state IN ('queued', 'running')
                          AND submission_state <> 'uncertain') AS active,
       count(*) FILTER (WHERE submission_state = 'uncertain') AS uncertain
FROM geo.samples WHERE run_id = %(run_id)s;

-- name: upstream_money
SELECT coalesce(sum(amount_minor) FILTER (WHERE kind = 'charge'), 0)::bigint AS charged_minor,
       coalesce(sum(amount_minor) FILTER (WHERE kind = 'refund'), 0)::bigint AS refunded_minor,
       min(sample_id) AS sample_id, min(attempt_no) AS attempt_no
FROM geo.ledger_entries
WHERE run_id = %(run_id)s AND upstream_id = %(upstream_id)s AND kind IN ('charge', 'refund');

-- name: run_entries
SELECT entry_id, kind, amount_minor, currency, sample_id, attempt_no, upstream_id,
       price_version, idempotency_key, adjusts, details, created_at
FROM geo.ledger_entries WHERE run_id = %(run_id)s ORDER BY entry_id;

-- name: run_billing
SELECT run_id, tenant_id, currency, estimated_minor, reserved_total_minor, overrun_minor,
       charged_minor, released_minor, refunded_minor, reservation_left_minor
FROM geo.run_billing WHERE run_id = %(run_id)s;

-- name: account_drift
-- The check behind the maintained run accounts: recompute every run's sums from the entries and
-- return the runs where the summary disagrees (expected: none).
SELECT coalesce(a.run_id, b.run_id) AS run_id,
       a.reserved_minor AS summary_reserved, b.reserved_total_minor AS entries_reserved,
       a.charged_minor AS summary_charged, b.charged_minor AS entries_charged,
       a.released_minor AS summary_released, b.released_minor AS entries_released,
       a.refunded_minor AS summary_refunded, b.refunded_minor AS entries_refunded,
       a.overrun_minor AS summary_overrun, b.overrun_minor AS entries_overrun
FROM geo.run_accounts a FULL JOIN geo.run_billing b USING (run_id)
WHERE (%(run_id)s::text IS NULL OR coalesce(a.run_id, b.run_id) = %(run_id)s)
  AND (a.run_id IS NULL OR b.run_id IS NULL
       OR a.reserved_minor <> b.reserved_total_minor OR a.charged_minor <> b.charged_minor
       OR a.released_minor <> b.released_minor OR a.refunded_minor <> b.refunded_minor
       OR a.overrun_minor <> b.overrun_minor OR a.estimated_minor <> b.estimated_minor);

-- name: entries_for_review
-- Adjustments that moved money into a run's reservation because a charge exceeded it.
SELECT entry_id, tenant_id, run_id, sample_id, attempt_no, upstream_id, amount_minor, currency,
       details, created_at
FROM geo.ledger_entries
WHERE kind = 'adjustment' AND adjusts = 'reservation'
  AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
ORDER BY entry_id;

-- ---------------------------------------------------------------- reconciliation (R23, R24)

-- name: insert_statement
-- Idempotent by content: the same statement imported twice is one statement.
INSERT INTO geo.fee_statements (platform, statement_date, currency, content_sha256)
VALUES (%(platform)s, %(statement_date)s, %(currency)s, %(content_sha256)s)
ON CONFLICT (platform, statement_date, content_sha256) DO NOTHING
RETURNING statement_id;

-- name: statement_by_content
SELECT statement_id FROM geo.fee_statements
WHERE platform = %(platform)s AND statement_date = %(statement_date)s
  AND content_sha256 = %(content_sha256)s;

-- name: insert_statement_line
INSERT INTO geo.fee_statement_lines (statement_id, line_no, upstream_id, item, amount_minor,
                                     currency, price_version, charged_at)
VALUES (%(statement_id)s, %(line_no)s, %(upstream_id)s, %(item)s, %(amount_minor)s,
        %(currency)s, %(price_version)s, %(charged_at)s);

-- name: run_charges
-- Our side: every charge decision of the run (zero = free by the platform's rule), with refunds.
SELECT e.upstream_id, e.sample_id, e.attempt_no, e.amount_minor, e.currency, e.details,
       (e.created_at AT TIME ZONE 'UTC')::date AS charged_on,
       coalesce(e.details->>'platform', s.platform) AS platform,
       coalesce((SELECT sum(r.amount_minor) FROM geo.ledger_entries r
                  WHERE r.kind = 'refund' AND r.run_id = e.run_id
                    AND r.upstream_id = e.upstream_id), 0)::bigint AS refunded_minor
FROM geo.ledger_entries e LEFT JOIN geo.samples s USING (sample_id)
WHERE e.run_id = %(run_id)s AND e.kind = 'charge' AND e.upstream_id IS NOT NULL
ORDER BY e.entry_id;

-- name: run_upstream_tasks
-- Every upstream task the run is known to have (accepted or maybe accepted), with its attempt's
-- outcome when the execution core recorded one.
SELECT u.upstream_id, u.platform, u.sample_id, u.attempt_no, u.state,
       (coalesce(u.accepted_at, u.sent_at) AT TIME ZONE 'UTC')::date AS accepted_on,
       a.outcome
FROM geo.upstream_requests u
JOIN geo.samples s USING (sample_id)
LEFT JOIN geo.attempts a ON a.sample_id = u.sample_id AND a.attempt_no = u.attempt_no
WHERE s.run_id = %(run_id)s AND u.upstream_id IS NOT NULL;

-- name: statement_lines_for
-- Their side: lines of the latest imported statement of each (platform, day) for these tasks.
-- A re-issued statement (new content for the same day) supersedes the earlier one.
WITH latest AS (
  SELECT DISTINCT ON (platform, statement_date) statement_id, platform, statement_date
  FROM geo.fee_statements
  WHERE platform = ANY(%(platforms)s::text[])
  ORDER BY platform, statement_date, imported_at DESC, statement_id DESC
)
SELECT latest.platform, latest.statement_date, l.upstream_id, l.item, l.amount_minor,
       l.currency, l.price_version
FROM geo.fee_statement_lines l JOIN latest USING (statement_id)
WHERE l.upstream_id = ANY(%(upstream_ids)s::text[])
ORDER BY latest.statement_date, l.statement_id, l.line_no;

-- name: imported_statement_days
SELECT DISTINCT platform, statement_date FROM geo.fee_statements
WHERE platform = ANY(%(platforms)s::text[]);

-- name: delete_reconciliation
DELETE FROM geo.reconciliation_lines WHERE run_id = %(run_id)s;

-- name: delete_day_total_lines
-- Another run's lines of one vendor day total (its share and, on the day's first run, the part
-- that is not ours), to be rewritten with the day's new apportionment: only a run that was
-- reconciled has them, and only such a run gets them back.
DELETE FROM geo.reconciliation_lines
WHERE run_id = %(run_id)s AND (upstream_id = %(upstream_id)s
                               OR upstream_id = %(upstream_id)s || ':not-ours')
RETURNING upstream_id;

-- name: insert_reconciliation_lines
-- A run's reconciliation lines in one statement (issue 39: a 100,000-charge run is one insert,
-- not 100,000), in the order given (ORDER BY the arrays' ordinality).
INSERT INTO geo.reconciliation_lines (run_id, upstream_id, sample_id, attempt_no, platform,
                                      classification, ours_minor, theirs_minor, currency,
                                      fee_class, detail)
SELECT %(run_id)s, l.upstream_id, l.sample_id, l.attempt_no, l.platform, l.classification,
       l.ours_minor, l.theirs_minor, l.currency, l.fee_class, l.detail
FROM unnest(%(upstream_ids)s::text[], %(sample_ids)s::text[], %(attempt_nos)s::int[],
            %(platforms)s::text[], %(classifications)s::text[], %(ours_minor)s::bigint[],
            %(theirs_minor)s::bigint[], %(currencies)s::text[], %(fee_classes)s::text[],
            %(details)s::jsonb[])
  WITH ORDINALITY AS l(upstream_id, sample_id, attempt_no, platform, classification, ours_minor,
                       theirs_minor, currency, fee_class, detail, ord)
ORDER BY l.ord;

-- name: reconciliation_lines
SELECT upstream_id, sample_id, attempt_no, platform, classification, fee_class, ours_minor,
       theirs_minor, difference_minor, currency, detail, reconciled_at
FROM geo.reconciliation_lines WHERE run_id = %(run_id)s
ORDER BY classification, upstream_id;

-- name: charges_context
-- The context of a batch of charges of one run (post_charges), read after the run account is
-- locked: which keys exist already, the run's fee rules, its quote lines, and which of the
-- samples already carry a positive charge.
SELECT
  (SELECT coalesce(array_agg(idempotency_key), '{}') FROM geo.ledger_entries
    WHERE idempotency_key = ANY(%(keys)s::text[])) AS existing_keys,
  (SELECT coalesce(jsonb_object_agg(platform, retry_fee_rule), '{}') FROM geo.run_fee_rules
    WHERE run_id = %(run_id)s) AS fee_rules,
  (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'platform', ql.platform, 'mode', ql.mode, 'item', ql.item,
            'unit_price_minor', ql.unit_price_minor, 'price_version', ql.price_version)), '[]')
     FROM geo.runs r JOIN geo.quote_lines ql USING (quote_id)
    WHERE r.run_id = %(run_id)s) AS quote_lines,
  (SELECT coalesce(array_agg(DISTINCT e.sample_id), '{}') FROM geo.ledger_entries e
    WHERE e.sample_id = ANY(%(sample_ids)s::text[]) AND e.kind = 'charge'
      AND e.amount_minor > 0) AS charged_samples;

-- name: unattributed_statement_lines
-- Lines of the latest statements that name an upstream task no run of ours knows (neither an
-- upstream request nor a charge): billed to us for nothing we sent, per platform and day.
WITH latest AS (
  SELECT DISTINCT ON (platform, statement_date) statement_id, platform, statement_date
  FROM geo.fee_statements
  WHERE (%(platform)s::text IS NULL OR platform = %(platform)s)
    AND (%(statement_date)s::date IS NULL OR statement_date = %(statement_date)s)
  ORDER BY platform, statement_date, imported_at DESC, statement_id DESC
)
SELECT latest.platform, latest.statement_date, l.upstream_id, l.item, l.amount_minor, l.currency
FROM geo.fee_statement_lines l JOIN latest USING (statement_id)
WHERE l.upstream_id NOT LIKE 'day-total:%%'  -- a vendor's day total names no single task
  AND NOT EXISTS (SELECT 1 FROM geo.upstream_requests u
                   WHERE u.platform = latest.platform AND u.upstream_id = l.upstream_id)
  AND NOT EXISTS (SELECT 1 FROM geo.ledger_entries e
                   WHERE e.upstream_id = l.upstream_id AND e.kind = 'charge')
ORDER BY latest.platform, latest.statement_date, l.upstream_id, l.item;
