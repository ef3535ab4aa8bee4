"""The append-only ledger (R15, R23, R24): estimate, reserve, charge, release, refund, adjustment.

Every money movement is one row of ``geo.ledger_entries`` with a unique idempotency key, so a
replayed completion or a duplicate callback finds the existing entry and posts nothing more.
Balances are sums over entries (views ``geo.account_balances`` and ``geo.run_billing``); the
per-run summary ``geo.run_accounts`` is maintained by a trigger on the entries, refuses direct
writes, and ``account_drift`` recomputes it from the entries.

The run lifecycle:

- ``record_run_created(conn, plan, confirm)``: called by ``flows.create_run`` inside its
  transaction. Freezes the platforms' retry fee rules for the run, posts the estimate and, with
  ``confirm``, reserves ``estimated_max`` (``InsufficientFunds`` rolls the whole creation back)
  and sets ``runs.confirmed_at``.
- ``post_charges(conn, charges)``: called by ``flows.complete`` inside the fenced completion
  transaction for the accepted attempts whose upstream task finished (``post_charge`` is the
  same path for one charge). Idempotent on ``charge:<sample_id>:<attempt_no>``.
- ``close_run(conn, run_id)``: releases what is left of the reservation, so that at close
  reserve + reservation adjustments = charge + release.

Charges above the reservation (the rule, R23): a charge is what the platform really billed, so it
is always recorded; the part the remaining reservation does not cover is first moved into the
reservation by an 'adjustment' entry with ``adjusts = 'reservation'`` and
``details.review = 'charge_exceeds_reservation'`` (see ``entries_for_review``). Nothing is posted
silently against money that was never reserved; a database constraint enforces it.

A local cancel refunds nothing (R24): accepted upstream tasks may still cost money, so refunds
are explicit (``refund``), follow reconciliation, and never exceed what was charged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from geo_pipeline.billing.errors import (
    BillingError,
    IdempotencyConflict,
    InsufficientFunds,
    RefundExceedsCharges,
    RunNotBillable,
)
from geo_pipeline.billing.prices import version_of
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain import billing as rules
from geo_pipeline.domain.catalogue import (
    RegistryError,
)
from geo_pipeline.domain.config_model import TENANT_RE
from geo_pipeline.domain.money import Money, MoneyError
from geo_pipeline.domain.usage import Usage
from geo_pipeline.store.queries import Q

if TYPE_CHECKING:
    from geo_pipeline.domain.plan import Plan
    from geo_pipeline.store.db import Conn

log = logging.getLogger(__name__)

REVIEW_OVER_RESERVATION = "charge_exceeds_reservation"


@dataclass(frozen=True)
class ChargeRequest:
    """One accepted attempt whose upstream task finished (R15): what was done, by whom."""

    tenant_id: str
    run_id: str
    sample_id: str
    attempt_no: int
    upstream_id: str
    platform: str
    mode: str
    upstream_outcome: str  # 'completed' or 'failed' (the upstream task's own outcome)
    deep_thinking_used: bool = False
    web_search_used: bool = False
    screenshot_used: bool = False
    # Request-level usage the engine reported with the response (None: none reported). Not
    # part of the charge: recorded on the attempt by the completion write, for reconciliation.
    usage: Usage | None = None
    # Credits the vendor reported for the task (services that bill credits; None: none
    # reported). Not part of the charge: kept in its details for reconciliation (issue 31).
    vendor_credits: int | None = None

    @property
    def idempotency_key(self) -> str:
        return f"charge:{self.sample_id}:{self.attempt_no}"


@dataclass(frozen=True)
class Balances:
    """A tenant's money, computed from its entries (R23)."""

    tenant_id: str
    available: Money
    reserved: Money
    spent: Money
    deposited: Money

    @property
    def currency(self) -> str:
        return self.available.currency

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "currency": self.currency,
            "available_minor": self.available.amount_minor,
            "reserved_minor": self.reserved.amount_minor,
            "spent_minor": self.spent.amount_minor,
            "deposited_minor": self.deposited.amount_minor,
        }


@dataclass(frozen=True)
class CloseResult:
    run_id: str
    released: Money
    closed_now: bool


class _Duplicate(Exception):
    """Internal: a charge of the batch was posted by someone else between the locked read and
    the insert; roll back the run's savepoint and decide its charges again."""


# --------------------------------------------------------------------------- entries
def _post(
    conn: Conn,
    *,
    tenant_id: str,
    kind: str,
    amount_minor: int,
    currency: str,
    idempotency_key: str,
    run_id: str | None = None,
    sample_id: str | None = None,
    attempt_no: int | None = None,
    upstream_id: str | None = None,
    price_version: str | None = None,
    details: Mapping[str, Any] | None = None,
    adjusts: str | None = None,
) -> int | None:
    """Insert one entry; None when the idempotency key already exists."""
    Money(rules.minor(amount_minor, f"{kind} amount"), currency)  # refuses floats, bad codes
    with conn.cursor() as cur:
        cur.execute(
            Q("billing.insert_entry"),
            {
                "tenant_id": tenant_id,
                "kind": kind,
                "amount_minor": amount_minor,
                "currency": currency,
                "run_id": run_id,
                "sample_id": sample_id,
                "attempt_no": attempt_no,
                "upstream_id": upstream_id,
                "price_version": price_version,
                "idempotency_key": idempotency_key,
                "details": Jsonb(dict(details or {})),
                "adjusts": adjusts,
            },
        )
        row = cur.fetchone()
    return None if row is None else int(row["entry_id"])


def _entry_by_key(conn: Conn, key: str) -> dict[str, Any] | None:
    with conn.cursor() as cur:
        cur.execute(Q("billing.entry_by_key"), {"idempotency_key": key})
        row = cur.fetchone()
    return None if row is None else dict(row)


def _replayed(conn: Conn, key: str, **expected: Any) -> int:
    """The existing entry of a replayed request; a different request under the same key is a
    conflict, never a silent success."""
    row = _entry_by_key(conn, key)
    assert row is not None
    differs = {k: (row.get(k), v) for k, v in expected.items() if row.get(k) != v}
    if differs:
        raise IdempotencyConflict(
            f"idempotency key {key!r} was already used for another movement: "
            + ", ".join(f"{k} is {have!r}, not {want!r}" for k, (have, want) in differs.items())
        )
    return int(row["entry_id"])


def _tenant_currency(conn: Conn, tenant_id: str) -> str | None:
    with conn.cursor() as cur:
        cur.execute(Q("billing.get_tenant"), {"tenant_id": tenant_id})
        row = cur.fetchone()
    return None if row is None else str(row["currency"])


def _run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(Q("billing.run_for_billing"), {"run_id": run_id})
        row = cur.fetchone()
    if row is None:
        raise RunNotBillable(f"no run with id {run_id!r}")
    return dict(row)


def _lock_account(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(Q("billing.lock_run_account"), {"run_id": run_id})
        row = cur.fetchone()
    if row is None:
        raise RunNotBillable(
            f"run {run_id} has no billing account (no estimate was recorded when it was created)"
        )
    return dict(row)


# --------------------------------------------------------------------------- tenants
# One deposit is at most this many minor units (10 trillion CNY): balances are sums of entries
# in bigint, and a mistyped amount must be refused before it makes every sum overflow.
MAX_DEPOSIT_MINOR = 10**15


def deposit_currencies() -> set[str]:
    """The currencies some registered platform quotes in: money in any other currency could
    never pay for a run (and the tenant would be locked to it)."""
    return {c.prices.currency for c in load_registry().capabilities().values()}


def deposit(conn: Conn, tenant: str, amount: int, currency: str, idempotency_key: str) -> int:
    """Add money to a tenant's account; returns the entry id (the existing one on a replay).
    The tenant is created on its first deposit, in that currency; a tenant's ledger has one
    currency."""
    money = Money(rules.minor(amount, "deposit"), currency)
    if money.amount_minor <= 0:
        raise BillingError(f"a deposit must be positive, got {amount}")
    if money.amount_minor > MAX_DEPOSIT_MINOR:
        raise BillingError(
            f"amount {amount} is more than one deposit may be: at most {MAX_DEPOSIT_MINOR} "
            "minor units"
        )
    allowed = deposit_currencies()
    if currency not in allowed:
        raise BillingError(
            f"currency {currency} is not one any platform quotes in; allowed: "
            f"{', '.join(sorted(allowed))}"
        )
    if not TENANT_RE.match(tenant):
        raise BillingError(
            f"{tenant!r} is not a tenant id: use 1-63 of a-z, 0-9, '_' or '-', "
            "starting with a letter or digit"
        )
    with conn.transaction():
        with conn.cursor() as cur:
            cur.execute(Q("billing.upsert_tenant"), {"tenant_id": tenant, "currency": currency})
        have = _tenant_currency(conn, tenant)
        if have != currency:
            raise BillingError(
                f"tenant {tenant} is billed in {have}; a deposit in {currency} cannot be booked"
            )
        entry = _post(
            conn,
            tenant_id=tenant,
            kind="deposit",
            amount_minor=amount,
            currency=currency,
            idempotency_key=idempotency_key,
        )
        if entry is None:
            return _replayed(
                conn, idempotency_key, kind="deposit", tenant_id=tenant, amount_minor=amount
            )
        return entry


def adjust(
    conn: Conn,
    tenant: str,
    amount: int,
    currency: str,
    reason: str,
    idempotency_key: str,
    *,
    run_id: str | None = None,
    actor: str | None = None,
) -> int:
    """A manual, signed correction of the tenant's available money (+ credit, - debit), with a
    reason; returns the entry id. For corrections reconciliation cannot express as a refund."""
    Money(rules.minor(amount, "adjustment"), currency)
    if amount == 0:
        raise BillingError("an adjustment of 0 moves nothing")
    if not reason.strip():
        raise BillingError("an adjustment needs a reason")
    with conn.transaction():
        have = _tenant_currency(conn, tenant)
        if have is None:
            raise BillingError(f"no tenant {tenant!r}")
        if have != currency:
            raise BillingError(f"tenant {tenant} is billed in {have}, not {currency}")
        entry = _post(
            conn,
            tenant_id=tenant,
            kind="adjustment",
            adjusts="available",
            amount_minor=amount,
            currency=currency,
            run_id=run_id,
            idempotency_key=idempotency_key,
            details={"reason": reason, "actor": actor},
        )
        if entry is None:
            return _replayed(
                conn, idempotency_key, kind="adjustment", tenant_id=tenant, amount_minor=amount
            )
        return entry


def balances(conn: Conn, tenant: str) -> Balances:
    """Available, reserved and spent money of a tenant, summed from its entries (R23).

    Run-linked sums are read from the run accounts the ledger trigger maintains (one row per
    run), so the cost grows with the number of runs, not of charges; ``balances_from_entries``
    is the plain definition over every entry, and the two are always equal (tested)."""
    return _balances(conn, tenant, "billing.tenant_balance")


def balances_from_entries(conn: Conn, tenant: str) -> Balances:
    """The same balances summed over every single entry (the ``geo.account_balances`` view)."""
    return _balances(conn, tenant, "billing.tenant_balance_from_entries")


def _balances(conn: Conn, tenant: str, query: str) -> Balances:
    currency = _tenant_currency(conn, tenant)
    if currency is None:
        raise BillingError(
            f"no tenant {tenant!r}: it appears with its first deposit "
            f"(`geo-pipeline billing deposit --tenant {tenant} --amount N`) or its first run"
        )
    with conn.cursor() as cur:
        cur.execute(Q(query), {"tenant_id": tenant, "currency": currency})
        row = cur.fetchone()
    r = dict(row) if row is not None else {}
    return Balances(
        tenant_id=tenant,
        available=Money(int(r.get("available_minor", 0)), currency),
        reserved=Money(int(r.get("reserved_minor", 0)), currency),
        spent=Money(int(r.get("spent_minor", 0)), currency),
        deposited=Money(int(r.get("deposited_minor", 0)), currency),
    )


def _fee_rules_for_versions(conn: Conn, versions: Mapping[str, str]) -> dict[str, str]:
    """Each platform's retry fee rule as the quoted version states it (an imported version),
    else as the registry states it."""
    out = _fee_rules_from_registry(sorted(versions))
    for p, version in versions.items():
        with conn.cursor() as cur:
            cur.execute(Q("prices.price_version"), {"platform": p, "version": version})
            row = cur.fetchone()
        if row is not None:
            out[p] = version_of(row).prices.retry_fee_rule
    return out


# --------------------------------------------------------------------------- run lifecycle
def _fee_rules_from_registry(platforms: list[str]) -> dict[str, str]:
    try:
        caps = load_registry().capabilities()
    except RegistryError:
        caps = {}
    # A platform we know nothing about bills every attempt: never assume a retry is free (R15).
    return {p: caps[p].prices.retry_fee_rule if p in caps else "charged" for p in platforms}


def record_run_created(
    conn: Conn,
    plan: Plan,
    confirm: bool,
    *,
    fee_rules: Mapping[str, str] | None = None,
) -> None:
    """At run creation (inside ``flows.create_run``'s transaction): freeze each platform's retry fee
    rule, post the estimate, and with ``confirm`` reserve ``estimated_max`` (R23).

    ``fee_rules``: {platform: retry_fee_rule}; default: the rule of the quoted price version
    (an imported one, else the connector registry's)."""
    q = plan.quote
    run_id = plan.run_id
    tenant = plan.config.tenant
    platforms = sorted(q.price_versions)
    rules_now = (
        dict(fee_rules)
        if fee_rules is not None
        else _fee_rules_for_versions(conn, q.price_versions)
    )
    with conn.transaction():
        billed_in = _tenant_currency(conn, tenant)
        if billed_in is not None and billed_in != q.currency:
            raise BillingError(
                f"tenant {tenant} is billed in {billed_in}, but run {run_id} is quoted in "
                f"{q.currency}; a tenant's ledger has one currency"
            )
        with conn.cursor() as cur:
            cur.executemany(
                Q("billing.insert_fee_rule"),
                [
                    {
                        "run_id": run_id,
                        "platform": p,
                        "price_version": q.price_versions[p],
                        "retry_fee_rule": rules_now.get(p, "charged"),
                    }
                    for p in platforms
                ],
            )
        _post(
            conn,
            tenant_id=tenant,
            kind="estimate",
            amount_minor=q.estimated_max.amount_minor,
            currency=q.currency,
            run_id=run_id,
            idempotency_key=f"estimate:{run_id}",
            details={"quote_id": q.quote_id, "price_versions": q.price_versions},
        )
        if confirm:
            _reserve(conn, run_id, tenant, q.estimated_max)


def _reserve(conn: Conn, run_id: str, tenant: str, amount: Money) -> None:
    with conn.cursor() as cur:
        cur.execute(Q("billing.lock_tenant"), {"tenant_id": tenant})
    if _entry_by_key(conn, f"reserve:{run_id}") is None:
        available = balances(conn, tenant).available
        if available < amount:
            raise InsufficientFunds(tenant, available, amount, run_id)
        _post(
            conn,
            tenant_id=tenant,
            kind="reserve",
            amount_minor=amount.amount_minor,
            currency=amount.currency,
            run_id=run_id,
            idempotency_key=f"reserve:{run_id}",
        )
    with conn.cursor() as cur:
        cur.execute(Q("billing.set_confirmed"), {"run_id": run_id})


def confirm_run(conn: Conn, run_id: str) -> Money:
    """Reserve the quote's ``estimated_max`` for a run created unconfirmed; idempotent.
    Returns the reserved amount. Refused for a closed or cancelled run."""
    with conn.transaction():
        run = _run(conn, run_id)
        _lock_account(conn, run_id)
        if run["closed_at"] is not None:
            raise RunNotBillable(f"run {run_id} is closed; a closed run cannot be confirmed")
        if run["cancel_requested_at"] is not None and run["confirmed_at"] is None:
            raise RunNotBillable(f"run {run_id} was cancelled before it was confirmed")
        amount = Money(int(run["estimated_max_minor"]), str(run["currency"]).strip())
        _reserve(conn, run_id, str(run["tenant_id"]), amount)
    return amount


def close_run(conn: Conn, run_id: str, *, force: bool = False) -> CloseResult:
    """Release the unused reservation and mark the run closed; idempotent (R23).

    Refused while samples are still queued or running (they may still cost money), unless
    ``force``; samples left 'uncertain' do not block it (they are counted in the release's
    details and verified by reconciliation). A charge that arrives after the close is still
    recorded, covered by a reservation adjustment flagged for review. Never refunds anything
    (R24)."""
    with conn.transaction():
        run = _run(conn, run_id)
        account = _lock_account(conn, run_id)
        currency = str(account["currency"]).strip()
        existing = _entry_by_key(conn, f"release:{run_id}")
        if existing is not None:
            return CloseResult(run_id, Money(int(existing["amount_minor"]), currency), False)
        with conn.cursor() as cur:
            cur.execute(Q("billing.run_activity"), {"run_id": run_id})
            act = dict(cur.fetchone() or {})
        if act.get("active") and not force:
            raise RunNotBillable(
                f"run {run_id} still has {act['active']} queued or running samples that may "
                "cost money; close it when they are terminal, or force it (a later charge is "
                "then covered by a reservation adjustment flagged for review)"
            )
        left = int(account["reservation_left_minor"])
        _post(
            conn,
            tenant_id=str(account["tenant_id"]),
            kind="release",
            amount_minor=left,
            currency=currency,
            run_id=run_id,
            idempotency_key=f"release:{run_id}",
            details={
                "forced": force,
                "cancel_requested": run["cancel_requested_at"] is not None,
                # accepted-or-not is unknown for these: reconciliation verifies them (R12, R24)
                "uncertain_samples": int(act.get("uncertain") or 0),
                "active_samples": int(act.get("active") or 0),
            },
        )
        with conn.cursor() as cur:
            cur.execute(Q("billing.set_closed"), {"run_id": run_id})
    return CloseResult(run_id, Money(left, currency), True)


def post_charge(conn: Conn, charge: ChargeRequest) -> int | None:
    """Charge one finished, accepted attempt at the run's quoted unit prices (R4, R15, R24).

    Runs in the caller's transaction (a savepoint of the fenced completion). Returns the new
    charge's entry id, or None when the charge already exists (a replay) or the platform's rule
    makes the attempt free; a free attempt still gets a zero charge entry recording that
    decision, so reconciliation can tell "free" from "never finished". One charge path: this is
    ``post_charges`` of a batch of one."""
    return post_charges(conn, [charge])[0]


def refund(
    conn: Conn,
    run_id: str,
    upstream_id: str,
    amount: int,
    reason: str,
    idempotency_key: str,
    *,
    actor: str | None = None,
) -> int:
    """Give back money charged for one upstream task, after reconciliation showed the platform
    did not bill it (R24). Never automatic; never more than was charged for that task net of
    earlier refunds. Returns the entry id (the existing one on a replay)."""
    rules.minor(amount, "refund")
    if amount <= 0:
        raise BillingError(f"a refund must be positive, got {amount}")
    if not reason.strip():
        raise BillingError("a refund needs a reason (e.g. the reconciliation line it settles)")
    with conn.transaction():
        account = _lock_account(conn, run_id)
        if _entry_by_key(conn, idempotency_key) is not None:
            return _replayed(
                conn,
                idempotency_key,
                kind="refund",
                run_id=run_id,
                upstream_id=upstream_id,
                amount_minor=amount,
            )
        with conn.cursor() as cur:
            cur.execute(Q("billing.upstream_money"), {"run_id": run_id, "upstream_id": upstream_id})
            money = dict(cur.fetchone() or {})
        charged, refunded = int(money["charged_minor"]), int(money["refunded_minor"])
        if charged == 0:
            raise RefundExceedsCharges(
                f"run {run_id} has no charge for upstream task {upstream_id}: nothing to refund "
                f"(see `geo-pipeline billing ledger {run_id}`)"
            )
        if refunded + amount > charged:
            raise RefundExceedsCharges(
                f"refund of {amount} for upstream task {upstream_id} in run {run_id} exceeds "
                f"what is left to refund: charged {charged}, already refunded {refunded} "
                f"({account['currency']} minor units)"
            )
        entry = _post(
            conn,
            tenant_id=str(account["tenant_id"]),
            kind="refund",
            amount_minor=amount,
            currency=str(account["currency"]).strip(),
            run_id=run_id,
            sample_id=money.get("sample_id"),
            attempt_no=money.get("attempt_no"),
            upstream_id=upstream_id,
            idempotency_key=idempotency_key,
            details={"reason": reason, "actor": actor},
        )
        assert entry is not None  # the key was checked under the run lock
        return entry


# --------------------------------------------------------------------------- reading
def run_ledger(conn: Conn, run_id: str) -> dict[str, Any]:
    """A run's entries in order, its totals recomputed from them, and its fee rules."""
    run = _run(conn, run_id)
    with conn.cursor() as cur:
        cur.execute(Q("billing.run_entries"), {"run_id": run_id})
        entries = [dict(r) for r in cur.fetchall()]
        cur.execute(Q("billing.run_billing"), {"run_id": run_id})
        totals = cur.fetchone()
        cur.execute(Q("billing.run_fee_rules"), {"run_id": run_id})
        fee_rules = [dict(r) for r in cur.fetchall()]
    return {
        "run_id": run_id,
        "tenant_id": run["tenant_id"],
        "currency": str(run["currency"]).strip(),
        "estimated_max_minor": int(run["estimated_max_minor"]),
        "confirmed_at": run["confirmed_at"],
        "cancel_requested_at": run["cancel_requested_at"],
        "closed_at": run["closed_at"],
        "totals": dict(totals) if totals else None,
        "fee_rules": fee_rules,
        "entries": entries,
    }


def account_drift(conn: Conn, run_id: str | None = None) -> list[dict[str, Any]]:
    """Runs whose maintained account disagrees with the sums of their entries (expected: [])."""
    with conn.cursor() as cur:
        cur.execute(Q("billing.account_drift"), {"run_id": run_id})
        return [dict(r) for r in cur.fetchall()]


def entries_for_review(conn: Conn, run_id: str | None = None) -> list[dict[str, Any]]:
    """Reservation adjustments posted because a charge exceeded what was reserved."""
    with conn.cursor() as cur:
        cur.execute(Q("billing.entries_for_review"), {"run_id": run_id})
        return [dict(r) for r in cur.fetchall()]


__all__ = [
    "Balances",
    "BillingError",
    "ChargeRequest",
    "CloseResult",
    "IdempotencyConflict",
    "InsufficientFunds",
    "MoneyError",
    "RefundExceedsCharges",
    "RunNotBillable",
    "account_drift",
    "adjust",
    "balances",
    "balances_from_entries",
    "close_run",
    "confirm_run",
    "deposit",
    "entries_for_review",
    "post_charge",
    "post_charges",
    "record_run_created",
    "refund",
    "run_ledger",
]


# --------------------------------------------------------------------------- batched charges
# The columns of billing.insert_entries besides details (sent as JSON text).
ENTRY_COLUMNS = ("tenant_id", "kind", "amount_minor", "currency", "run_id", "sample_id",
                 "attempt_no", "upstream_id", "price_version", "idempotency_key",
                 "adjusts")  # fmt: skip


def post_charges(conn: Conn, charges: list[ChargeRequest]) -> list[int | None]:
    """``post_charge`` for a whole completion batch of the execution core (same rules, keys and
    results as calling ``post_charge`` for each charge in order). Per run: ONE account lock, one
    read of the context (existing keys, fee rules, quote lines, samples already charged), the
    decisions computed with the same pure rules (the reservation left is carried from charge to
    charge), and the entries inserted in one pipelined round trip. Runs are taken in run_id order
    so concurrent batches never deadlock on account locks. Runs in the caller's transaction (a
    savepoint per run)."""
    results: list[int | None] = [None] * len(charges)
    by_run: dict[str, list[int]] = {}
    for i, c in enumerate(charges):
        rules.minor(c.attempt_no, "attempt_no")
        by_run.setdefault(c.run_id, []).append(i)
    for run_id in sorted(by_run):
        idx = by_run[run_id]
        for _ in range(len(idx) + 1):  # each retry sees at least one more existing key
            try:
                _post_run_charges(conn, run_id, charges, idx, results)
                break
            except _Duplicate:
                continue
        else:
            raise BillingError(f"charges of run {run_id} kept being posted concurrently")
    return results


def _post_run_charges(
    conn: Conn, run_id: str, charges: list[ChargeRequest], idx: list[int], results: list[int | None]
) -> None:
    """The charges ``charges[i]`` (i in ``idx``) of one run, in one savepoint; their entry ids
    go into ``results``. Raises ``_Duplicate`` (the savepoint rolled back, nothing posted) when
    one of them was posted by another transaction between the locked read and the insert."""
    with conn.transaction():
        account = _lock_account(conn, run_id)
        currency = str(account["currency"]).strip()
        left = int(account["reservation_left_minor"])
        keys = [charges[i].idempotency_key for i in idx]
        with conn.cursor() as cur:
            cur.execute(Q("billing.charges_context"), {"run_id": run_id, "keys": keys,
                        "sample_ids": [charges[i].sample_id for i in idx]})  # fmt: skip
            ctx = dict(cur.fetchone() or {})
        existing = set(ctx.get("existing_keys") or [])
        fee_rules = dict(ctx.get("fee_rules") or {})
        quote_lines = list(ctx.get("quote_lines") or [])
        charged = set(ctx.get("charged_samples") or [])
        posts: list[tuple[int | None, bool, dict[str, Any]]] = []  # (index, free, params)
        for i in idx:
            c = charges[i]
            if c.tenant_id != account["tenant_id"]:
                raise BillingError(
                    f"charge {c.idempotency_key} names tenant {c.tenant_id}, but run "
                    f"{run_id} is billed to {account['tenant_id']}"
                )
            if c.idempotency_key in existing:
                continue  # a replay: nothing posted, like post_charge
            existing.add(c.idempotency_key)
            rule = fee_rules.get(c.platform) or _fee_rules_from_registry([c.platform])[c.platform]
            prices = rules.unit_prices_from_quote(quote_lines, c.platform, c.mode)
            decision = rules.charge_for_attempt(
                prices,
                rule,
                c.upstream_outcome,
                deep_thinking_used=c.deep_thinking_used,
                web_search_used=c.web_search_used,
                screenshot_used=c.screenshot_used,
                sample_already_charged=c.sample_id in charged,
            )
            overrun = rules.over_reservation(decision.amount_minor, left)
            common: dict[str, Any] = {
                "tenant_id": c.tenant_id,
                "currency": currency,
                "run_id": c.run_id,
                "sample_id": c.sample_id,
                "attempt_no": c.attempt_no,
                "upstream_id": c.upstream_id,
                "price_version": prices.price_version,
            }
            if overrun:
                posts.append((None, False, {**common, "kind": "adjustment",
                    "adjusts": "reservation", "amount_minor": overrun,
                    "idempotency_key": f"overrun:{c.sample_id}:{c.attempt_no}",
                    "details": {"review": REVIEW_OVER_RESERVATION,
                                "charge_minor": decision.amount_minor,
                                "reservation_left_minor": left}}))  # fmt: skip
                left += overrun
                log.warning(
                    "charge %s of %d %s exceeds run %s's remaining reservation by %d; "
                    "reservation adjusted and flagged for review",
                    c.idempotency_key,
                    decision.amount_minor,
                    currency,
                    run_id,
                    overrun,
                )
            posts.append((i, decision.free, {**common, "kind": "charge", "adjusts": None,
                "amount_minor": decision.amount_minor,
                "idempotency_key": c.idempotency_key,
                "details": {"platform": c.platform, "mode": c.mode,
                            "upstream_outcome": c.upstream_outcome,
                            "retry_fee_rule": rule, "items": dict(decision.items),
                            "free_reason": decision.free_reason,
                            "unquoted": list(decision.unquoted),
                            **({"vendor_credits": c.vendor_credits}
                               if c.vendor_credits is not None else {})}}))  # fmt: skip
            left -= decision.amount_minor
            if decision.amount_minor > 0:
                charged.add(c.sample_id)
        if not posts:
            return
        for _, _, p in posts:
            Money(rules.minor(p["amount_minor"], f"{p['kind']} amount"), currency)
        # One INSERT for the run's entries: a column per parameter, details as JSON text.
        params: dict[str, Any] = {c: [p[c] for _, _, p in posts] for c in ENTRY_COLUMNS}
        params["details"] = [json.dumps(p["details"]) for _, _, p in posts]
        with conn.cursor() as cur:
            cur.execute(Q("billing.insert_entries"), params)
            ids = {r["idempotency_key"]: int(r["entry_id"]) for r in cur.fetchall()}
        if any(j is not None and p["idempotency_key"] not in ids for j, _, p in posts):
            raise _Duplicate  # posted meanwhile: roll back this run's entries (and overruns)
        for j, free, p in posts:
            if j is not None and not free:
                results[j] = ids[p["idempotency_key"]]
