-- Canonical schema of geo_pipeline: what all of sql/migrations/ produce, in one file.
-- A test builds one database from this file and one from the migrations and diffs their catalogues;
-- a migration that changes the schema must change this file too.
-- PostgreSQL is the truth; Redis only carries hints. Money is integer minor units everywhere (R23).

CREATE SCHEMA IF NOT EXISTS geo;
CREATE SCHEMA IF NOT EXISTS analytics;

-- Immutable and append-only tables refuse UPDATE (and, where it matters, DELETE).
CREATE FUNCTION geo.forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'geo: % on %.% is not allowed (append-only / immutable table)',
    TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'restrict_violation';
END $$;

-- ---------------------------------------------------------------- tenants and saved configs
CREATE TABLE geo.tenants (
  tenant_id       text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
  name            text NOT NULL,
  currency        char(3) NOT NULL DEFAULT 'CNY' CHECK (currency ~ '^[A-Z]{3}$'),
  max_in_flight   integer NOT NULL DEFAULT 500 CHECK (max_in_flight > 0),
  retention_days  integer NOT NULL DEFAULT 30 CHECK (retention_days > 0),
  created_at      timestamptz NOT NULL DEFAULT now()
);

-- A monitor is the editable, saved collection config that the daily schedule re-samples.
-- Execution never reads it (R2): a run executes its frozen config snapshot.
CREATE TABLE geo.monitors (
  monitor_id      text PRIMARY KEY CHECK (monitor_id ~ '^[A-Za-z0-9_-]{1,48}$'),
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  config          jsonb NOT NULL,
  active          boolean NOT NULL DEFAULT true,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------- frozen inputs of a run
CREATE TABLE geo.config_snapshots (
  snapshot_id     text PRIMARY KEY CHECK (snapshot_id ~ '^[0-9a-f]{64}$'),  -- sha256 of canonical JSON
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  config          jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER config_snapshots_immutable BEFORE UPDATE ON geo.config_snapshots
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- A question revision is content-addressed: editing a question's text makes a new revision.
CREATE TABLE geo.question_revisions (
  question_revision text PRIMARY KEY CHECK (question_revision ~ '^q[0-9a-f]{20}$'),
  text            text NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER question_revisions_immutable BEFORE UPDATE ON geo.question_revisions
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

CREATE TABLE geo.quote_snapshots (
  quote_id        text PRIMARY KEY CHECK (quote_id ~ '^[0-9a-f]{64}$'),
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  currency        char(3) NOT NULL,
  estimated_max_minor bigint NOT NULL CHECK (estimated_max_minor >= 0),
  price_versions  jsonb NOT NULL,            -- {platform: price_version}
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER quote_snapshots_immutable BEFORE UPDATE ON geo.quote_snapshots
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

CREATE TABLE geo.quote_lines (
  quote_id        text NOT NULL REFERENCES geo.quote_snapshots,
  line_no         integer NOT NULL,
  platform        text NOT NULL,
  price_version   text NOT NULL,
  item            text NOT NULL CHECK (item IN ('base', 'deep_thinking', 'web_search',
                                                'screenshot', 'retry_allowance')),
  mode            text NOT NULL,
  unit_price_minor bigint NOT NULL CHECK (unit_price_minor >= 0),
  quantity        integer NOT NULL CHECK (quantity >= 0),
  amount_minor    bigint NOT NULL CHECK (amount_minor = unit_price_minor * quantity),
  PRIMARY KEY (quote_id, line_no)
);
CREATE TRIGGER quote_lines_immutable BEFORE UPDATE ON geo.quote_lines
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- ---------------------------------------------------------------- runs, batches, samples
-- run_id doubles as a Dagster dynamic partition key: no '|', ',', '[' or ']'.
CREATE TABLE geo.runs (
  run_id          text PRIMARY KEY CHECK (run_id ~ '^[A-Za-z0-9_-]{1,64}$'),
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  monitor_id      text REFERENCES geo.monitors,
  snapshot_id     text NOT NULL REFERENCES geo.config_snapshots,
  quote_id        text NOT NULL REFERENCES geo.quote_snapshots,
  scheduled_for   date,                      -- the day a monitor's daily re-sample stands for
  priority        integer NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9),
  sample_count    integer NOT NULL CHECK (sample_count >= 0),
  created_at      timestamptz NOT NULL DEFAULT now(),
  confirmed_at    timestamptz,               -- reservation taken (billing)
  cancel_requested_at timestamptz,           -- local intent only (R16, R24)
  closed_at       timestamptz,               -- unused reservation released (billing)
  UNIQUE (monitor_id, scheduled_for),
  UNIQUE (run_id, tenant_id)                 -- target of the samples' (run, tenant) key
);

CREATE TABLE geo.batches (
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  batch_no        integer NOT NULL CHECK (batch_no >= 0),
  size            integer NOT NULL CHECK (size > 0),
  platform_counts jsonb NOT NULL,            -- {platform: n}, each n <= that platform's cap
  PRIMARY KEY (run_id, batch_no)
);

-- The state rules of R6, one row per allowed move. from_state NULL = the initial state on insert.
-- geo_pipeline.domain.states holds the same table; a test proves they agree.
CREATE TABLE geo.allowed_transitions (
  layer           text NOT NULL CHECK (layer IN ('submission', 'collection', 'evidence', 'analysis')),
  from_state      text,
  to_state        text NOT NULL,
  UNIQUE NULLS NOT DISTINCT (layer, from_state, to_state)
);

-- One row per sample of R5. Leases live on the sample row (lease_owner, lease_until,
-- fencing_token) so that a claim, a renewal and a fenced completion each touch one row.
CREATE TABLE geo.samples (
  sample_id       text PRIMARY KEY CHECK (sample_id ~ '^s[0-9a-f]{24}$'),
  run_id          text NOT NULL,
  tenant_id       text NOT NULL,
  batch_no        integer NOT NULL,
  -- No foreign key to question_revisions: a run inserts up to 100k samples at once and each
  -- row-level RI check costs more than the COPY itself. create_run writes the revisions in the
  -- same transaction, and the sampling_plan asset check verifies every revision exists.
  question_revision text NOT NULL,
  question_index  integer NOT NULL CHECK (question_index >= 0),
  platform        text NOT NULL,
  device          text NOT NULL,
  region          text NOT NULL,
  mode            text NOT NULL,
  repeat_index    integer NOT NULL CHECK (repeat_index >= 0),
  channel         text GENERATED ALWAYS AS (platform || '__' || device) STORED,
  screenshot_policy text NOT NULL CHECK (screenshot_policy IN ('required', 'optional', 'off')),
  priority        integer NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9),

  submission_state text NOT NULL DEFAULT 'planned'
    CHECK (submission_state IN ('planned', 'submitting', 'accepted', 'uncertain')),
  collection_state text NOT NULL DEFAULT 'queued'
    CHECK (collection_state IN ('queued', 'running', 'completed', 'failed')),
  evidence_state  text NOT NULL DEFAULT 'pending'
    CHECK (evidence_state IN ('pending', 'stored', 'partial', 'failed')),
  analysis_state  text NOT NULL DEFAULT 'pending'
    CHECK (analysis_state IN ('pending', 'accepted', 'review', 'failed')),
  -- Why a layer is where it is (error class, SCREENSHOT_UNAVAILABLE, CANCELLED, ...).
  -- The transition trigger copies the reason of each changed layer into the log.
  submission_reason text,
  collection_reason text,
  evidence_reason text,
  analysis_reason text,

  attempt_no      integer NOT NULL DEFAULT 0 CHECK (attempt_no >= 0),  -- retries, never repeats (R15)
  fencing_token   bigint NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
  lease_owner     text,
  lease_until     timestamptz,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),    -- due time (backoff, Retry-After, polls)
  upstream_id     text,
  accepted_at     timestamptz,
  completed_at    timestamptz,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),

  -- The identity of R5. Column order puts run + channel first so this index also serves every
  -- "samples of a (run, channel) partition" query; no separate index is needed for that.
  -- One key checks both the run and that the sample's tenant is the run's tenant.
  CONSTRAINT samples_run FOREIGN KEY (run_id, tenant_id)
    REFERENCES geo.runs (run_id, tenant_id) ON DELETE CASCADE,
  CONSTRAINT samples_identity UNIQUE
    (run_id, platform, device, region, mode, question_revision, repeat_index),
  -- Cross-layer invariants: no layer may run ahead of the one it depends on.
  CONSTRAINT completed_needs_acceptance
    CHECK (collection_state <> 'completed' OR submission_state = 'accepted'),
  CONSTRAINT accepted_has_upstream_id
    CHECK (submission_state <> 'accepted' OR upstream_id IS NOT NULL),
  CONSTRAINT running_holds_lease
    CHECK (collection_state <> 'running' OR lease_until IS NOT NULL),
  CONSTRAINT evidence_after_completion
    CHECK (evidence_state IN ('pending', 'failed') OR collection_state = 'completed'),
  CONSTRAINT analysis_after_evidence
    CHECK (analysis_state = 'pending' OR evidence_state IN ('stored', 'partial'))
) WITH (fillfactor = 80);

-- The sweeper's and the claimers' view of due work: only non-terminal samples are indexed.
CREATE INDEX samples_due ON geo.samples (next_attempt_at)
  WHERE collection_state IN ('queued', 'running');
CREATE INDEX samples_uncertain ON geo.samples (run_id) WHERE submission_state = 'uncertain';

-- Append-only log of every state change of every layer, written by the trigger below.
CREATE TABLE geo.state_transitions (
  transition_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sample_id       text NOT NULL,
  run_id          text NOT NULL,
  layer           text NOT NULL,
  from_state      text,
  to_state        text NOT NULL,
  reason          text,
  fencing_token   bigint NOT NULL,
  attempt_no      integer NOT NULL,
  actor           text,                      -- SET LOCAL geo.actor = 'worker:host:pid' / 'operator:...'
  at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX state_transitions_sample ON geo.state_transitions (sample_id, transition_id);
CREATE TRIGGER state_transitions_append_only BEFORE UPDATE ON geo.state_transitions
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

CREATE FUNCTION geo.guard_sample_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  lyr text;
  old_state text;
  new_state text;
  why text;
  actor text := nullif(current_setting('geo.actor', true), '');
BEGIN
  FOREACH lyr IN ARRAY ARRAY['submission', 'collection', 'evidence', 'analysis'] LOOP
    IF TG_OP = 'INSERT' THEN
      old_state := NULL;
    ELSE
      old_state := CASE lyr WHEN 'submission' THEN OLD.submission_state
                              WHEN 'collection' THEN OLD.collection_state
                              WHEN 'evidence'   THEN OLD.evidence_state
                              ELSE OLD.analysis_state END;
    END IF;
    new_state := CASE lyr WHEN 'submission' THEN NEW.submission_state
                            WHEN 'collection' THEN NEW.collection_state
                            WHEN 'evidence'   THEN NEW.evidence_state
                            ELSE NEW.analysis_state END;
    why := CASE lyr WHEN 'submission' THEN NEW.submission_reason
                      WHEN 'collection' THEN NEW.collection_reason
                      WHEN 'evidence'   THEN NEW.evidence_reason
                      ELSE NEW.analysis_reason END;
    IF old_state IS DISTINCT FROM new_state THEN
      IF NOT EXISTS (SELECT 1 FROM geo.allowed_transitions t
                      WHERE t.layer = lyr
                        AND t.from_state IS NOT DISTINCT FROM old_state
                        AND t.to_state = new_state) THEN
        RAISE EXCEPTION 'geo: % transition % -> % is not allowed for sample %',
          lyr, coalesce(old_state, '(new)'), new_state, NEW.sample_id
          USING ERRCODE = 'check_violation';
      END IF;
      -- The initial states are implied by the insert; only changes are logged.
      IF TG_OP = 'UPDATE' THEN
        INSERT INTO geo.state_transitions
          (sample_id, run_id, layer, from_state, to_state, reason, fencing_token, attempt_no, actor)
        VALUES (NEW.sample_id, NEW.run_id, lyr, old_state, new_state, why,
                NEW.fencing_token, NEW.attempt_no, actor);
      END IF;
    END IF;
  END LOOP;
  IF TG_OP = 'UPDATE' THEN
    IF NEW.fencing_token < OLD.fencing_token THEN
      RAISE EXCEPTION 'geo: fencing token of sample % may not go back (% -> %)',
        NEW.sample_id, OLD.fencing_token, NEW.fencing_token USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
  END IF;
  RETURN NEW;
END $$;

-- Initial states are checked once per INSERT statement (a 100k-row COPY is one check, not 100k).
CREATE FUNCTION geo.guard_sample_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  bad record;
BEGIN
  SELECT n.sample_id, l.lyr, l.state INTO bad
  FROM new_samples n
  CROSS JOIN LATERAL (VALUES ('submission', n.submission_state), ('collection', n.collection_state),
                             ('evidence', n.evidence_state), ('analysis', n.analysis_state))
    AS l(lyr, state)
  WHERE NOT EXISTS (SELECT 1 FROM geo.allowed_transitions t
                     WHERE t.layer = l.lyr AND t.from_state IS NULL AND t.to_state = l.state)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: % transition (new) -> % is not allowed for sample %',
      bad.lyr, bad.state, bad.sample_id USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER samples_guard_insert AFTER INSERT ON geo.samples
  REFERENCING NEW TABLE AS new_samples
  FOR EACH STATEMENT EXECUTE FUNCTION geo.guard_sample_insert();
CREATE TRIGGER samples_guard_update BEFORE UPDATE ON geo.samples
  FOR EACH ROW WHEN (OLD.submission_state IS DISTINCT FROM NEW.submission_state
                  OR OLD.collection_state IS DISTINCT FROM NEW.collection_state
                  OR OLD.evidence_state IS DISTINCT FROM NEW.evidence_state
                  OR OLD.analysis_state IS DISTINCT FROM NEW.analysis_state
                  OR OLD.fencing_token IS DISTINCT FROM NEW.fencing_token)
  EXECUTE FUNCTION geo.guard_sample_transition();

-- ---------------------------------------------------------------- execution records
-- One execution try of a sample (R5, R15). attempt_no counts retries; repeats are samples.
CREATE TABLE geo.attempts (
  sample_id       text NOT NULL REFERENCES geo.samples ON DELETE CASCADE,
  attempt_no      integer NOT NULL CHECK (attempt_no >= 1),
  fencing_token   bigint NOT NULL,
  worker_id       text NOT NULL,
  started_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  outcome         text NOT NULL DEFAULT 'running'
    CHECK (outcome IN ('running', 'accepted', 'completed', 'failed', 'uncertain',
                       'not_accepted', 'abandoned', 'cancelled')),
  error_class     text,
  error_detail    text,
  retry_after_ms  integer,
  deep_thinking_used boolean,
  screenshot_used boolean,
  PRIMARY KEY (sample_id, attempt_no)
);

-- The acceptance record (R9, R12): written BEFORE the request leaves, so a crash between send
-- and record leaves a row that recovery resolves by lookup, never by blind re-submission.
CREATE TABLE geo.upstream_requests (
  idempotency_key text PRIMARY KEY,          -- '<sample_id>:<attempt_no>'
  sample_id       text NOT NULL REFERENCES geo.samples ON DELETE CASCADE,
  attempt_no      integer NOT NULL,
  platform        text NOT NULL,
  state           text NOT NULL DEFAULT 'sending'
    CHECK (state IN ('sending', 'accepted', 'uncertain', 'not_accepted')),
  upstream_id     text,
  sent_at         timestamptz NOT NULL DEFAULT now(),
  accepted_at     timestamptz,
  lookups         integer NOT NULL DEFAULT 0,
  last_lookup_at  timestamptz,
  resolved_by     text,                      -- 'response', 'lookup', 'operator:<name>'
  UNIQUE (sample_id, attempt_no),
  CONSTRAINT accepted_request_has_id CHECK (state <> 'accepted' OR upstream_id IS NOT NULL)
);
CREATE UNIQUE INDEX upstream_requests_upstream_id ON geo.upstream_requests (platform, upstream_id)
  WHERE upstream_id IS NOT NULL;

-- ---------------------------------------------------------------- transactional outbox
CREATE TABLE geo.outbox (
  outbox_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  stream          text NOT NULL,             -- logical stream, e.g. 'collect:deepseek', 'completions'
  kind            text NOT NULL,             -- 'collect', 'screenshot', 'completion', ...
  sample_id       text,
  run_id          text,
  tenant_id       text,
  payload         jsonb NOT NULL DEFAULT '{}',  -- ids and routing only (R8)
  created_at      timestamptz NOT NULL DEFAULT now(),
  published_at    timestamptz
) WITH (fillfactor = 70);
CREATE INDEX outbox_unpublished ON geo.outbox (outbox_id) WHERE published_at IS NULL;

CREATE TABLE geo.dead_letters (
  dead_letter_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  stream          text NOT NULL,
  message_id      text NOT NULL,
  event_id        text,
  sample_id       text,
  deliveries      integer NOT NULL,
  reason          text NOT NULL,
  at              timestamptz NOT NULL DEFAULT now(),
  UNIQUE (stream, message_id)
);

-- ---------------------------------------------------------------- evidence
-- Every archived object; the key is a location, not a permission (R20).
CREATE TABLE geo.evidence_objects (
  object_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sample_id       text NOT NULL REFERENCES geo.samples ON DELETE CASCADE,
  tenant_id       text NOT NULL,
  run_id          text NOT NULL,
  revision        integer NOT NULL CHECK (revision >= 1),
  kind            text NOT NULL CHECK (kind IN ('answer_raw', 'answer_html', 'citations',
                                                'response_raw', 'screenshot', 'thumbnail')),
  storage_key     text NOT NULL,
  sha256          char(64) NOT NULL,
  size_bytes      bigint NOT NULL CHECK (size_bytes >= 0),
  mime_type       text NOT NULL,
  attempt_no      integer,
  captured_at     timestamptz NOT NULL,
  stored_at       timestamptz NOT NULL DEFAULT now(),
  UNIQUE (sample_id, kind, revision),
  UNIQUE (sample_id, kind, sha256)
);
CREATE TRIGGER evidence_objects_immutable BEFORE UPDATE ON geo.evidence_objects
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- The answer text as received (raw) and its sanitised rendering, stored apart (R19).
CREATE TABLE geo.answers (
  sample_id       text NOT NULL REFERENCES geo.samples ON DELETE CASCADE,
  revision        integer NOT NULL CHECK (revision >= 1),
  attempt_no      integer NOT NULL,
  upstream_id     text,
  raw_text        text NOT NULL,
  sanitized_html  text NOT NULL,
  raw_sha256      char(64) NOT NULL,
  captured_at     timestamptz NOT NULL,
  provider_truncated boolean NOT NULL DEFAULT false,
  validity        text NOT NULL CHECK (validity IN ('valid', 'invalid')),
  validity_reason text,
  validity_rule_version text NOT NULL,
  warnings        text[] NOT NULL DEFAULT '{}',
  stored_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (sample_id, revision),
  CONSTRAINT invalid_has_reason CHECK (validity = 'valid' OR validity_reason IS NOT NULL)
);

CREATE TABLE geo.citations (
  sample_id       text NOT NULL,
  revision        integer NOT NULL,
  ordinal         integer NOT NULL CHECK (ordinal >= 0),
  citation_key    text,                      -- the engine's own id for it, if any
  relation        text NOT NULL CHECK (relation IN ('cited', 'retrieved')),
  raw_url         text NOT NULL,
  normalized_url  text NOT NULL,
  registrable_domain text,
  title           text,
  span_start      integer,
  span_end        integer,
  cited_text      text,
  PRIMARY KEY (sample_id, revision, ordinal),
  FOREIGN KEY (sample_id, revision) REFERENCES geo.answers ON DELETE CASCADE
);
CREATE INDEX citations_domain ON geo.citations (registrable_domain);

-- ---------------------------------------------------------------- brand analysis
CREATE TABLE geo.analysis_results (
  sample_id       text NOT NULL REFERENCES geo.samples ON DELETE CASCADE,
  detector_version text NOT NULL,
  answer_revision integer NOT NULL,
  state           text NOT NULL CHECK (state IN ('accepted', 'review', 'failed')),
  reason          text,
  analysed_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (sample_id, detector_version, answer_revision)
);

CREATE TABLE geo.mentions (
  sample_id       text NOT NULL,
  detector_version text NOT NULL,
  answer_revision integer NOT NULL,
  brand           text NOT NULL,
  is_target       boolean NOT NULL,          -- the monitored brand (else a competitor)
  mentioned       boolean NOT NULL,
  mention_count   integer NOT NULL CHECK (mention_count >= 0),
  first_offset    integer,
  rank            integer,                   -- 1 = first brand mentioned
  first_block     integer,                   -- paragraph / list item index
  position_bucket text CHECK (position_bucket IN ('top', 'middle', 'bottom')),
  domain_cited    boolean NOT NULL DEFAULT false,
  domain_retrieved boolean NOT NULL DEFAULT false,
  ambiguous       boolean NOT NULL DEFAULT false,
  PRIMARY KEY (sample_id, detector_version, answer_revision, brand),
  FOREIGN KEY (sample_id, detector_version, answer_revision)
    REFERENCES geo.analysis_results ON DELETE CASCADE,
  CONSTRAINT mention_facts_consistent
    CHECK ((mentioned AND mention_count > 0 AND first_offset IS NOT NULL)
        OR (NOT mentioned AND mention_count = 0))
);

CREATE TABLE geo.review_decisions (
  decision_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sample_id       text NOT NULL REFERENCES geo.samples ON DELETE CASCADE,
  subject         text NOT NULL,             -- 'analysis', 'validity', 'parse_failure', ...
  verdict         text NOT NULL,
  note            text,
  actor           text NOT NULL,
  decided_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER review_decisions_append_only BEFORE UPDATE ON geo.review_decisions
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- ---------------------------------------------------------------- billing
-- Append-only ledger (R23, R24). Balances are sums over entries; there is no balance column.
CREATE TABLE geo.ledger_entries (
  entry_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  kind            text NOT NULL CHECK (kind IN ('deposit', 'estimate', 'reserve', 'charge',
                                                'release', 'refund', 'adjustment')),
  amount_minor    bigint NOT NULL,
  currency        char(3) NOT NULL,
  run_id          text REFERENCES geo.runs,
  sample_id       text,
  attempt_no      integer,
  upstream_id     text,
  price_version   text,
  idempotency_key text NOT NULL UNIQUE,
  details         jsonb NOT NULL DEFAULT '{}',
  created_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT only_adjustments_are_signed CHECK (kind = 'adjustment' OR amount_minor >= 0)
);
CREATE INDEX ledger_entries_run ON geo.ledger_entries (run_id, kind);
CREATE INDEX ledger_entries_tenant ON geo.ledger_entries (tenant_id, kind);
CREATE INDEX ledger_entries_upstream ON geo.ledger_entries (upstream_id) WHERE upstream_id IS NOT NULL;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON geo.ledger_entries
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

CREATE TABLE geo.fee_statements (
  statement_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  platform        text NOT NULL,
  statement_date  date NOT NULL,
  currency        char(3) NOT NULL,
  content_sha256  char(64) NOT NULL,
  imported_at     timestamptz NOT NULL DEFAULT now(),
  UNIQUE (platform, statement_date, content_sha256)
);

CREATE TABLE geo.fee_statement_lines (
  statement_id    bigint NOT NULL REFERENCES geo.fee_statements ON DELETE CASCADE,
  line_no         integer NOT NULL,
  upstream_id     text NOT NULL,
  item            text NOT NULL,
  amount_minor    bigint NOT NULL,
  currency        char(3) NOT NULL,
  price_version   text,
  charged_at      timestamptz,
  PRIMARY KEY (statement_id, line_no)
);
CREATE INDEX fee_statement_lines_upstream ON geo.fee_statement_lines (upstream_id);

CREATE TABLE geo.reconciliation_lines (
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  upstream_id     text NOT NULL,
  sample_id       text,
  attempt_no      integer,
  platform        text NOT NULL,
  classification  text NOT NULL CHECK (classification IN ('matched', 'amount_mismatch',
                    'missing_ours', 'missing_theirs', 'pending')),
  ours_minor      bigint NOT NULL DEFAULT 0,
  theirs_minor    bigint NOT NULL DEFAULT 0,
  difference_minor bigint GENERATED ALWAYS AS (theirs_minor - ours_minor) STORED,
  currency        char(3) NOT NULL,
  reconciled_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, upstream_id)
);

-- ---------------------------------------------------------------- the state rules (R6)
INSERT INTO geo.allowed_transitions (layer, from_state, to_state) VALUES
  ('submission', NULL, 'planned'),
  ('submission', 'planned', 'submitting'),
  ('submission', 'submitting', 'accepted'),
  ('submission', 'submitting', 'uncertain'),
  ('submission', 'submitting', 'planned'),
  ('submission', 'uncertain', 'accepted'),
  ('submission', 'uncertain', 'planned'),
  ('submission', 'accepted', 'planned'),
  ('collection', NULL, 'queued'),
  ('collection', 'queued', 'running'),
  ('collection', 'queued', 'failed'),
  ('collection', 'running', 'queued'),
  ('collection', 'running', 'completed'),
  ('collection', 'running', 'failed'),
  ('evidence', NULL, 'pending'),
  ('evidence', 'pending', 'stored'),
  ('evidence', 'pending', 'partial'),
  ('evidence', 'pending', 'failed'),
  ('evidence', 'partial', 'stored'),
  ('evidence', 'failed', 'stored'),
  ('evidence', 'failed', 'partial'),
  ('analysis', NULL, 'pending'),
  ('analysis', 'pending', 'accepted'),
  ('analysis', 'pending', 'review'),
  ('analysis', 'pending', 'failed'),
  ('analysis', 'review', 'accepted'),
  ('analysis', 'review', 'failed'),
  ('analysis', 'accepted', 'pending'),
  ('analysis', 'review', 'pending'),
  ('analysis', 'failed', 'pending');

-- (A sample's collect hints are looked up through outbox_sample_kind_created, migration 0006.)

-- ==== 0005_billing ====
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

-- ==== 0003_evidence ====
-- Evidence (issue 5). geo.answers.content_sha256 fingerprints one answer revision (text,
-- citations, provider truncation flag) so that recording the same evidence twice adds nothing;
-- storage_key is indexed because authorised access by key looks the key up before any read (R20).
ALTER TABLE geo.answers ADD COLUMN content_sha256 char(64);
CREATE INDEX evidence_objects_storage_key ON geo.evidence_objects (storage_key);

-- ==== 0006_execution ====
-- Execution core (issue 4): indexes for fair, per-tenant claims and in-flight caps (R10).
-- Candidates are read per (tenant, platform) oldest-due first and by priority; the running count
-- per tenant is what max_in_flight is compared with.
CREATE INDEX samples_queued_tenant_due ON geo.samples (tenant_id, platform, next_attempt_at)
  WHERE collection_state = 'queued';
CREATE INDEX samples_queued_tenant_priority
  ON geo.samples (tenant_id, platform, priority DESC, next_attempt_at)
  WHERE collection_state = 'queued';
CREATE INDEX samples_running_tenant ON geo.samples (tenant_id, lease_until)
  WHERE collection_state = 'running';
-- The sweeper's "has this sample a live hint?" check reads the newest collect hint per sample.
CREATE INDEX outbox_sample_kind_created ON geo.outbox (sample_id, kind, created_at);

-- ==== 0008_retention ====
-- Retention (D9, issue 9): what each pass removed, so a missing screenshot of an old run is
-- explained by a row here rather than by silence. Aggregates and the ledger are never touched.
CREATE TABLE geo.retention_log (
  retention_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  tenant_id       text NOT NULL REFERENCES geo.tenants,
  retention_days  integer NOT NULL CHECK (retention_days > 0),
  cutoff          timestamptz NOT NULL,
  objects_deleted integer NOT NULL CHECK (objects_deleted >= 0),
  bytes_deleted   bigint NOT NULL CHECK (bytes_deleted >= 0),
  attempts_deleted integer NOT NULL CHECK (attempts_deleted >= 0),
  applied_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX retention_log_run ON geo.retention_log (run_id);
CREATE TRIGGER retention_log_append_only BEFORE UPDATE ON geo.retention_log
  FOR EACH ROW EXECUTE FUNCTION geo.forbid_change();

-- ==== 0004_analytics ====
-- Brand analysis and the analyst interface (issue 6; R6, R7, R22). docs/analysts.md documents
-- every object of the analytics schema below; tests in geo_pipeline_tests/integration/analysis
-- check counts, rates and Wilson bounds against values worked out by hand.

-- Which analysis result of a sample the analyst views read: the one the latest analyse_run
-- wrote. Older detector versions' results stay in geo.analysis_results / geo.mentions (history).
CREATE TABLE geo.analysis_current (
  sample_id        text PRIMARY KEY REFERENCES geo.samples ON DELETE CASCADE,
  detector_version text NOT NULL,
  answer_revision  integer NOT NULL,
  FOREIGN KEY (sample_id, detector_version, answer_revision)
    REFERENCES geo.analysis_results ON DELETE CASCADE
);

-- The views look up a sample's latest validity verdict by a reviewer.
CREATE INDEX review_decisions_sample ON geo.review_decisions (sample_id, subject, decision_id);

-- ---------------------------------------------------------------- statistics (= domain/stats.py)
-- Wilson score interval of x successes in n trials; NULL when n = 0. z = 1.96 gives 95 %.
CREATE FUNCTION analytics.wilson_lower(x bigint, n bigint, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n > 0 THEN greatest(0.0,
    (x::float8 / n + z * z / (2.0 * n)
      - z * sqrt((x::float8 / n) * (1 - x::float8 / n) / n + z * z / (4.0 * n * n)))
    / (1 + z * z / n)) END
$$;

CREATE FUNCTION analytics.wilson_upper(x bigint, n bigint, z double precision DEFAULT 1.959963984540054)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n > 0 THEN least(1.0,
    (x::float8 / n + z * z / (2.0 * n)
      + z * sqrt((x::float8 / n) * (1 - x::float8 / n) / n + z * z / (4.0 * n * n)))
    / (1 + z * z / n)) END
$$;

-- Pooled two-proportion z statistic of x2/n2 - x1/n1; NULL when undefined (no sample, or no
-- variance because both proportions are 0 or both are 1).
CREATE FUNCTION analytics.two_proportion_z(x1 bigint, n1 bigint, x2 bigint, n2 bigint)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN n1 > 0 AND n2 > 0
     AND (x1 + x2)::float8 / (n1 + n2) * (1 - (x1 + x2)::float8 / (n1 + n2)) > 0
    THEN (x2::float8 / n2 - x1::float8 / n1)
         / sqrt((x1 + x2)::float8 / (n1 + n2) * (1 - (x1 + x2)::float8 / (n1 + n2))
                * (1.0 / n1 + 1.0 / n2))
  END
$$;

-- ---------------------------------------------------------------- live views
-- The tracked brands of each run, from its frozen config snapshot (R2): target first.
CREATE VIEW analytics.run_brands AS
SELECT r.run_id, (c.config -> 'brand' ->> 'name') AS brand, true AS is_target, 0 AS brand_order
  FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
UNION ALL
SELECT r.run_id, comp.value ->> 'name', false, comp.ordinality::integer
  FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
  CROSS JOIN LATERAL jsonb_array_elements(c.config -> 'competitors') WITH ORDINALITY AS comp;

-- One row per sample, lean: identity, validity, and whether its mentions are known.
-- mention_status: 'known' (valid answer, analysis accepted), 'analysing' (analysis pending:
-- UNKNOWN, never "not mentioned", R6), 'in_review', 'excluded' (invalid answer or analysis
-- failed). validity is the reviewer's verdict where there is one, else the rules' verdict.
-- Every other analytics object derives from this one definition.
CREATE VIEW analytics.sample_status AS
SELECT s.sample_id, s.run_id, s.tenant_id, s.question_revision, s.question_index,
       s.platform, s.device, s.channel, s.region, s.mode, s.repeat_index, s.analysis_state,
       a.revision AS answer_revision, a.captured_at,
       a.validity AS validity_judged, a.validity_reason,
       vd.verdict AS validity_reviewed,
       coalesce(vd.verdict, a.validity) AS validity,
       CASE
         WHEN s.analysis_state = 'accepted' AND coalesce(vd.verdict, a.validity) = 'valid'
           THEN 'known'
         WHEN s.analysis_state = 'pending' THEN 'analysing'
         WHEN s.analysis_state = 'review' THEN 'in_review'
         ELSE 'excluded'
       END AS mention_status,
       ac.detector_version, ac.answer_revision AS analysed_revision
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.captured_at, a1.validity, a1.validity_reason
                       FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
  LEFT JOIN geo.analysis_current ac ON ac.sample_id = s.sample_id;

-- One row per sample: sample_status with every state and reason, the run's monitor and day,
-- the question text, and the target brand's mention facts (NULL unless known).
CREATE VIEW analytics.sample_facts AS
SELECT st.sample_id, st.run_id, st.tenant_id, r.monitor_id, r.scheduled_for,
       st.question_revision, st.question_index, q.text AS question_text,
       st.platform, st.device, st.channel, st.region, st.mode, st.repeat_index, s.attempt_no,
       s.submission_state, s.collection_state, s.evidence_state, s.analysis_state,
       s.submission_reason, s.collection_reason, s.evidence_reason, s.analysis_reason,
       s.upstream_id, s.completed_at,
       st.answer_revision, st.captured_at, st.validity_judged, st.validity_reason,
       st.validity_reviewed, st.validity, st.mention_status, st.detector_version, ar.analysed_at,
       CASE WHEN st.mention_status = 'known' THEN coalesce(tm.mentioned, false) END
         AS target_mentioned,
       CASE WHEN st.mention_status = 'known' THEN tm.rank END AS target_rank,
       CASE WHEN st.mention_status = 'known'
            THEN (SELECT count(*) FROM geo.mentions m
                   WHERE m.sample_id = st.sample_id AND m.detector_version = st.detector_version
                     AND m.answer_revision = st.analysed_revision AND m.mentioned) END
         AS brands_mentioned
  FROM analytics.sample_status st
  JOIN geo.samples s ON s.sample_id = st.sample_id
  JOIN geo.runs r ON r.run_id = st.run_id
  JOIN geo.question_revisions q ON q.question_revision = st.question_revision
  LEFT JOIN geo.analysis_results ar ON ar.sample_id = st.sample_id
       AND ar.detector_version = st.detector_version
       AND ar.answer_revision = st.analysed_revision
  LEFT JOIN geo.mentions tm ON tm.sample_id = st.sample_id
       AND tm.detector_version = st.detector_version
       AND tm.answer_revision = st.analysed_revision AND tm.is_target;

-- One row per sample x tracked brand. The mention columns are NULL unless mention_status is
-- 'known', so a count of "not mentioned" can never include a sample still being analysed.
CREATE VIEW analytics.sample_brand_facts AS
SELECT st.sample_id, st.run_id, st.tenant_id, r.monitor_id, r.scheduled_for,
       st.question_revision, st.question_index, st.platform, st.device, st.channel, st.region,
       st.mode, st.repeat_index, st.analysis_state, st.validity, st.mention_status,
       st.detector_version, b.brand, b.is_target, b.brand_order,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.mentioned, false) END AS mentioned,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.mention_count, 0) END
         AS mention_count,
       CASE WHEN st.mention_status = 'known' THEN m.first_offset END AS first_offset,
       CASE WHEN st.mention_status = 'known' THEN m.rank END AS rank,
       CASE WHEN st.mention_status = 'known' THEN m.first_block END AS first_block,
       CASE WHEN st.mention_status = 'known' THEN m.position_bucket END AS position_bucket,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.domain_cited, false) END
         AS domain_cited,
       CASE WHEN st.mention_status = 'known' THEN coalesce(m.domain_retrieved, false) END
         AS domain_retrieved,
       m.ambiguous
  FROM analytics.sample_status st
  JOIN geo.runs r ON r.run_id = st.run_id
  JOIN analytics.run_brands b ON b.run_id = st.run_id
  LEFT JOIN geo.mentions m ON m.sample_id = st.sample_id
       AND m.detector_version = st.detector_version
       AND m.answer_revision = st.analysed_revision AND m.brand = b.brand;

-- ---------------------------------------------------------------- materialised per run
-- Refreshed by geo_pipeline.analysis.refresh_analytics(conn, run_id): delete the run's rows and
-- insert them again in one transaction (a partition write that can be repeated).

-- run x channel x region x mode x question x brand.
CREATE TABLE analytics.brand_metrics (
  run_id            text NOT NULL,
  tenant_id         text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  channel           text NOT NULL,
  platform          text NOT NULL,
  device            text NOT NULL,
  region            text NOT NULL,
  mode              text NOT NULL,
  question_revision text NOT NULL,
  question_index    integer NOT NULL,
  brand             text NOT NULL,
  is_target         boolean NOT NULL,
  samples           integer NOT NULL,  -- every planned sample of the cell
  valid_samples     integer NOT NULL,  -- answers judged (or reviewed) valid
  invalid_samples   integer NOT NULL,  -- answers judged invalid: excluded from every rate
  analysing_samples integer NOT NULL,  -- analysis pending: unknown, not "not mentioned"
  review_samples    integer NOT NULL,  -- analysis waiting for a person
  n                 integer NOT NULL,  -- rate denominator: valid answers, analysis accepted
  mentions          integer NOT NULL,  -- of n, answers that mention the brand
  mention_rate      double precision,  -- mentions / n
  mention_rate_lower double precision, -- Wilson 95 % lower bound
  mention_rate_upper double precision, -- Wilson 95 % upper bound
  avg_rank          double precision,  -- mean rank among brands, over the `mentions` answers
  domain_cited      integer NOT NULL,  -- of n, answers citing one of the brand's domains
  citation_rate     double precision,  -- domain_cited / n
  domain_retrieved  integer NOT NULL,  -- of n, answers whose retrieved sources include it
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel, region, mode, question_revision, brand)
);

-- run x channel x brand, over all questions, regions and modes: the daily trend grain.
CREATE TABLE analytics.channel_brand_metrics (
  run_id            text NOT NULL,
  tenant_id         text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  channel           text NOT NULL,
  platform          text NOT NULL,
  brand             text NOT NULL,
  is_target         boolean NOT NULL,
  samples           integer NOT NULL,
  valid_samples     integer NOT NULL,
  invalid_samples   integer NOT NULL,
  analysing_samples integer NOT NULL,
  review_samples    integer NOT NULL,
  n                 integer NOT NULL,
  mentions          integer NOT NULL,
  mention_rate      double precision,
  mention_rate_lower double precision,
  mention_rate_upper double precision,
  avg_rank          double precision,
  domain_cited      integer NOT NULL,
  citation_rate     double precision,
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel, brand)
);
CREATE INDEX channel_brand_metrics_monitor
  ON analytics.channel_brand_metrics (monitor_id, channel, brand, scheduled_for);

-- Share of voice per run x channel x region x mode x brand, over the n analysed valid answers.
CREATE TABLE analytics.share_of_voice (
  run_id            text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  channel           text NOT NULL,
  region            text NOT NULL,
  mode              text NOT NULL,
  brand             text NOT NULL,
  is_target         boolean NOT NULL,
  n                 integer NOT NULL,  -- analysed valid answers of the cell
  answers_mentioning_brand integer NOT NULL,
  answers_mentioning_any_tracked_brand integer NOT NULL,
  share_of_answers_mentioning_any_brand double precision,  -- the two columns above, divided
  brand_mentions    integer NOT NULL,  -- sum of mention counts of this brand
  all_tracked_mentions integer NOT NULL,  -- sum of mention counts of every tracked brand
  share_of_all_tracked_mentions double precision,  -- brand_mentions / all_tracked_mentions
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel, region, mode, brand)
);

-- Source domains per run x engine (platform) x domain x relation, over valid answers.
CREATE TABLE analytics.source_domains (
  run_id            text NOT NULL,
  monitor_id        text,
  scheduled_for     date,
  platform          text NOT NULL,
  registrable_domain text NOT NULL,
  relation          text NOT NULL,     -- 'cited' (the answer points at it) or 'retrieved'
  citations         integer NOT NULL,  -- citation rows
  answers           integer NOT NULL,  -- valid answers with at least one such citation
  valid_answers     integer NOT NULL,  -- valid answers of the run on this engine (denominator)
  answer_rate       double precision,  -- answers / valid_answers
  refreshed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, platform, registrable_domain, relation)
);

-- Day over day per monitor x channel x brand: each run against the monitor's previous run.
-- significant: |z| >= 1.96 (two-sided 5 %), so a one-answer flip is not reported as a trend.
CREATE VIEW analytics.brand_day_over_day AS
SELECT w.monitor_id, w.channel, w.brand, w.is_target,
       w.scheduled_for, w.run_id, w.n, w.mentions, w.mention_rate,
       w.prev_scheduled_for, w.prev_run_id, w.prev_n, w.prev_mentions, w.prev_mention_rate,
       w.mention_rate - w.prev_mention_rate AS rate_change,
       analytics.two_proportion_z(w.prev_mentions, w.prev_n, w.mentions, w.n) AS z,
       coalesce(abs(analytics.two_proportion_z(w.prev_mentions, w.prev_n, w.mentions, w.n))
                >= 1.959963984540054, false) AS significant
  FROM (SELECT m.*,
               lag(m.scheduled_for) OVER win AS prev_scheduled_for,
               lag(m.run_id) OVER win AS prev_run_id,
               lag(m.n) OVER win AS prev_n,
               lag(m.mentions) OVER win AS prev_mentions,
               lag(m.mention_rate) OVER win AS prev_mention_rate
          FROM analytics.channel_brand_metrics m
         WHERE m.monitor_id IS NOT NULL AND m.scheduled_for IS NOT NULL
        WINDOW win AS (PARTITION BY m.monitor_id, m.channel, m.brand ORDER BY m.scheduled_for)) w;

-- ==== 0009_batched_triggers ====
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

-- ==== 0010_batch_hints ====
-- Collect hints per (batch, channel) instead of per sample (issues 2 and 4). A hint only wakes
-- a worker's lane (PostgreSQL decides what is due and fair), so one row per batch and channel
-- does what one row per sample did: a 100,000-sample run queues ~2,000 outbox rows, stream
-- entries and acks instead of 100,000. Hints naming one sample (lease expired, operator
-- verdicts, the sweeper) keep sample_id; batch hints have sample_id NULL and name the batch.
ALTER TABLE geo.outbox ADD COLUMN batch_no integer, ADD COLUMN channel text;
-- "Has this (run, channel, batch) a hint, and since when?": dispatch and the sweeper ask it.
CREATE INDEX outbox_collect_batches ON geo.outbox (run_id, channel, batch_no, created_at)
  WHERE kind = 'collect' AND sample_id IS NULL;

-- ==== 0011_screenshot_sweep ====
-- The sweeper re-queues screenshot downloads whose hint Redis lost (issue 4): it looks for
-- completed samples whose required screenshot is still pending. Only those are indexed.
CREATE INDEX samples_screenshot_pending ON geo.samples (completed_at)
  WHERE evidence_reason = 'SCREENSHOT_PENDING';

-- ==== 0012_dispatch_gate ====
-- A (run, channel) is worked on only once it is dispatched (issue 8: the sampling_plan asset
-- checks a partition's share of the plan, then dispatches it; a partition failing its checks
-- is never executed, R2/R3). Until now dispatch only queued wake-up hints: a confirmed run's
-- samples were claimable at once and the sweeper hinted them, checked or not.
CREATE TABLE geo.run_dispatches (
  run_id        text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  channel       text NOT NULL,
  dispatched_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel)
);
-- What was dispatched or worked on before this migration stays so.
INSERT INTO geo.run_dispatches (run_id, channel)
SELECT DISTINCT s.run_id, s.channel
FROM geo.samples s
WHERE s.attempt_no > 0 OR s.collection_state <> 'queued'
   OR EXISTS (SELECT 1 FROM geo.outbox o
               WHERE o.kind = 'collect'
                 AND (o.sample_id = s.sample_id
                      OR (o.sample_id IS NULL AND o.run_id = s.run_id AND o.channel = s.channel)))
ON CONFLICT DO NOTHING;

-- ==== 0013_publish_deadline ====
-- A partition publishes on its run's deadline: one odd sample must not empty an engine's numbers
-- for the day. Past the deadline, collection_results and everything downstream materialise with
-- the samples that are terminal; the others are recorded here as excluded, with the states that
-- explain them, once per publication. A later publication (a late completion) is a new row.

-- The deadline of every run: its creation plus the frozen snapshot's publish_deadline_seconds
-- (R2). Snapshots frozen before the setting existed carry no value and publish 6 hours after
-- creation, the config model's default.
CREATE VIEW geo.run_publish_deadlines AS
SELECT r.run_id, r.created_at, d.seconds AS publish_deadline_seconds,
       r.created_at + make_interval(secs => d.seconds) AS publish_deadline_at
  FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
 CROSS JOIN LATERAL (SELECT coalesce((c.config ->> 'publish_deadline_seconds')::integer, 21600)
                              AS seconds) d;

-- Why a sample is not terminal in the collection layer (so a publication excludes it), from
-- its layer states; NULL when it is terminal. The one definition of the reasons.
CREATE FUNCTION geo.exclusion_reason(submission_state text, collection_state text,
                                     attempt_no integer)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN collection_state IN ('completed', 'failed') THEN NULL
    WHEN submission_state = 'uncertain' THEN 'uncertain'      -- acceptance unknown (R12)
    WHEN submission_state = 'submitting' THEN 'submitting'    -- a request may be in flight
    WHEN submission_state = 'accepted' THEN 'polling'         -- upstream has it, no answer yet
    WHEN collection_state = 'running' THEN 'running'
    WHEN attempt_no > 0 THEN 'queued_retry'                   -- waiting for its next attempt
    ELSE 'queued'                                             -- never tried
  END
$$;

-- One row per materialisation of collection_results: what it published and what it left out.
CREATE TABLE geo.partition_publications (
  publication_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id          text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  channel         text NOT NULL,
  published_at    timestamptz NOT NULL DEFAULT now(),
  dagster_run_id  text,
  basis           text NOT NULL CHECK (basis IN ('complete', 'deadline')),
  deadline_at     timestamptz NOT NULL,
  samples         integer NOT NULL CHECK (samples >= 0),
  included        integer NOT NULL CHECK (included >= 0),   -- terminal when published
  excluded        integer NOT NULL CHECK (excluded >= 0),
  excluded_reasons jsonb NOT NULL DEFAULT '{}'::jsonb,      -- {reason: samples}
  CONSTRAINT publication_adds_up CHECK (included + excluded = samples),
  CONSTRAINT complete_excludes_nothing CHECK (basis = 'deadline' OR excluded = 0)
);
CREATE INDEX partition_publications_partition
  ON geo.partition_publications (run_id, channel, publication_id);

-- The excluded samples of each publication, with the states they were in then.
CREATE TABLE geo.publication_exclusions (
  publication_id  bigint NOT NULL REFERENCES geo.partition_publications ON DELETE CASCADE,
  sample_id       text NOT NULL,
  reason          text NOT NULL,
  submission_state text NOT NULL,
  collection_state text NOT NULL,
  attempt_no      integer NOT NULL,
  PRIMARY KEY (publication_id, sample_id)
);

-- The latest publication of every (run, channel) partition, for analysts.
CREATE VIEW analytics.partition_publications AS
SELECT p.run_id, p.channel, r.tenant_id, r.monitor_id, r.scheduled_for, p.publication_id,
       p.published_at, p.basis, p.deadline_at, p.samples, p.included, p.excluded,
       p.excluded::float8 / nullif(p.samples, 0) AS excluded_share, p.excluded_reasons
  FROM (SELECT DISTINCT ON (run_id, channel) *
          FROM geo.partition_publications ORDER BY run_id, channel, publication_id DESC) p
  JOIN geo.runs r ON r.run_id = p.run_id;

-- The samples the latest publication of each partition left out, with their states then and
-- now. still_excluded is false for a sample that became terminal later: the completion sensor
-- re-publishes its partition, and the next publication includes it.
CREATE VIEW analytics.excluded_samples AS
SELECT p.run_id, p.channel, p.tenant_id, p.monitor_id, p.scheduled_for, p.publication_id,
       p.published_at, p.deadline_at, e.sample_id, e.reason, e.submission_state,
       e.collection_state, e.attempt_no,
       s.submission_state AS current_submission_state,
       s.collection_state AS current_collection_state,
       geo.exclusion_reason(s.submission_state, s.collection_state, s.attempt_no) IS NOT NULL
         AS still_excluded
  FROM analytics.partition_publications p
  JOIN geo.publication_exclusions e ON e.publication_id = p.publication_id
  JOIN geo.samples s ON s.sample_id = e.sample_id;

-- The analyst tables say how many of a cell's samples were not terminal in collection when they
-- were refreshed: excluded from every rate (they are also among analysing_samples, R6).
ALTER TABLE analytics.brand_metrics
  ADD COLUMN collecting_samples integer NOT NULL DEFAULT 0;
ALTER TABLE analytics.channel_brand_metrics
  ADD COLUMN collecting_samples integer NOT NULL DEFAULT 0;

-- sample_status gains the collection state (a new last column; the rest is unchanged).
CREATE OR REPLACE VIEW analytics.sample_status AS
SELECT s.sample_id, s.run_id, s.tenant_id, s.question_revision, s.question_index,
       s.platform, s.device, s.channel, s.region, s.mode, s.repeat_index, s.analysis_state,
       a.revision AS answer_revision, a.captured_at,
       a.validity AS validity_judged, a.validity_reason,
       vd.verdict AS validity_reviewed,
       coalesce(vd.verdict, a.validity) AS validity,
       CASE
         WHEN s.analysis_state = 'accepted' AND coalesce(vd.verdict, a.validity) = 'valid'
           THEN 'known'
         WHEN s.analysis_state = 'pending' THEN 'analysing'
         WHEN s.analysis_state = 'review' THEN 'in_review'
         ELSE 'excluded'
       END AS mention_status,
       ac.detector_version, ac.answer_revision AS analysed_revision,
       s.collection_state
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.captured_at, a1.validity, a1.validity_reason
                       FROM geo.answers a1 WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (SELECT d.verdict FROM geo.review_decisions d
                      WHERE d.sample_id = s.sample_id AND d.subject = 'validity'
                      ORDER BY d.decision_id DESC LIMIT 1) vd ON true
  LEFT JOIN geo.analysis_current ac ON ac.sample_id = s.sample_id;

-- ---------------------------------------------------------------- 0015 send record
-- A request's acceptance record distinguishes "claimed, not sent" from "sent, answer unknown".
-- Claims write 'prepared' with no send time; a worker marks 'sending' (fenced by its token) in
-- the moment before the request leaves, and every re-send under the same key moves sent_at on.
-- So a failure before the send is known to have sent nothing (never parked as uncertain), and
-- a lookup's "not found" is trusted only once the last send is older than any request can
-- live (submit timeout + lease), counted from the real send time, not the claim.
ALTER TABLE geo.upstream_requests DROP CONSTRAINT upstream_requests_state_check;
ALTER TABLE geo.upstream_requests ADD CONSTRAINT upstream_requests_state_check
  CHECK (state IN ('prepared', 'sending', 'accepted', 'uncertain', 'not_accepted'));
ALTER TABLE geo.upstream_requests ALTER COLUMN state SET DEFAULT 'prepared';
ALTER TABLE geo.upstream_requests ALTER COLUMN sent_at DROP NOT NULL;
ALTER TABLE geo.upstream_requests ALTER COLUMN sent_at DROP DEFAULT;
-- How many times this key was sent (re-sends after an unknown outcome reuse the key).
ALTER TABLE geo.upstream_requests ADD COLUMN sends integer NOT NULL DEFAULT 0;

-- ==== 0017_tenancy ====
-- Tenants who cannot see each other. Competing brands share this database and analysts query it
-- directly, so isolation lives in PostgreSQL itself: roles, grants and row-level security.
--
--   geo_owner    owns every object of geo and analytics; migrations run as it (or a superuser).
--   geo_service  what the worker, relay, sweeper, Dagster and the operator CLI connect as (through a
--                login that is a member): all tenants (BYPASSRLS, because the run planner and the
--                analysis COPY rows in, and COPY FROM refuses tables whose RLS applies), no DDL,
--                and no UPDATE or DELETE on the append-only tables.
--   geo_analyst  the group of every analyst login. A login sees the rows of the ONE tenant that
--                geo.analyst_logins binds it to, read through current_user -- never through a
--                setting, which any session could change with set_config.
--
-- Roles are cluster-wide and many databases (one per test) run this file at the same time: the
-- three group roles have fixed names and are created only if missing, tolerating a concurrent
-- creator. Analyst logins are created by `geo-pipeline tenants grant-analyst`, not here.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT * FROM (VALUES ('geo_owner', 'NOLOGIN'),
                                 ('geo_service', 'NOLOGIN BYPASSRLS'),
                                 ('geo_analyst', 'NOLOGIN')) AS v(name, options) LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.name) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I %s', r.name, r.options);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;  -- another database's migration created it a moment ago
      END;
    END IF;
  END LOOP;
  IF NOT (SELECT rolbypassrls FROM pg_roles WHERE rolname = 'geo_service') THEN
    RAISE EXCEPTION 'role geo_service exists without BYPASSRLS; a superuser must run: '
                    'ALTER ROLE geo_service BYPASSRLS';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'geo_analyst'
               AND (rolbypassrls OR rolsuper OR rolcanlogin)) THEN
    RAISE EXCEPTION 'role geo_analyst must be a plain NOLOGIN group without BYPASSRLS';
  END IF;
END $$;

-- ---------------------------------------------------------------- tenant bindings and caps
-- Which tenant an analyst login reads. One login, one tenant: a person working for two brands
-- gets two logins, so a query can never mix them.
CREATE TABLE geo.analyst_logins (
  login           text PRIMARY KEY CHECK (login ~ '^[a-z_][a-z0-9_]{0,62}$'
                                          AND login NOT LIKE 'pg\_%'
                                          AND login NOT IN ('geo_owner', 'geo_service',
                                                            'geo_analyst', 'postgres')),
  tenant_id       text NOT NULL REFERENCES geo.tenants ON DELETE CASCADE,
  granted_at      timestamptz NOT NULL DEFAULT now(),
  granted_by      text NOT NULL DEFAULT current_user
);
CREATE INDEX analyst_logins_tenant ON geo.analyst_logins (tenant_id);

-- A tenant's submit rate per platform (R10), on top of the platform's own limit: one customer's
-- large run cannot use all of an engine's quota. No row = only the platform's limit applies.
CREATE TABLE geo.tenant_platform_limits (
  tenant_id       text NOT NULL REFERENCES geo.tenants ON DELETE CASCADE,
  platform        text NOT NULL,
  -- The upper bound also refuses NaN and infinity (NaN compares greater than any number).
  submits_per_second double precision NOT NULL
    CHECK (submits_per_second > 0 AND submits_per_second <= 100000),
  burst           integer NOT NULL CHECK (burst >= 1),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, platform)
);

-- The tenant of the connected analyst login; NULL for every other role (which then matches no
-- row). Not SECURITY DEFINER: it reads geo.analyst_logins as the caller, whose own policy shows
-- it its own row only.
CREATE FUNCTION geo.analyst_tenant() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT l.tenant_id FROM geo.analyst_logins l WHERE l.login = current_user
$$;

-- ---------------------------------------------------------------- ownership
DO $$
DECLARE
  o record;
BEGIN
  EXECUTE 'ALTER SCHEMA geo OWNER TO geo_owner';
  EXECUTE 'ALTER SCHEMA analytics OWNER TO geo_owner';
  FOR o IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname IN ('geo', 'analytics') AND c.relkind IN ('r', 'p', 'v', 'm') LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO geo_owner', o.name);
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname IN ('geo', 'analytics') LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO geo_owner', o.name);
  END LOOP;
END $$;

-- ---------------------------------------------------------------- the service role
GRANT USAGE ON SCHEMA geo, analytics TO geo_service;
GRANT SELECT ON ALL TABLES IN SCHEMA geo, analytics TO geo_service;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA geo, analytics TO geo_service;
-- Inserts where the processes write. Append-only and immutable tables get INSERT alone.
GRANT INSERT ON geo.tenants, geo.monitors, geo.config_snapshots, geo.question_revisions,
  geo.quote_snapshots, geo.quote_lines, geo.runs, geo.batches, geo.samples, geo.state_transitions,
  geo.attempts,
  geo.upstream_requests, geo.outbox, geo.dead_letters, geo.evidence_objects, geo.answers,
  geo.citations, geo.analysis_results, geo.mentions, geo.review_decisions, geo.ledger_entries,
  geo.fee_statements, geo.fee_statement_lines, geo.reconciliation_lines, geo.run_fee_rules,
  geo.run_accounts, geo.retention_log, geo.analysis_current, geo.run_dispatches,
  geo.partition_publications, geo.publication_exclusions, geo.tenant_platform_limits,
  analytics.brand_metrics, analytics.channel_brand_metrics, analytics.share_of_voice,
  analytics.source_domains
  TO geo_service;
-- Mutable state: leases and layers, attempt ends, acceptance records, relay marks, run
-- lifecycle, saved monitor configs, the analysis pointer, claim locks on tenants (FOR NO KEY
-- UPDATE needs UPDATE), rate caps, and the run accounts (written only by the ledger's trigger,
-- which runs as the caller; a trigger refuses direct writes).
GRANT UPDATE ON geo.tenants, geo.monitors, geo.runs, geo.samples, geo.attempts,
  geo.upstream_requests, geo.outbox, geo.analysis_current, geo.run_accounts,
  geo.tenant_platform_limits
  TO geo_service;
-- Deletes: retention (attempts, evidence records), re-analysis and re-reconciliation (a
-- partition write deletes then inserts), the analytics refresh, rate caps.
GRANT DELETE ON geo.attempts, geo.evidence_objects, geo.analysis_results, geo.analysis_current,
  geo.reconciliation_lines, geo.tenant_platform_limits, analytics.brand_metrics,
  analytics.channel_brand_metrics, analytics.share_of_voice, analytics.source_domains
  TO geo_service;
-- The service never reads or writes the login bindings: it cannot move an analyst to a tenant.
REVOKE ALL ON geo.analyst_logins FROM geo_service;

-- ---------------------------------------------------------------- analysts
GRANT USAGE ON SCHEMA geo, analytics TO geo_analyst;
-- Every object with tenant data, and the shared state rules. Not granted, on purpose:
-- geo.outbox and geo.dead_letters (stream transport: ids and routing, no business facts) and
-- geo.fee_statements / geo.fee_statement_lines (a platform's statement covers every tenant; a
-- tenant reads its own side in geo.reconciliation_lines).
GRANT SELECT ON geo.tenants, geo.monitors, geo.config_snapshots, geo.question_revisions,
  geo.quote_snapshots, geo.quote_lines, geo.runs, geo.batches, geo.allowed_transitions,
  geo.samples, geo.state_transitions, geo.attempts, geo.upstream_requests, geo.evidence_objects,
  geo.answers, geo.citations, geo.analysis_results, geo.mentions, geo.review_decisions,
  geo.ledger_entries, geo.reconciliation_lines, geo.run_fee_rules, geo.run_accounts,
  geo.retention_log, geo.analysis_current, geo.run_dispatches, geo.partition_publications,
  geo.publication_exclusions, geo.analyst_logins, geo.tenant_platform_limits,
  geo.account_balances, geo.run_billing, geo.run_publish_deadlines
  TO geo_analyst;
GRANT SELECT ON ALL TABLES IN SCHEMA analytics TO geo_analyst;

-- Views check permissions and policies as the querying role, not as their owner: otherwise a
-- view would read every tenant's rows with the owner's rights.
DO $$
DECLARE
  v record;
BEGIN
  FOR v IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'v' LOOP
    EXECUTE format('ALTER VIEW %s SET (security_invoker = true)', v.name);
  END LOOP;
END $$;

-- ---------------------------------------------------------------- row-level security
-- Enabled on every table: a role that is neither owner nor geo_service sees nothing unless a
-- policy lets it. Analyst policies key on geo.analyst_tenant() (evaluated once per query) or on
-- the parent row the analyst can already see; "x IN (SELECT ...)" plans as one hashed subplan.
DO $$
DECLARE
  t record;
BEGIN
  FOR t IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname IN ('geo', 'analytics') AND c.relkind IN ('r', 'p') LOOP
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t.name);
  END LOOP;
END $$;

-- Rows carrying their tenant.
CREATE POLICY analyst_tenant ON geo.tenants FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.monitors FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.config_snapshots FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.quote_snapshots FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.runs FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.samples FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.evidence_objects FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.ledger_entries FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.run_accounts FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.retention_log FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON geo.tenant_platform_limits FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON analytics.brand_metrics FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
CREATE POLICY analyst_tenant ON analytics.channel_brand_metrics FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));
-- An analyst sees its own binding (geo.analyst_tenant() reads it), nobody else's.
CREATE POLICY analyst_own_login ON geo.analyst_logins FOR SELECT TO geo_analyst
  USING (login = current_user);

-- Rows of a run.
CREATE POLICY analyst_tenant ON geo.batches FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.state_transitions FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.reconciliation_lines FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.run_fee_rules FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.run_dispatches FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON geo.partition_publications FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON analytics.share_of_voice FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));
CREATE POLICY analyst_tenant ON analytics.source_domains FOR SELECT TO geo_analyst
  USING (run_id IN (SELECT r.run_id FROM geo.runs r));

-- Rows of a sample.
CREATE POLICY analyst_tenant ON geo.attempts FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.upstream_requests FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.answers FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.citations FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.analysis_results FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.mentions FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.review_decisions FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));
CREATE POLICY analyst_tenant ON geo.analysis_current FOR SELECT TO geo_analyst
  USING (sample_id IN (SELECT s.sample_id FROM geo.samples s));

-- Rows of a quote, a publication, a question.
CREATE POLICY analyst_tenant ON geo.quote_lines FOR SELECT TO geo_analyst
  USING (quote_id IN (SELECT q.quote_id FROM geo.quote_snapshots q));
CREATE POLICY analyst_tenant ON geo.publication_exclusions FOR SELECT TO geo_analyst
  USING (publication_id IN (SELECT p.publication_id FROM geo.partition_publications p));
-- Question revisions are content-addressed and shared: a tenant sees a question's text only if
-- one of its own samples asked it (two tenants asking the same words each see their own ask).
CREATE POLICY analyst_tenant ON geo.question_revisions FOR SELECT TO geo_analyst
  USING (question_revision IN (SELECT s.question_revision FROM geo.samples s));

-- The state rules are the same for everyone and hold no tenant data.
CREATE POLICY analyst_shared ON geo.allowed_transitions FOR SELECT TO geo_analyst
  USING (true);
