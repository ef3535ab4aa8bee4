-- A run's share of a vendor's account-wide day total (issue 34): a cost API bills the account
-- per day, so the total is apportioned once across the day's runs in proportion to each run's
-- expected cost (usage x price); the run's line compares its charges with its share and is
-- explained by that apportionment ('apportioned', in geo_pipeline.domain.billing.EXPLAINED).
-- The part of the total no run of ours expects stays one 'amount_mismatch' line, on one run.
ALTER TABLE geo.reconciliation_lines
  DROP CONSTRAINT reconciliation_lines_classification_check,
  ADD CONSTRAINT reconciliation_lines_classification_check CHECK (classification IN (
    'matched', 'amount_mismatch', 'missing_ours', 'missing_theirs', 'pending', 'price_change',
    'in_day_total', 'usage_cost', 'usage_missing', 'apportioned'));
