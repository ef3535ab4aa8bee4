-- The browser lane's changed page (issue #32): an account whose browser found the app's page
-- without the controls its selectors name (the composer, the send button, the search toggle)
-- records when and what was missing. The account itself is fine (its state stays as it was);
-- the record is what the operations alert reads ('page_changed', one incident per platform)
-- until a send by that account succeeds again, which clears it. Nothing here is a credential.
ALTER TABLE geo.accounts
  ADD COLUMN page_changed_at timestamptz,
  ADD COLUMN page_changed_detail text;
-- The alert's read: the few accounts with a changed page, without scanning the others.
CREATE INDEX accounts_page_changed ON geo.accounts (platform) WHERE page_changed_at IS NOT NULL;

-- A channel no vendor bills per answer (a consumer app driven in a browser, issue #32): its
-- price is our own estimate. 'no_vendor_bill': such a task's line; theirs is 0 because nobody
-- billed, and that is explained by what the channel is, not a difference a person must chase
-- (in geo_pipeline.domain.billing.EXPLAINED; the words in geo_pipeline.domain.words).
ALTER TABLE geo.reconciliation_lines
  DROP CONSTRAINT reconciliation_lines_classification_check,
  ADD CONSTRAINT reconciliation_lines_classification_check CHECK (classification IN (
    'matched', 'amount_mismatch', 'missing_ours', 'missing_theirs', 'pending', 'price_change',
    'in_day_total', 'usage_cost', 'usage_missing', 'apportioned', 'credit_cost',
    'credits_missing', 'no_vendor_bill'));
