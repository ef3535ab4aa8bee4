-- 0001_initial: the whole system's tables. PostgreSQL is the truth; Redis only carries hints.
-- Money is integer minor units everywhere (R23). Every sample state change is a guarded
-- transition checked by a trigger against geo.allowed_transitions and logged (DESIGN.md section 4).

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
