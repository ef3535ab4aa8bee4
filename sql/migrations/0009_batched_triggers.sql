-- Throughput (issue 4): run accounts are maintained once per INSERT statement on the ledger,
-- not once per entry. A completion batch posts hundreds of charges of one run in one statement;
-- a row trigger updated the same account row once per entry (a new row version each time, each
-- update walking the growing chain of the previous ones). The statement trigger adds each run's
-- totals in one UPDATE, so the constraints on geo.run_accounts judge the totals after the
-- statement, exactly as after its last row before. An entry in another tenant or currency than
-- its run's account is refused as before.
CREATE FUNCTION geo.maintain_run_accounts() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  bad record;
BEGIN
  WITH d AS (
    SELECT e.run_id, e.tenant_id, e.currency, count(*)::int AS n,
           min(e.idempotency_key) AS first_key,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'estimate'), 0) AS estimated,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'reserve'), 0) AS reserved,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'adjustment'
                                                  AND e.adjusts = 'reservation'), 0) AS overrun,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'charge'), 0) AS charged,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'release'), 0) AS released,
           coalesce(sum(e.amount_minor) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
    FROM new_entries e WHERE e.run_id IS NOT NULL
    GROUP BY e.run_id, e.tenant_id, e.currency
  ), u AS (
    -- UPDATE first: the constraints judge the new totals, not these entries alone.
    UPDATE geo.run_accounts a SET
      estimated_minor = a.estimated_minor + d.estimated,
      reserved_minor = a.reserved_minor + d.reserved,
      overrun_minor = a.overrun_minor + d.overrun,
      charged_minor = a.charged_minor + d.charged,
      released_minor = a.released_minor + d.released,
      refunded_minor = a.refunded_minor + d.refunded,
      entries = a.entries + d.n
    FROM d
    WHERE a.run_id = d.run_id AND a.tenant_id = d.tenant_id AND a.currency = d.currency
    RETURNING a.run_id
  ), i AS (
    -- A run's first entries open its account, unless the run is billed elsewhere already or
    -- these entries name two tenants or currencies for it.
    INSERT INTO geo.run_accounts
      (run_id, tenant_id, currency, estimated_minor, reserved_minor, overrun_minor,
       charged_minor, released_minor, refunded_minor, entries)
    SELECT d.run_id, d.tenant_id, d.currency, d.estimated, d.reserved, d.overrun, d.charged,
           d.released, d.refunded, d.n
    FROM d
    WHERE NOT EXISTS (SELECT 1 FROM geo.run_accounts a WHERE a.run_id = d.run_id)
      AND (SELECT count(*) FROM d d2 WHERE d2.run_id = d.run_id) = 1
    RETURNING run_id
  )
  SELECT d.run_id, d.tenant_id, d.currency, d.first_key INTO bad
  FROM d
  WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.run_id = d.run_id)
    AND NOT EXISTS (SELECT 1 FROM i WHERE i.run_id = d.run_id)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: ledger entry % for run % is in tenant % / %, but the run is billed to another tenant or currency',
      bad.first_key, bad.run_id, bad.tenant_id, bad.currency
      USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER ledger_entries_run_account ON geo.ledger_entries;
DROP FUNCTION geo.maintain_run_account();
CREATE TRIGGER ledger_entries_run_accounts AFTER INSERT ON geo.ledger_entries
  REFERENCING NEW TABLE AS new_entries
  FOR EACH STATEMENT EXECUTE FUNCTION geo.maintain_run_accounts();

-- Sample transitions are checked and logged once per UPDATE statement (transition tables), not
-- once per row: a claim, acceptance or completion batch of 500 samples was 500 trigger calls,
-- each running a lookup and an INSERT per changed layer (about half the database time of a
-- sample). The rules are unchanged: every changed layer must be an allowed transition, the
-- fencing token never goes back, every change is logged with its reason, token, attempt and
-- actor. A bad row aborts the whole statement, as before. updated_at is still stamped per row
-- by a trigger that only assigns it.
CREATE FUNCTION geo.log_sample_transitions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  bad record;
  actor text := nullif(current_setting('geo.actor', true), '');
BEGIN
  -- MATERIALIZED: under the LIMIT the planner would join old and new rows by nested loop.
  WITH c AS MATERIALIZED (
    SELECT n.sample_id, l.layer, l.from_state, l.to_state, o.fencing_token AS old_token,
           n.fencing_token AS new_token
    FROM old_samples o JOIN new_samples n USING (sample_id)
    CROSS JOIN LATERAL (VALUES
        ('submission', o.submission_state, n.submission_state),
        ('collection', o.collection_state, n.collection_state),
        ('evidence', o.evidence_state, n.evidence_state),
        ('analysis', o.analysis_state, n.analysis_state)) AS l(layer, from_state, to_state)
    WHERE n.fencing_token < o.fencing_token OR l.from_state <> l.to_state
  )
  SELECT c.* INTO bad
  FROM c LEFT JOIN geo.allowed_transitions t
    ON t.layer = c.layer AND t.from_state = c.from_state AND t.to_state = c.to_state
  WHERE c.new_token < c.old_token OR (c.from_state <> c.to_state AND t.layer IS NULL)
  LIMIT 1;
  IF FOUND THEN
    IF bad.new_token < bad.old_token THEN
      RAISE EXCEPTION 'geo: fencing token of sample % may not go back (% -> %)',
        bad.sample_id, bad.old_token, bad.new_token USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'geo: % transition % -> % is not allowed for sample %',
      bad.layer, bad.from_state, bad.to_state, bad.sample_id
      USING ERRCODE = 'check_violation';
  END IF;
  INSERT INTO geo.state_transitions
    (sample_id, run_id, layer, from_state, to_state, reason, fencing_token, attempt_no, actor)
  SELECT n.sample_id, n.run_id, l.layer, l.from_state, l.to_state, l.reason, n.fencing_token,
         n.attempt_no, actor
  FROM old_samples o JOIN new_samples n USING (sample_id)
  CROSS JOIN LATERAL (VALUES
      (1, 'submission', o.submission_state, n.submission_state, n.submission_reason),
      (2, 'collection', o.collection_state, n.collection_state, n.collection_reason),
      (3, 'evidence', o.evidence_state, n.evidence_state, n.evidence_reason),
      (4, 'analysis', o.analysis_state, n.analysis_state, n.analysis_reason))
    AS l(ord, layer, from_state, to_state, reason)
  WHERE l.from_state <> l.to_state
  ORDER BY n.sample_id, l.ord;
  RETURN NULL;
END $$;

CREATE FUNCTION geo.touch_sample() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.updated_at := now();
  RETURN NEW;
END $$;

DROP TRIGGER samples_guard_update ON geo.samples;
DROP FUNCTION geo.guard_sample_transition();
-- The log joins the statement's old and new rows by sample_id: it may never change.
CREATE TRIGGER samples_id_immutable BEFORE UPDATE OF sample_id ON geo.samples
  FOR EACH ROW WHEN (OLD.sample_id IS DISTINCT FROM NEW.sample_id)
  EXECUTE FUNCTION geo.forbid_change();
CREATE TRIGGER samples_touch BEFORE UPDATE ON geo.samples
  FOR EACH ROW WHEN (OLD.submission_state IS DISTINCT FROM NEW.submission_state
                  OR OLD.collection_state IS DISTINCT FROM NEW.collection_state
                  OR OLD.evidence_state IS DISTINCT FROM NEW.evidence_state
                  OR OLD.analysis_state IS DISTINCT FROM NEW.analysis_state
                  OR OLD.fencing_token IS DISTINCT FROM NEW.fencing_token)
  EXECUTE FUNCTION geo.touch_sample();
CREATE TRIGGER samples_transitions AFTER UPDATE ON geo.samples
  REFERENCING OLD TABLE AS old_samples NEW TABLE AS new_samples
  FOR EACH STATEMENT EXECUTE FUNCTION geo.log_sample_transitions();
