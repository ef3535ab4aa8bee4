-- Billing (issue 7; R15, R23, R24): what an adjustment moves, the retry fee rules frozen per run,
-- balances as views over the append-only ledger, and reconciliation detail.

-- An adjustment is signed and says what it moves: 'available' is a manual credit (+) or debit (-)
-- of the tenant's spendable money; 'reservation' moves money from available into a run's
-- reservation when a charge would exceed what is left of it (flagged for review in details).
-- Every other kind has a fixed meaning and no target.
ALTER TABLE geo.ledger_entries
  ADD COLUMN adjusts text CHECK (adjusts IN ('available', 'reservation')),
  ADD CONSTRAINT adjustment_says_what_it_moves
    CHECK ((kind = 'adjustment') = (adjusts IS NOT NULL)),
  ADD CONSTRAINT adjustment_is_not_zero CHECK (kind <> 'adjustment' OR amount_minor <> 0);
CREATE INDEX ledger_entries_sample ON geo.ledger_entries (sample_id, kind)
  WHERE sample_id IS NOT NULL;

-- The platform's retry fee rule (R15) as it stood when the run was created: a charge decision
-- never depends on today's registry, and never assumes a retry is free.
CREATE TABLE geo.run_fee_rules (
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  platform        text NOT NULL,
  price_version   text NOT NULL,
  retry_fee_rule  text NOT NULL CHECK (retry_fee_rule IN ('charged', 'free_after_failure', 'free')),
  PRIMARY KEY (run_id, platform)
);
CREATE TRIGGER run_fee_rules_immutable BEFORE UPDATE ON geo.run_fee_rules
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- Balances are sums over entries (R23): there is no balance column to edit.
--   reserved = reserve - charge - release + adjustment[reservation]
--   spent    = charge - refund
--   available = deposit - reserve + release + refund + adjustment[available]
--               - adjustment[reservation]
-- so available + reserved + spent = deposits + adjustment[available] (nothing appears or vanishes).
CREATE VIEW geo.account_balances AS
SELECT tenant_id, currency,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'deposit'), 0)::bigint AS deposited_minor,
  (coalesce(sum(amount_minor) FILTER (WHERE kind = 'deposit'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'reserve'), 0)
   + coalesce(sum(amount_minor) FILTER (WHERE kind = 'release'), 0)
   + coalesce(sum(amount_minor) FILTER (WHERE kind = 'refund'), 0)
   + coalesce(sum(amount_minor) FILTER (WHERE kind = 'adjustment' AND adjusts = 'available'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'adjustment' AND adjusts = 'reservation'), 0)
  )::bigint AS available_minor,
  (coalesce(sum(amount_minor) FILTER (WHERE kind = 'reserve'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'charge'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'release'), 0)
   + coalesce(sum(amount_minor) FILTER (WHERE kind = 'adjustment' AND adjusts = 'reservation'), 0)
  )::bigint AS reserved_minor,
  (coalesce(sum(amount_minor) FILTER (WHERE kind = 'charge'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'refund'), 0))::bigint AS spent_minor
FROM geo.ledger_entries
GROUP BY tenant_id, currency;

-- The same sums per run: what was estimated, reserved, charged, released and refunded.
CREATE VIEW geo.run_billing AS
SELECT run_id, tenant_id, currency,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'estimate'), 0)::bigint AS estimated_minor,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'reserve'), 0)::bigint AS reserved_total_minor,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'adjustment' AND adjusts = 'reservation'), 0)
    ::bigint AS overrun_minor,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'charge'), 0)::bigint AS charged_minor,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'release'), 0)::bigint AS released_minor,
  coalesce(sum(amount_minor) FILTER (WHERE kind = 'refund'), 0)::bigint AS refunded_minor,
  (coalesce(sum(amount_minor) FILTER (WHERE kind = 'reserve'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'charge'), 0)
   - coalesce(sum(amount_minor) FILTER (WHERE kind = 'release'), 0)
   + coalesce(sum(amount_minor) FILTER (WHERE kind = 'adjustment' AND adjusts = 'reservation'), 0)
  )::bigint AS reservation_left_minor
FROM geo.ledger_entries
WHERE run_id IS NOT NULL
GROUP BY run_id, tenant_id, currency;

-- The hot path's summary of one run (R23): a charge must know what is left of the run's
-- reservation without summing every entry of the run. It is maintained ONLY by the trigger on
-- ledger_entries (direct writes are refused), so it is a cache of the entries, never a number
-- someone can edit; geo.run_billing recomputes it from the entries and a check compares them.
-- Its row lock is what serialises the charges of one run. The constraints are the billing
-- invariants in the database itself: a charge never exceeds the reservation without an explicit
-- 'reservation' adjustment, and refunds never exceed charges.
CREATE TABLE geo.run_accounts (
  run_id          text PRIMARY KEY REFERENCES geo.runs ON DELETE CASCADE,
  tenant_id       text NOT NULL,
  currency        char(3) NOT NULL,
  estimated_minor bigint NOT NULL DEFAULT 0,
  reserved_minor  bigint NOT NULL DEFAULT 0,
  overrun_minor   bigint NOT NULL DEFAULT 0,
  charged_minor   bigint NOT NULL DEFAULT 0,
  released_minor  bigint NOT NULL DEFAULT 0,
  refunded_minor  bigint NOT NULL DEFAULT 0,
  entries         integer NOT NULL DEFAULT 0,
  CONSTRAINT charges_within_reservation
    CHECK (reserved_minor + overrun_minor - charged_minor - released_minor >= 0),
  CONSTRAINT refunds_within_charges CHECK (refunded_minor <= charged_minor)
) WITH (fillfactor = 70);

CREATE FUNCTION geo.maintain_run_account() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  d_estimated bigint := CASE WHEN NEW.kind = 'estimate' THEN NEW.amount_minor ELSE 0 END;
  d_reserved bigint := CASE WHEN NEW.kind = 'reserve' THEN NEW.amount_minor ELSE 0 END;
  d_overrun bigint := CASE WHEN NEW.kind = 'adjustment' AND NEW.adjusts = 'reservation'
                           THEN NEW.amount_minor ELSE 0 END;
  d_charged bigint := CASE WHEN NEW.kind = 'charge' THEN NEW.amount_minor ELSE 0 END;
  d_released bigint := CASE WHEN NEW.kind = 'release' THEN NEW.amount_minor ELSE 0 END;
  d_refunded bigint := CASE WHEN NEW.kind = 'refund' THEN NEW.amount_minor ELSE 0 END;
BEGIN
  -- UPDATE first: the constraints must judge the new totals, not this entry alone.
  UPDATE geo.run_accounts a SET
    estimated_minor = a.estimated_minor + d_estimated,
    reserved_minor = a.reserved_minor + d_reserved,
    overrun_minor = a.overrun_minor + d_overrun,
    charged_minor = a.charged_minor + d_charged,
    released_minor = a.released_minor + d_released,
    refunded_minor = a.refunded_minor + d_refunded,
    entries = a.entries + 1
  WHERE a.run_id = NEW.run_id AND a.tenant_id = NEW.tenant_id AND a.currency = NEW.currency;
  IF FOUND THEN
    RETURN NULL;
  END IF;
  IF EXISTS (SELECT 1 FROM geo.run_accounts WHERE run_id = NEW.run_id) THEN
    RAISE EXCEPTION 'geo: ledger entry % for run % is in tenant % / %, but the run is billed to another tenant or currency',
      NEW.idempotency_key, NEW.run_id, NEW.tenant_id, NEW.currency
      USING ERRCODE = 'check_violation';
  END IF;
  INSERT INTO geo.run_accounts
    (run_id, tenant_id, currency, estimated_minor, reserved_minor, overrun_minor, charged_minor,
     released_minor, refunded_minor, entries)
  VALUES (NEW.run_id, NEW.tenant_id, NEW.currency, d_estimated, d_reserved, d_overrun,
          d_charged, d_released, d_refunded, 1);
  RETURN NULL;
END $$;

CREATE TRIGGER ledger_entries_run_account AFTER INSERT ON geo.ledger_entries
  FOR EACH ROW WHEN (NEW.run_id IS NOT NULL) EXECUTE FUNCTION geo.maintain_run_account();
-- Only the ledger trigger (depth >= 1) and cascades may write run accounts.
CREATE TRIGGER run_accounts_maintained_by_ledger BEFORE INSERT OR UPDATE OR DELETE
  ON geo.run_accounts FOR EACH ROW WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION geo.forbid_change();

-- Reconciliation detail: which fee class a line belongs to (R24: completed, failed, or still to
-- verify) and the per-item comparison that explains an amount mismatch.
ALTER TABLE geo.reconciliation_lines
  ADD COLUMN fee_class text NOT NULL DEFAULT 'to_verify'
    CHECK (fee_class IN ('completed', 'failed', 'to_verify')),
  ADD COLUMN detail jsonb NOT NULL DEFAULT '{}';
CREATE INDEX fee_statements_platform_date ON geo.fee_statements (platform, statement_date);
