"""Accounts as leased resources for the browser lane: one account = one browser profile = one
conversation at a time, paced like a person (DESIGN section 9).

``AccountSource`` is what the connector asks: ``acquire`` leases a ready account of a platform
(with a fencing token) or raises ``NoAccountReady`` with when to ask again; ``release`` hands it
back with what happened, which moves its state (a login wall -> ``needs_login``, a captcha ->
``suspended``) and its pacing. ``LocalAccounts`` keeps that in memory (one process, tests);
``geo_pipeline.store.accounts.PgAccounts`` keeps it in PostgreSQL (``geo.accounts``) so two
workers never use one account at once. Credentials and cookies live only in the profile
directory on disk, never in the database or logs (D2).
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from geo_pipeline.connectors.browser.spec import NoAccountReady

# ``page_changed``: nothing was sent because the page lacks the controls the selectors name; the
# account is fine and records the change (the operations alert) until it sends again.
Outcome = Literal["sent", "not_sent", "needs_login", "suspended", "rate_limited", "page_changed"]
AccountState = Literal["ready", "needs_login", "cooling_down", "suspended"]
ACCOUNT_STATES: tuple[AccountState, ...] = ("ready", "needs_login", "cooling_down", "suspended")


@dataclass(frozen=True)
class AccountLease:
    platform: str
    account_id: str
    token: int  # fencing token: a release with a stale token changes nothing
    profile_dir: Path


@dataclass(frozen=True)
class Pacing:
    """Per-account minimum gap between two sends plus a random jitter (the research's rule after
    frozen accounts: slowly, 5 s plus 5 s jitter, section 3 Yuanbao)."""

    min_gap_s: float = 5.0
    jitter_s: float = 5.0

    def next_gap(self, rnd: float | None = None) -> float:
        return self.min_gap_s + self.jitter_s * (random.random() if rnd is None else rnd)


_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class QuietHours:
    """A daily window (local time of ``tz``) in which no account sends: ``HH:MM-HH:MM``, over
    midnight when the end is before the start. Only the clock decides, so every worker keeps
    the same window without sharing state."""

    start_min: int
    end_min: int
    tz: ZoneInfo

    @classmethod
    def parse(cls, text: str | None, tz: str, where: str = "quiet hours") -> QuietHours | None:
        if not text:
            return None
        m = _HHMM.match(text.strip())
        if m is None:
            raise ValueError(f"{where}: {text!r}: HH:MM-HH:MM is allowed, e.g. '23:30-07:00'")
        h1, m1, h2, m2 = (int(g) for g in m.groups())
        if (h1, m1) == (h2, m2):
            raise ValueError(f"{where}: {text!r} is an empty window; give different times")
        try:
            zone = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{where}: time zone {tz!r} is unknown; an IANA name is allowed, e.g. "
                "'Asia/Shanghai'"
            ) from None
        return cls(h1 * 60 + m1, h2 * 60 + m2, zone)

    def wait_s(self, now: datetime) -> float:
        """0 outside the window, else the seconds until it ends."""
        local = now.astimezone(self.tz)
        minute = local.hour * 60 + local.minute
        inside = (
            self.start_min <= minute < self.end_min
            if self.start_min < self.end_min
            else minute >= self.start_min or minute < self.end_min
        )
        if not inside:
            return 0.0
        end = local.replace(
            hour=self.end_min // 60, minute=self.end_min % 60, second=0, microsecond=0
        )
        if end <= local:
            end += timedelta(days=1)
        return (end - local).total_seconds()


def profile_dir(root: Path, platform: str, account_id: str) -> Path:
    """One persistent browser profile per platform and account (geo_client2's layout,
    ``browser_data/<platform>/<accountID>``)."""
    if not account_id or "/" in account_id or account_id.startswith("."):
        raise ValueError(f"account id {account_id!r}: must be non-empty, no '/' or leading '.'")
    return root / platform / account_id


@dataclass(frozen=True)
class SentRecord:
    """The send journal's entry of one idempotency key: which account was about to send which
    question, on which device and region, and every key of the same question that account sent,
    newest first (the history sidebar's order)."""

    account_id: str
    question: str
    device: str
    region: str
    same_question_keys: tuple[str, ...]


class AccountSource(Protocol):
    async def acquire(self, platform: str) -> AccountLease: ...

    async def release(
        self,
        lease: AccountLease,
        outcome: Outcome,
        cool_s: float | None = None,
        detail: str | None = None,
    ) -> None:
        """Hand the account back; ``rate_limited``: it cools down for ``cool_s``;
        ``page_changed``: ``detail`` says what the page lacked."""
        ...

    async def note_send(
        self, lease: AccountLease, key: str, question: str, device: str, region: str
    ) -> bool:
        """Journal the send under the lease, before the click; False: the lease is not ours."""
        ...

    async def renew(self, lease: AccountLease) -> bool:
        """Keep the lease while a capture runs; False: it is no longer ours."""
        ...

    async def sent(self, platform: str, key: str) -> SentRecord | None:
        """The journal's entry of ``key``; None: no account was ever about to send it."""
        ...

    async def acquire_account(self, platform: str, account_id: str) -> AccountLease:
        """Lease one named account for a history look-up (nothing is sent: pacing does not
        apply); ``NoAccountReady`` when someone else holds it or it cannot be used."""
        ...


@dataclass
class _Local:
    state: AccountState = "ready"
    leased: bool = False
    token: int = 0
    next_at: float = 0.0
    sent_today: int = 0
    page_changed: str | None = None  # what the page lacked, until a send succeeds again


@dataclass
class _Sent:
    account_id: str
    question: str
    device: str
    region: str
    seq: int


@dataclass
class LocalAccounts:
    """In-memory accounts of one process: ``{platform: [account ids]}``."""

    accounts: dict[str, list[str]]
    root: Path
    pacing: Pacing = field(default_factory=Pacing)
    daily_budget: int = 50
    clock: object = time.monotonic
    _state: dict[tuple[str, str], _Local] = field(default_factory=dict)
    _journal: dict[tuple[str, str], _Sent] = field(default_factory=dict)

    def state(self, platform: str, account_id: str) -> AccountState:
        return self._get(platform, account_id).state

    def set_state(self, platform: str, account_id: str, state: AccountState) -> None:
        self._get(platform, account_id).state = state

    def _get(self, platform: str, account_id: str) -> _Local:
        return self._state.setdefault((platform, account_id), _Local())

    def _now(self) -> float:
        return float(self.clock())  # type: ignore[operator]

    async def acquire(self, platform: str) -> AccountLease:
        now = self._now()
        waits: list[float] = []
        for account_id in self.accounts.get(platform, []):
            acc = self._get(platform, account_id)
            if acc.state == "cooling_down" and acc.next_at <= now:
                acc.state = "ready"
            if acc.state == "cooling_down" and not acc.leased:
                waits.append(acc.next_at - now)
                continue
            if acc.state != "ready" or acc.leased or acc.sent_today >= self.daily_budget:
                continue
            if acc.next_at > now:
                waits.append(acc.next_at - now)
                continue
            return self._lease(platform, account_id, acc)
        raise NoAccountReady(
            f"{platform}: no ready account free now",
            retry_after_s=min(waits) if waits else None,
        )

    def _lease(self, platform: str, account_id: str, acc: _Local) -> AccountLease:
        acc.leased = True
        acc.token += 1
        return AccountLease(
            platform, account_id, acc.token, profile_dir(self.root, platform, account_id)
        )

    async def note_send(
        self, lease: AccountLease, key: str, question: str, device: str, region: str
    ) -> bool:
        acc = self._get(lease.platform, lease.account_id)
        if acc.token != lease.token or not acc.leased:
            return False
        seq = len(self._journal)
        self._journal[(lease.platform, key)] = _Sent(
            lease.account_id, question, device, region, seq
        )
        return True

    async def renew(self, lease: AccountLease) -> bool:
        acc = self._get(lease.platform, lease.account_id)
        return acc.token == lease.token and acc.leased

    async def sent(self, platform: str, key: str) -> SentRecord | None:
        rec = self._journal.get((platform, key))
        if rec is None:
            return None
        same = sorted(
            (
                (s.seq, k)
                for (p, k), s in self._journal.items()
                if p == platform and s.account_id == rec.account_id and s.question == rec.question
            ),
            reverse=True,
        )
        return SentRecord(
            rec.account_id, rec.question, rec.device, rec.region, tuple(k for _, k in same)
        )

    async def acquire_account(self, platform: str, account_id: str) -> AccountLease:
        acc = self._get(platform, account_id)
        if acc.leased or acc.state not in ("ready", "cooling_down"):
            raise NoAccountReady(
                f"{platform} account {account_id}: "
                + ("leased" if acc.leased else f"state {acc.state}")
                + "; its history cannot be read now"
            )
        return self._lease(platform, account_id, acc)

    def page_changed(self, platform: str, account_id: str) -> str | None:
        return self._get(platform, account_id).page_changed

    async def release(
        self,
        lease: AccountLease,
        outcome: Outcome,
        cool_s: float | None = None,
        detail: str | None = None,
    ) -> None:
        acc = self._get(lease.platform, lease.account_id)
        if acc.token != lease.token or not acc.leased:
            return  # a stale lease: fenced off
        acc.leased = False
        if outcome == "page_changed":
            acc.page_changed = detail or "the page changed"
        if outcome == "sent":
            acc.page_changed = None
            acc.sent_today += 1
            acc.next_at = self._now() + self.pacing.next_gap()
        elif outcome == "needs_login":
            acc.state = "needs_login"
        elif outcome == "suspended":
            acc.state = "suspended"
        elif outcome == "rate_limited":
            acc.state = "cooling_down"
            acc.next_at = self._now() + (cool_s or 0.0)
