-- Accounts of the browser lane (issue #32, DESIGN section 9): one consumer-app account = one
-- browser profile = one conversation at a time, leased to one worker with a fencing token like a
-- sample (R11), paced like a person (a minimum gap plus jitter, a daily budget). Its state moves
-- on what the page showed: a login wall -> 'needs_login' (its samples wait, nothing is charged),
-- a captcha or risk page -> 'suspended' (no retry storm; an operator resumes it). The operator's
-- accounts serve every tenant: no tenant column.
-- Credentials and cookies never enter the database (D2): the login lives only in the account's
-- browser profile directory on the worker's disk (imported there by `accounts login`).
CREATE TABLE geo.accounts (
  platform          text NOT NULL CHECK (platform ~ '^[a-z0-9_]{1,64}$'),
  account_id        text NOT NULL CHECK (account_id ~ '^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$'),
  state             text NOT NULL DEFAULT 'needs_login'
                    CHECK (state IN ('ready', 'needs_login', 'cooling_down', 'suspended')),
  state_reason      text NOT NULL DEFAULT '',
  state_changed_at  timestamptz NOT NULL DEFAULT now(),
  -- Pacing: the next send no sooner than next_send_at (last send + min_gap_s + jitter), at most
  -- daily_budget sends per UTC day; 'cooling_down' until cooling_until.
  daily_budget      integer NOT NULL DEFAULT 50 CHECK (daily_budget >= 0),
  min_gap_s         double precision NOT NULL DEFAULT 5 CHECK (min_gap_s >= 0),
  jitter_s          double precision NOT NULL DEFAULT 5 CHECK (jitter_s >= 0),
  sends_day         date,
  sends_today       integer NOT NULL DEFAULT 0 CHECK (sends_today >= 0),
  last_used_at      timestamptz,
  next_send_at      timestamptz,  -- NULL: may send now
  cooling_until     timestamptz,
  -- The lease: one worker at a time; every write of a leaseholder carries its token.
  lease_owner       text,
  lease_expires_at  timestamptz,
  fencing_token     bigint NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (platform, account_id),
  CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

-- The workers lease and release accounts, the operator CLI adds and moves them; analysts see no
-- account (operator data, not a tenant's).
GRANT SELECT, INSERT, UPDATE ON geo.accounts TO geo_service;
ALTER TABLE geo.accounts OWNER TO geo_owner;
ALTER TABLE geo.accounts ENABLE ROW LEVEL SECURITY;

-- A browser capture keeps, beside the raw stream (response_raw), the rendered page's HTML
-- ('page_html', kept, never rendered) and how it was captured ('capture': device emulation,
-- region, account, the search queries the engine ran) as parts of the answer's bundle.
ALTER TABLE geo.evidence_objects
  DROP CONSTRAINT evidence_objects_kind_check,
  ADD CONSTRAINT evidence_objects_kind_check CHECK (kind IN (
    'answer_raw', 'answer_html', 'citations', 'response_raw', 'screenshot', 'thumbnail',
    'page_html', 'capture'));
