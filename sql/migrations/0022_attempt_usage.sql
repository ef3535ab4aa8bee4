-- Request-level usage recorded with each attempt (issue 19): what the engine reported with its
-- response (tokens in and out, cache hits, reasoning, searches), written in the same statement
-- batch and transaction as the attempt's end. NULL = not reported (never 0): reconciliation of a
-- platform whose vendor has no usage/cost API (statement_source usage_fields) prices these
-- counts with the token prices of the run's frozen price version, and reports an answered
-- attempt without them on a line of its own. Columns of geo.attempts, so the table's row-level
-- security, grants and retention cover them unchanged.
ALTER TABLE geo.attempts
  ADD COLUMN usage_input_tokens bigint CHECK (usage_input_tokens >= 0),
  ADD COLUMN usage_output_tokens bigint CHECK (usage_output_tokens >= 0),
  ADD COLUMN usage_total_tokens bigint CHECK (usage_total_tokens >= 0),
  ADD COLUMN usage_cached_input_tokens bigint CHECK (usage_cached_input_tokens >= 0),
  ADD COLUMN usage_reasoning_tokens bigint CHECK (usage_reasoning_tokens >= 0),
  ADD COLUMN usage_web_search_requests integer CHECK (usage_web_search_requests >= 0),
  ADD COLUMN usage_search_context text,
  -- The body field the counts came from ('usage', 'usageMetadata'); NULL = no usage recorded.
  ADD COLUMN usage_source text;

-- Reconciliation from usage: a line whose vendor cost was computed from recorded usage x token
-- prices and differs from our charge (explained by the usage shown in its detail), and an
-- answered attempt whose usage is missing or cannot be priced (its own line, never zero).
ALTER TABLE geo.reconciliation_lines
  DROP CONSTRAINT reconciliation_lines_classification_check,
  ADD CONSTRAINT reconciliation_lines_classification_check CHECK (classification IN (
    'matched', 'amount_mismatch', 'missing_ours', 'missing_theirs', 'pending', 'price_change',
    'in_day_total', 'usage_cost', 'usage_missing'));
