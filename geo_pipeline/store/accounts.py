"""The browser lane's accounts in PostgreSQL (``geo.accounts``, migration 0029): added, listed and
moved by the operator; leased by workers with a fencing token, one worker and one conversation
at a time, paced by a per-account minimum gap plus jitter and a daily budget.

``PgAccounts`` is the connector's ``AccountSource`` over this table (sync queries run in a
thread, as the worker's other database work). Nothing here holds a credential or a cookie: the
login lives in the account's browser profile directory (D2).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from geo_pipeline.connectors.browser.accounts import (
    ACCOUNT_STATES,
    AccountLease,
    Outcome,
    SentRecord,
    profile_dir,
)
from geo_pipeline.connectors.browser.spec import NoAccountReady
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

_PLATFORM = re.compile(r"^[a-z0-9_]{1,64}$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$")


class AccountError(ValueError):
    """A request about accounts that cannot be done as asked; the message says why."""


def check_ids(platform: str, account_id: str) -> None:
    if not _PLATFORM.match(platform):
        raise AccountError(
            f"platform {platform!r}: lower-case letters, digits and '_' only (1-64 characters)"
        )
    if not _ACCOUNT.match(account_id):
        raise AccountError(
            f"account id {account_id!r}: a letter or digit, then letters, digits or _ . @ + - "
            "(1-128 characters)"
        )


@dataclass(frozen=True)
class Pacing:
    daily_budget: int = 50
    min_gap_s: float = 5.0
    jitter_s: float = 5.0

    def check(self) -> None:
        for name, value in (
            ("daily_budget", self.daily_budget),
            ("min_gap_s", self.min_gap_s),
            ("jitter_s", self.jitter_s),
        ):
            if value < 0:
                raise AccountError(f"{name}: {value!r} must be >= 0")


def add_account(conn: Conn, platform: str, account_id: str, pacing: Pacing) -> bool:
    """Register an account (state ``needs_login`` until a person logs in); False when it exists."""
    check_ids(platform, account_id)
    pacing.check()
    row = conn.execute(
        Q("accounts.add"),
        {
            "platform": platform,
            "account_id": account_id,
            "daily_budget": pacing.daily_budget,
            "min_gap_s": pacing.min_gap_s,
            "jitter_s": pacing.jitter_s,
        },
    ).fetchone()
    return row is not None


def wake_waiting(conn: Conn, platform: str) -> int:
    """The platform's samples that waited for an account (login wall, captcha, none free) are
    due now: a person just logged an account in or resumed it. Returns how many."""
    return len(conn.execute(Q("accounts.wake_waiting"), {"platform": platform}).fetchall())


def list_accounts(conn: Conn, platform: str | None = None) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(Q("accounts.list"), {"platform": platform}).fetchall()]


def set_state(
    conn: Conn,
    platform: str,
    account_id: str,
    state: str,
    reason: str = "",
    cooling_until: datetime | None = None,
) -> None:
    if state not in ACCOUNT_STATES:
        raise AccountError(f"state {state!r}: allowed: {list(ACCOUNT_STATES)}")
    row = conn.execute(
        Q("accounts.set_state"),
        {
            "platform": platform,
            "account_id": account_id,
            "state": state,
            "reason": reason,
            "cooling_until": cooling_until,
        },
    ).fetchone()
    if row is None:
        raise AccountError(
            f"no account {account_id!r} of platform {platform!r}; add it with "
            f"`geo-pipeline accounts add {platform} {account_id}`"
        )


class PgAccounts:
    """``AccountSource`` over ``geo.accounts``. ``connect()`` gives a connection context (e.g. a
    pool's ``connection``); each call is its own short transaction."""

    def __init__(
        self,
        connect: Callable[[], AbstractContextManager[Conn]],
        owner: str,
        root: Path,
        *,
        lease_s: float = 600.0,
        rnd: Callable[[], float] = random.random,
    ):
        self._connect = connect
        self.owner = owner
        self.root = root
        self.lease_s = lease_s
        self._rnd = rnd
        self._gaps: dict[tuple[str, str, int], float] = {}

    def _run(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        with self._connect() as conn:
            row = conn.execute(Q(name), params).fetchone()
            conn.commit()
        return dict(row) if row is not None else None

    def _acquire(self, platform: str) -> AccountLease:
        row = self._run(
            "accounts.acquire", {"platform": platform, "owner": self.owner, "lease_s": self.lease_s}
        )
        if row is None:
            wait = self._run("accounts.next_free_in", {"platform": platform})
            wait_s = wait["wait_s"] if wait else None
            raise NoAccountReady(
                f"{platform}: no account may send now"
                + ("" if wait_s is not None else " (none ready: log in or resume one)"),
                retry_after_s=max(0.0, float(wait_s)) if wait_s is not None else None,
            )
        lease = AccountLease(
            platform,
            row["account_id"],
            int(row["fencing_token"]),
            profile_dir(self.root, platform, row["account_id"]),
        )
        gap = float(row["min_gap_s"]) + float(row["jitter_s"]) * self._rnd()
        self._gaps[(platform, lease.account_id, lease.token)] = gap
        return lease

    def _release(
        self,
        lease: AccountLease,
        outcome: Outcome,
        cool_s: float | None = None,
        detail: str | None = None,
    ) -> None:
        gap = self._gaps.pop((lease.platform, lease.account_id, lease.token), 0.0)
        params: dict[str, Any] = {
            "platform": lease.platform,
            "account_id": lease.account_id,
            "token": lease.token,
            "owner": self.owner,
        }
        if outcome == "sent":
            self._run("accounts.release_sent", {**params, "gap_s": gap})
        elif outcome == "not_sent":
            self._run("accounts.release_unused", params)
        elif outcome == "page_changed":
            detail = (detail or "the page changed")[:500]
            self._run("accounts.release_page_changed", {**params, "detail": detail})
        elif outcome == "rate_limited":
            self._run(
                "accounts.release_cooling",
                {
                    **params,
                    "cool_s": max(0.0, cool_s or 0.0),
                    "reason": "the page said too many requests",
                },
            )
        else:
            reason = (
                "the login wall: a person must log in again"
                if outcome == "needs_login"
                else "a captcha / risk-control page"
            )
            self._run("accounts.release_to_state", {**params, "state": outcome, "reason": reason})

    async def acquire(self, platform: str) -> AccountLease:
        return await asyncio.to_thread(self._acquire, platform)

    async def release(
        self,
        lease: AccountLease,
        outcome: Outcome,
        cool_s: float | None = None,
        detail: str | None = None,
    ) -> None:
        await asyncio.to_thread(self._release, lease, outcome, cool_s, detail)

    # ------------------------------------------------------------ the send journal (R12)
    def _note_send(
        self, lease: AccountLease, key: str, question: str, device: str, region: str
    ) -> bool:
        row = self._run(
            "accounts.note_send",
            {
                "platform": lease.platform,
                "account_id": lease.account_id,
                "token": lease.token,
                "owner": self.owner,
                "key": key,
                "question": question,
                "device": device,
                "region": region,
            },
        )
        return row is not None

    def _renew(self, lease: AccountLease) -> bool:
        row = self._run(
            "accounts.renew",
            {
                "platform": lease.platform,
                "account_id": lease.account_id,
                "token": lease.token,
                "owner": self.owner,
                "lease_s": self.lease_s,
            },
        )
        return row is not None

    def _sent(self, platform: str, key: str) -> SentRecord | None:
        row = self._run("accounts.sent_by_key", {"platform": platform, "key": key})
        if row is None:
            return None
        return SentRecord(
            row["account_id"],
            row["question"],
            row["device"],
            row["region"],
            tuple(row["same_question_keys"]),
        )

    def _acquire_account(self, platform: str, account_id: str) -> AccountLease:
        row = self._run(
            "accounts.acquire_one",
            {
                "platform": platform,
                "account_id": account_id,
                "owner": self.owner,
                "lease_s": self.lease_s,
            },
        )
        if row is None:
            why = self._run("accounts.lease_of", {"platform": platform, "account_id": account_id})
            if why is None:
                raise NoAccountReady(f"{platform} account {account_id}: not registered")
            held = why["lease_owner"] is not None and float(why["lease_left_s"] or 0) > 0
            raise NoAccountReady(
                f"{platform} account {account_id}: "
                + (f"leased to {why['lease_owner']}" if held else f"state {why['state']}")
                + "; its history cannot be read now",
                retry_after_s=float(why["lease_left_s"]) + 0.5 if held else None,
            )
        return AccountLease(
            platform,
            account_id,
            int(row["fencing_token"]),
            profile_dir(self.root, platform, account_id),
        )

    async def note_send(
        self, lease: AccountLease, key: str, question: str, device: str, region: str
    ) -> bool:
        return await asyncio.to_thread(self._note_send, lease, key, question, device, region)

    async def renew(self, lease: AccountLease) -> bool:
        return await asyncio.to_thread(self._renew, lease)

    async def sent(self, platform: str, key: str) -> SentRecord | None:
        return await asyncio.to_thread(self._sent, platform, key)

    async def acquire_account(self, platform: str, account_id: str) -> AccountLease:
        return await asyncio.to_thread(self._acquire_account, platform, account_id)
