-- Versioned price lists (R4, R23): each platform's prices as they stood from a date on. A quote
-- snapshot names the version it priced with (geo.quote_lines.price_version), and a charge
-- follows the quote, so a price change after a run was quoted never re-prices that run; the
-- registry's static prices stay the fallback version of a platform with no row here.
CREATE TABLE geo.price_versions (
  platform        text NOT NULL,
  version         text NOT NULL,
  effective_from  timestamptz NOT NULL,
  currency        char(3) NOT NULL,
  -- The price list as the registry writes it: {base: {mode: minor}, deep_thinking, web_search,
  -- screenshot, retry_fee_rule}; integer minor units only (checked before insert).
  prices          jsonb NOT NULL,
  source          text NOT NULL DEFAULT '',
  content_sha256  char(64) NOT NULL,
  imported_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (platform, version),
  -- Two lists taking effect at the same instant would make "the price on day D" ambiguous.
  UNIQUE (platform, effective_from)
);
-- A published version is a fact a frozen quote may point at: never edited, never deleted.
CREATE TRIGGER price_versions_immutable BEFORE UPDATE OR DELETE ON geo.price_versions
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- A statement line priced on another list than our frozen quote, whose amount is exactly what
-- that list charges, is explained by the price change: its own class, not an unexplained one.
-- A vendor cost API (OpenAI organization costs, Anthropic cost report) bills day totals, never
-- requests: the run's tasks of such a day are 'in_day_total', and the day's line (upstream id
-- 'day-total:<platform>:<day>') compares the vendor's total with our charges of that day.
ALTER TABLE geo.reconciliation_lines
  DROP CONSTRAINT reconciliation_lines_classification_check,
  ADD CONSTRAINT reconciliation_lines_classification_check CHECK (classification IN (
    'matched', 'amount_mismatch', 'missing_ours', 'missing_theirs', 'pending', 'price_change',
    'in_day_total'));

-- The operator CLI imports price lists as the service; analysts may read them (no tenant data).
GRANT SELECT, INSERT ON geo.price_versions TO geo_service;
GRANT SELECT ON geo.price_versions TO geo_analyst;
-- Owned like every other object; the same rows for every tenant (as geo.allowed_transitions).
ALTER TABLE geo.price_versions OWNER TO geo_owner;
ALTER TABLE geo.price_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY analyst_shared ON geo.price_versions FOR SELECT TO geo_analyst USING (true);
