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
