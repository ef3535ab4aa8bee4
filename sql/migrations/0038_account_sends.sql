-- The browser lane's send journal (issue #32, R12): one row per question an account's browser
-- was about to send, written under the account's lease BEFORE the send click. After a crash
-- between the click and our record of the answer, the next worker knows which account may have
-- asked which question, on which device and region, and when -- and looks it up in that
-- account's conversation history instead of asking again. The question's text is kept because
-- the history sidebar is searched for it exactly; no credential or cookie is here (D2).
CREATE TABLE geo.account_sends (
  platform          text NOT NULL,
  idempotency_key   text NOT NULL,
  account_id        text NOT NULL,
  question          text NOT NULL,
  device            text NOT NULL,
  region            text NOT NULL,
  fencing_token     bigint NOT NULL,
  sent_at           timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (platform, idempotency_key),
  FOREIGN KEY (platform, account_id) REFERENCES geo.accounts (platform, account_id)
);
-- The same question sent by the same account, newest first (the sidebar's order).
CREATE INDEX account_sends_by_question ON geo.account_sends (platform, account_id, question, sent_at);

GRANT SELECT, INSERT, UPDATE ON geo.account_sends TO geo_service;
ALTER TABLE geo.account_sends OWNER TO geo_owner;
ALTER TABLE geo.account_sends ENABLE ROW LEVEL SECURITY;
