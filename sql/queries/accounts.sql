-- Accounts of the browser lane (migration 0029): add, list, lease, release, move. Every write
-- of a leaseholder carries (platform, account_id, fencing_token, lease_owner) in its WHERE: a
-- stale token matches nothing and writes nothing (R11), as for samples.

-- name: add
INSERT INTO geo.accounts (platform, account_id, daily_budget, min_gap_s, jitter_s)
VALUES (%(platform)s, %(account_id)s, %(daily_budget)s, %(min_gap_s)s, %(jitter_s)s)
ON CONFLICT (platform, account_id) DO NOTHING
RETURNING platform, account_id, state;

-- name: list
SELECT platform, account_id, state, state_reason, state_changed_at, daily_budget, min_gap_s,
       jitter_s,
       CASE WHEN sends_day = (now() AT TIME ZONE 'UTC')::date THEN sends_today ELSE 0 END
         AS sends_today,
       last_used_at, greatest(next_send_at, now()) AS next_send_at, cooling_until,
       lease_owner, lease_expires_at, fencing_token
FROM geo.accounts
WHERE %(platform)s::text IS NULL OR platform = %(platform)s
ORDER BY platform, account_id;

-- name: acquire
-- The least recently used account of the platform that may send now: ready (or done cooling
-- down), not leased (or its lease expired), its gap passed, its daily budget not spent.
-- SKIP LOCKED: two workers never wait on, or take, the same account.
WITH c AS (
  SELECT platform, account_id FROM geo.accounts
  WHERE platform = %(platform)s
    AND (state = 'ready' OR (state = 'cooling_down' AND cooling_until <= now()))
    AND (lease_owner IS NULL OR lease_expires_at < now())
    AND (next_send_at IS NULL OR next_send_at <= now())
    AND (sends_day IS DISTINCT FROM (now() AT TIME ZONE 'UTC')::date
         OR sends_today < daily_budget)
  ORDER BY last_used_at NULLS FIRST, account_id
  LIMIT 1
  FOR UPDATE SKIP LOCKED
)
UPDATE geo.accounts a
SET lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease_s)s),
    fencing_token = a.fencing_token + 1,
    state = 'ready'
FROM c
WHERE a.platform = c.platform AND a.account_id = c.account_id
RETURNING a.account_id, a.fencing_token, a.min_gap_s, a.jitter_s;

-- name: next_free_in
-- Seconds until an account of the platform may be leased by pacing alone (NULL: none will be
-- without a person: every account needs a login, is suspended, or spent its budget).
SELECT extract(epoch FROM min(greatest(next_send_at, coalesce(lease_expires_at, now()),
                                       coalesce(cooling_until, now())) - now()))::float8
         AS wait_s
FROM geo.accounts
WHERE platform = %(platform)s AND state IN ('ready', 'cooling_down')
  AND (sends_day IS DISTINCT FROM (now() AT TIME ZONE 'UTC')::date
       OR sends_today < daily_budget);

-- name: release_sent
-- A question was sent: it counts against the day's budget, and the next send waits gap_s. The
-- page had the controls the selectors name, so a changed page it recorded is cleared.
UPDATE geo.accounts
SET lease_owner = NULL, lease_expires_at = NULL, last_used_at = now(),
    page_changed_at = NULL, page_changed_detail = NULL,
    next_send_at = now() + make_interval(secs => %(gap_s)s),
    sends_today = CASE WHEN sends_day = (now() AT TIME ZONE 'UTC')::date
                       THEN sends_today + 1 ELSE 1 END,
    sends_day = (now() AT TIME ZONE 'UTC')::date
WHERE platform = %(platform)s AND account_id = %(account_id)s
  AND fencing_token = %(token)s AND lease_owner = %(owner)s
RETURNING account_id;

-- name: release_unused
-- Nothing was sent: the lease ends, nothing else changes.
UPDATE geo.accounts SET lease_owner = NULL, lease_expires_at = NULL
WHERE platform = %(platform)s AND account_id = %(account_id)s
  AND fencing_token = %(token)s AND lease_owner = %(owner)s
RETURNING account_id;

-- name: release_to_state
-- The page showed a login wall ('needs_login') or a captcha ('suspended'): the lease ends and
-- the account leaves the pool until a person acts.
UPDATE geo.accounts
SET lease_owner = NULL, lease_expires_at = NULL, state = %(state)s, state_reason = %(reason)s,
    state_changed_at = now()
WHERE platform = %(platform)s AND account_id = %(account_id)s
  AND fencing_token = %(token)s AND lease_owner = %(owner)s
RETURNING account_id;

-- name: set_state
-- An operator moves an account (suspend, resume, after a login). A lease in flight keeps its
-- token; its release will find the new state and, for needs_login/suspended, keep it.
UPDATE geo.accounts
SET state = %(state)s, state_reason = %(reason)s, state_changed_at = now(),
    cooling_until = CASE WHEN %(state)s::text = 'cooling_down'
                         THEN %(cooling_until)s::timestamptz END
WHERE platform = %(platform)s AND account_id = %(account_id)s
RETURNING platform, account_id, state;

-- name: note_send
-- The send journal (migration 0038): written under the account's lease just before the send
-- click. No row when the lease is no longer ours (a stale token sends nothing).
INSERT INTO geo.account_sends (platform, idempotency_key, account_id, question, device, region,
                               fencing_token)
SELECT a.platform, %(key)s, a.account_id, %(question)s, %(device)s, %(region)s, a.fencing_token
FROM geo.accounts a
WHERE a.platform = %(platform)s AND a.account_id = %(account_id)s
  AND a.fencing_token = %(token)s AND a.lease_owner = %(owner)s
ON CONFLICT (platform, idempotency_key) DO UPDATE
  SET account_id = EXCLUDED.account_id, fencing_token = EXCLUDED.fencing_token,
      device = EXCLUDED.device, region = EXCLUDED.region, sent_at = now()
RETURNING sent_at;

-- name: sent_by_key
-- Which account may have sent this key's question, and every send of the same question by that
-- account, newest first (the history sidebar's order): the look-up matches them one to one.
SELECT s.account_id, s.question, s.device, s.region, s.sent_at,
       array_agg(o.idempotency_key ORDER BY o.sent_at DESC, o.idempotency_key DESC)
         AS same_question_keys
FROM geo.account_sends s
JOIN geo.account_sends o
  ON o.platform = s.platform AND o.account_id = s.account_id AND o.question = s.question
WHERE s.platform = %(platform)s AND s.idempotency_key = %(key)s
GROUP BY s.account_id, s.question, s.device, s.region, s.sent_at;

-- name: acquire_one
-- One named account for a look-up in its history (nothing is sent, so its pacing and budget do
-- not apply): ready or cooling down, and not leased to anyone else (or that lease expired).
UPDATE geo.accounts a
SET lease_owner = %(owner)s,
    lease_expires_at = now() + make_interval(secs => %(lease_s)s),
    fencing_token = a.fencing_token + 1
WHERE a.platform = %(platform)s AND a.account_id = %(account_id)s
  AND a.state IN ('ready', 'cooling_down')
  AND (a.lease_owner IS NULL OR a.lease_expires_at < now())
RETURNING a.account_id, a.fencing_token, a.state, a.lease_owner;

-- name: lease_of
-- Why an account cannot be leased now (for the look-up's message and its retry time).
SELECT state, lease_owner,
       extract(epoch FROM greatest(lease_expires_at - now(), interval '0'))::float8 AS lease_left_s
FROM geo.accounts WHERE platform = %(platform)s AND account_id = %(account_id)s;

-- name: renew
-- A capture still running keeps its account: a dead worker's lease runs out lease_s after its
-- last renewal, a live one's never does.
UPDATE geo.accounts SET lease_expires_at = now() + make_interval(secs => %(lease_s)s)
WHERE platform = %(platform)s AND account_id = %(account_id)s
  AND fencing_token = %(token)s AND lease_owner = %(owner)s
RETURNING account_id;

-- name: release_cooling
-- The page said "too many requests": nothing was sent; the account cools down for the page's
-- hint (acquire takes it again once cooling_until has passed).
UPDATE geo.accounts
SET lease_owner = NULL, lease_expires_at = NULL, state = 'cooling_down',
    state_reason = %(reason)s, state_changed_at = now(),
    cooling_until = now() + make_interval(secs => %(cool_s)s)
WHERE platform = %(platform)s AND account_id = %(account_id)s
  AND fencing_token = %(token)s AND lease_owner = %(owner)s
RETURNING account_id;

-- name: release_page_changed
-- The page no longer has the controls the selectors name: nothing was sent, the lease ends,
-- the account stays as it was and records the change (the operations alert reads it).
UPDATE geo.accounts
SET lease_owner = NULL, lease_expires_at = NULL,
    page_changed_at = coalesce(page_changed_at, now()), page_changed_detail = %(detail)s
WHERE platform = %(platform)s AND account_id = %(account_id)s
  AND fencing_token = %(token)s AND lease_owner = %(owner)s
RETURNING account_id;

-- name: wake_waiting
-- A person logged an account in or resumed it: the platform's samples that waited for an
-- account (login wall, captcha, none free) are due now, not after their doubled wait. Only
-- samples no worker holds (queued) and that wait for one of those causes move.
UPDATE geo.samples
SET next_attempt_at = now()
WHERE platform = %(platform)s AND collection_state = 'queued' AND next_attempt_at > now()
  AND collection_reason IN ('unavailable:needs_login', 'unavailable:account_suspended',
                            'unavailable:no_account')
RETURNING sample_id;
