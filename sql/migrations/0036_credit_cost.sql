-- Services that bill credits (issue 31): a task's vendor cost is the credits the vendor
-- reported for it x the credit price of the run's frozen price version. 'credit_cost': that
-- amount differs from our per-answer charge (which is the credit cost rounded up to a whole
-- minor unit), explained by the arithmetic the line's detail shows (in
-- geo_pipeline.domain.billing.EXPLAINED). 'credits_missing': an answered task whose vendor
-- reported no credits: its cost is unknown (not zero), unexplained.
ALTER TABLE geo.reconciliation_lines
  DROP CONSTRAINT reconciliation_lines_classification_check,
  ADD CONSTRAINT reconciliation_lines_classification_check CHECK (classification IN (
    'matched', 'amount_mismatch', 'missing_ours', 'missing_theirs', 'pending', 'price_change',
    'in_day_total', 'usage_cost', 'usage_missing', 'apportioned', 'credit_cost',
    'credits_missing'));
