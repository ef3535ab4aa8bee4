"""PostgreSQL side of the execution core (issue 4): fair claims, batched lease renewals, the
acceptance record, fenced end-of-attempt writes, the outbox relay, the sweeper and the operator
verdicts. SQL text lives in ``sql/queries/execution.sql``.

Every function runs its own transaction and names its actor (``SET LOCAL geo.actor``) so the
transition log says who moved each sample. Writes to a claimed sample carry its fencing token:
a stale token writes nothing (R11).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from geo_pipeline.billing import ledger
from geo_pipeline.domain.retry import Candidate, fair_pick
from geo_pipeline.observability.metrics import DB_WRITE_LATENCY, STALE_WRITES
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

try:  # the evidence issue lands in parallel; until then completions record no evidence rows
    from geo_pipeline import evidence as _evidence

    _record_evidence: Any = getattr(_evidence, "record_evidence", None)
except ImportError:  # pragma: no cover - depends on what has landed
    _record_evidence = None


def _actor(conn: Conn, actor: str) -> None:
    conn.execute(Q("execution.set_actor"), {"actor": actor})


# --------------------------------------------------------------------------- claims (R10, R11)
def claim_fair(
    conn: Conn,
    *,
    owner: str,
    platforms: Sequence[str],
    want: int,
    lease_s: float,
    lookup_platforms: Sequence[str] = (),
    aging_s: float = 60.0,
) -> list[dict[str, Any]]:
    """Claim up to ``want`` due samples of ``platforms``, fairly across tenants and within each
    tenant's max_in_flight, with priority aging (geo_pipeline.domain.retry.fair_pick)."""
    if want <= 0:
        return []
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, owner)
        cur.execute(
            Q("execution.claim_candidates"),
            {"platforms": list(platforms), "k": want, "lookup_platforms": list(lookup_platforms)},
        )
        rows = cur.fetchall()
        room = {r["tenant_id"]: int(r["room"]) for r in rows}
        picked = fair_pick(
            (
                Candidate(r["sample_id"], r["tenant_id"], int(r["priority"]), float(r["waited_s"]))
                for r in rows
            ),
            room,
            want,
            aging_s,
        )
        chosen = set(picked)
        tenants = sorted({r["tenant_id"] for r in rows if r["sample_id"] in chosen})
        claimed = _claim(cur, picked, owner, lease_s, tenants) if picked else []
    DB_WRITE_LATENCY.labels("claim").observe(time.perf_counter() - t0)
    return claimed


def claim_ids(
    conn: Conn, ids: Sequence[str], *, owner: str, lease_s: float
) -> list[dict[str, Any]]:
    """Claim exactly these samples where they are still claimable (skip the rest)."""
    if not ids:
        return []
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, owner)
        return _claim(cur, ids, owner, lease_s)


def _claim(
    cur: Any, ids: Sequence[str], owner: str, lease_s: float, tenants: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Lock the tenants claimed for (None: those of ``ids``), then claim within their room:
    two statements, so the claim's snapshot sees every claim of these tenants that committed
    while this one waited for the lock (max_in_flight holds under concurrent claims)."""
    cur.execute(
        Q("execution.lock_claim_tenants"),
        {"tenants": list(tenants) if tenants is not None else None, "ids": list(ids)},
    )
    cur.execute(Q("execution.claim"), {"ids": list(ids), "owner": owner, "lease_s": lease_s})
    return [dict(r) for r in cur.fetchall()]


def renew(
    conn: Conn, *, owner: str, lease_s: float, held: Sequence[tuple[str, int]]
) -> dict[str, bool]:
    """Extend every lease in ``held`` (sample_id, token) in one statement. Returns the samples
    still ours, each with whether its run was cancelled; the rest were lost."""
    if not held:
        return {}
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("execution.renew"),
            {
                "owner": owner,
                "lease_s": lease_s,
                "ids": [h[0] for h in held],
                "tokens": [h[1] for h in held],
            },
        )
        out = {r["sample_id"]: bool(r["cancelled"]) for r in cur.fetchall()}
    DB_WRITE_LATENCY.labels("renew").observe(time.perf_counter() - t0)
    return out


# --------------------------------------------------------------------------- acceptance (R9, R12)
@dataclass(frozen=True)
class AcceptanceRecord:
    sample_id: str
    token: int
    upstream_id: str
    resolved_by: str = "response"  # or 'lookup'


def record_acceptances(conn: Conn, *, owner: str, items: Sequence[AcceptanceRecord]) -> set[str]:
    """Record upstream acceptances; returns the samples written (the rest had stale tokens)."""
    if not items:
        return set()
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, owner)
        cur.execute(
            Q("execution.record_acceptance"),
            {
                "owner": owner,
                "ids": [i.sample_id for i in items],
                "tokens": [i.token for i in items],
                "upstream_ids": [i.upstream_id for i in items],
                "resolved_by": [i.resolved_by for i in items],
            },
        )
        done = {r["sample_id"] for r in cur.fetchall()}
    DB_WRITE_LATENCY.labels("accept").observe(time.perf_counter() - t0)
    stale = len(items) - len(done)
    if stale:
        STALE_WRITES.labels("accept").inc(stale)
    return done


def mark_sent(conn: Conn, *, owner: str, held: Sequence[tuple[str, int]]) -> set[str]:
    """Record that these (sample_id, token) requests are about to leave; returns the samples
    still ours (the rest must not send: another worker holds them now)."""
    if not held:
        return set()
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("execution.mark_sent"),
            {"owner": owner, "ids": [h[0] for h in held], "tokens": [h[1] for h in held]},
        )
        done = {r["sample_id"] for r in cur.fetchall()}
    DB_WRITE_LATENCY.labels("mark_sent").observe(time.perf_counter() - t0)
    if len(done) < len(held):
        STALE_WRITES.labels("mark_sent").inc(len(held) - len(done))
    return done


def note_lookup(conn: Conn, idempotency_key: str) -> None:
    with conn.transaction():
        conn.execute(Q("execution.note_lookup"), {"key": idempotency_key})


# --------------------------------------------------------------------------- end of an attempt
@dataclass
class Finish:
    """How one claimed attempt ends: the target states and the records that go with them."""

    sample_id: str
    token: int
    col_to: str  # 'completed' | 'failed' | 'queued' (handed back / retry later)
    sub_to: str | None = None  # None = unchanged
    ev_to: str | None = None
    ev_reason: str | None = None
    reason: str | None = None
    delay_s: float = 0.0
    outcome: str | None = None  # attempt outcome; None = unchanged
    error_class: str | None = None
    error_detail: str | None = None
    retry_after_ms: int | None = None
    req_state: str | None = None  # acceptance record: 'not_accepted' | 'uncertain'
    deep: bool | None = None
    shot: bool | None = None
    want_shot: bool = False  # a screenshot download is still to come (R10)
    charge: ledger.ChargeRequest | None = None
    archived: Any = None  # geo_pipeline.evidence ArchivedEvidence, recorded in the same tx
    # An upstream acceptance not written yet: recorded by this same write (the submission layer
    # moves to 'accepted' with the upstream id, the acceptance record and attempt follow).
    accept: AcceptanceRecord | None = None
    # The upstream task this attempt followed, when known: not written by this statement (the
    # acceptance did that), carried for the end-of-attempt log so an operator can find the task.
    upstream_id: str | None = None


@dataclass
class FinishResult:
    done: dict[str, str]  # sample_id -> collection state written
    stale: list[str]


def finish_batch(conn: Conn, *, owner: str, items: Sequence[Finish]) -> FinishResult:
    """Write the end of many attempts in ONE transaction guarded by their tokens (R11, R25):
    fence check, evidence records, ledger charges, sample layers, attempt rows, acceptance
    records and outbox rows. A stale item writes nothing at all and is counted."""
    if not items:
        return FinishResult({}, [])
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, owner)
        cur.execute(
            Q("execution.fence_lock"),
            {
                "owner": owner,
                "ids": [i.sample_id for i in items],
                "tokens": [i.token for i in items],
            },
        )
        ours = {r["sample_id"]: r for r in cur.fetchall()}
        # Ledger accounts are locked per run: take them in one order across all batches.
        live = sorted((i for i in items if i.sample_id in ours), key=lambda i: i.sample_id)
        live.sort(key=lambda i: i.charge.run_id if i.charge else "")
        for item in live:
            if item.archived is not None and _record_evidence is not None:
                outcome = _record_evidence(conn, item.archived)
                item.ev_to = getattr(outcome, "state", item.ev_to)
                item.ev_reason = getattr(outcome, "reason", item.ev_reason)
        charges = [i.charge for i in live if i.charge is not None]
        if charges:
            # One account lock and one round trip per run for the whole batch (R24 keys).
            ledger.post_charges(conn, charges)
        done: dict[str, str] = {}
        if live:
            params = _finish_params(owner, live)
            params["ctids"] = [ours[i.sample_id]["ctid"] for i in live]
            params["run_ids"] = [ours[i.sample_id]["run_id"] for i in live]
            params["sub_from"] = [ours[i.sample_id]["submission_state"] for i in live]
            cur.execute(Q("execution.finish"), params)
            done = {r["sample_id"]: r["collection_state"] for r in cur.fetchall()}
            if len(done) != len(live):
                # Locked rows that were not written: never commit their charges and evidence.
                missing = sorted({i.sample_id for i in live} - set(done))
                raise RuntimeError(
                    f"finish wrote {len(done)} of {len(live)} locked samples "
                    f"(first missing: {missing[:3]})"
                )
    DB_WRITE_LATENCY.labels("finish").observe(time.perf_counter() - t0)
    stale = [i.sample_id for i in items if i.sample_id not in done]
    if stale:
        STALE_WRITES.labels("finish").inc(len(stale))
    return FinishResult(done, stale)


def _finish_params(owner: str, items: Iterable[Finish]) -> dict[str, Any]:
    items = list(items)
    return {
        "owner": owner,
        "ids": [i.sample_id for i in items],
        "tokens": [i.token for i in items],
        "sub_to": [i.sub_to for i in items],
        "col_to": [i.col_to for i in items],
        "ev_to": [i.ev_to for i in items],
        "ev_reason": [i.ev_reason for i in items],
        "reason": [i.reason for i in items],
        "delay_s": [float(i.delay_s) for i in items],
        "outcome": [i.outcome for i in items],
        "error_class": [i.error_class for i in items],
        "error_detail": [(i.error_detail or "")[:500] or None for i in items],
        "retry_after_ms": [i.retry_after_ms for i in items],
        "req_state": [i.req_state for i in items],
        "deep": [i.deep for i in items],
        "shot": [i.shot for i in items],
        "want_shot": [i.want_shot for i in items],
        "acc_upstream_id": [i.accept.upstream_id if i.accept else None for i in items],
        "acc_resolved_by": [i.accept.resolved_by if i.accept else None for i in items],
    }


# --------------------------------------------------------------------------- relay and sweeper
def outbox_batch(conn: Conn, limit: int) -> list[dict[str, Any]]:
    """Unpublished outbox rows, locked by the caller's open transaction."""
    with conn.cursor() as cur:
        cur.execute(Q("execution.outbox_batch"), {"limit": limit})
        return [dict(r) for r in cur.fetchall()]


def outbox_mark(conn: Conn, ids: Sequence[int]) -> None:
    conn.execute(Q("execution.outbox_mark"), {"ids": list(ids)})


def sweep_expired(conn: Conn, *, actor: str, limit: int = 5000) -> list[str]:
    """Hand samples whose lease ran out back to the queue, each with a new hint."""
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, actor)
        cur.execute(Q("execution.sweep_expired"), {"limit": limit})
        return [r["sample_id"] for r in cur.fetchall()]


def sweep_unhinted(
    conn: Conn,
    *,
    grace_s: float,
    hint_ttl_s: float,
    lookup_platforms: Sequence[str],
    limit: int = 5000,
) -> list[int]:
    """Queue hints for due samples with no recent hint (Redis lost or trimmed it): one per
    (run, channel, batch), at most ``limit``. Returns how many samples each new hint covers."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("execution.sweep_unhinted"),
            {
                "grace_s": grace_s,
                "hint_ttl_s": hint_ttl_s,
                "lookup_platforms": list(lookup_platforms),
                "limit": limit,
            },
        )
        return [int(r["n"]) for r in cur.fetchall()]


def sweep_cancelled(conn: Conn, *, actor: str, limit: int = 5000) -> list[str]:
    """Fail with reason CANCELLED the unsubmitted (queued, planned) samples of cancelled runs
    that are still open, each with its completion event: nothing else would end them."""
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, actor)
        cur.execute(Q("execution.sweep_cancelled"), {"limit": limit})
        return [r["sample_id"] for r in cur.fetchall()]


def sweep_screenshots(conn: Conn, *, ttl_s: float, limit: int = 5000) -> list[str]:
    """Queue screenshot hints again for required screenshots still pending whose hint is older
    than ``ttl_s`` (Redis lost or trimmed it)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("execution.sweep_screenshots"), {"ttl_s": ttl_s, "limit": limit})
        return [r["sample_id"] for r in cur.fetchall()]


def uncertain_count(conn: Conn) -> int:
    with conn.cursor() as cur:
        cur.execute(Q("execution.uncertain_count"))
        row = cur.fetchone()
    return int(row["n"]) if row else 0


def record_dead_letter(
    conn: Conn,
    *,
    stream: str,
    message_id: str,
    event_id: str | None,
    sample_id: str | None,
    deliveries: int,
    reason: str,
) -> None:
    with conn.transaction():
        conn.execute(
            Q("execution.record_dead_letter"),
            {
                "stream": stream,
                "message_id": message_id,
                "event_id": event_id,
                "sample_id": sample_id,
                "deliveries": deliveries,
                "reason": reason,
            },
        )


# --------------------------------------------------------------------------- operators
class NotFoundError(LookupError):
    pass


class NotUncertain(ValueError):
    pass


def cancel_run(conn: Conn, run_id: str, *, actor: str) -> dict[str, Any]:
    """Record the cancel intent, fail the samples that never reached upstream (CANCELLED), and
    return the accepted tasks still open so the caller can ask upstream to stop them, and the
    samples in flight whose request may or may not have reached upstream (``submitting``: they
    end CANCELLED if it did not, or are followed like accepted ones if it did). Never refunds
    anything (R24)."""
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, actor)
        cur.execute(Q("execution.cancel_run"), {"run_id": run_id})
        row = cur.fetchone()
        if row is None:
            raise NotFoundError(f"no run with id {run_id!r}")
        cur.execute(Q("execution.cancel_unsubmitted"), {"run_id": run_id})
        cancelled = [r["sample_id"] for r in cur.fetchall()]
        cur.execute(Q("execution.accepted_of_run"), {"run_id": run_id})
        accepted = [dict(r) for r in cur.fetchall()]
        cur.execute(Q("execution.submitting_of_run"), {"run_id": run_id})
        submitting = [dict(r) for r in cur.fetchall()]
    return {
        "run_id": run_id,
        "cancel_requested_at": row["cancel_requested_at"],
        "cancelled_locally": len(cancelled),
        "accepted_open": accepted,
        "submitting": submitting,
    }


def list_uncertain(conn: Conn, run_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("execution.list_uncertain"), {"run_id": run_id, "limit": limit})
        return [dict(r) for r in cur.fetchall()]


def resolve_uncertain(
    conn: Conn,
    sample_id: str,
    *,
    accepted_upstream_id: str | None,
    note: str | None,
    actor: str,
) -> str:
    """An operator's verdict on an uncertain sample, as a guarded transition in the log (R12).
    Accepted: record the upstream id and queue the sample so a worker follows the task. Not
    accepted: close the attempt; the next attempt gets a new idempotency key."""
    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, actor)
        if accepted_upstream_id:
            cur.execute(
                Q("execution.resolve_accepted"),
                {
                    "sample_id": sample_id,
                    "upstream_id": accepted_upstream_id,
                    "note": note,
                    "actor": actor,
                },
            )
            verdict = "accepted"
        else:
            cur.execute(
                Q("execution.resolve_not_accepted"),
                {"sample_id": sample_id, "note": note, "actor": actor},
            )
            verdict = "not_accepted"
        if cur.fetchone() is None:
            cur.execute(Q("execution.sample_summary"), {"sample_id": sample_id})
            row = cur.fetchone()
            if row is None:
                raise NotUncertain(f"no sample with id {sample_id!r}")
            raise NotUncertain(
                f"sample {sample_id} is not waiting for an acceptance verdict: its submission is "
                f"{row['submission_state']}, its collection {row['collection_state']} "
                "(see `geo-pipeline samples uncertain`)"
            )
        cur.execute(
            Q("execution.review_decision"),
            {"sample_id": sample_id, "verdict": verdict, "note": note, "actor": actor},
        )
    return verdict


# --------------------------------------------------------------------------- late screenshots
def sample_for_screenshot(conn: Conn, sample_id: str) -> dict[str, Any] | None:
    with conn.cursor() as cur:
        cur.execute(Q("execution.sample_summary"), {"sample_id": sample_id})
        row = cur.fetchone()
    return dict(row) if row else None


def record_late_screenshot(conn: Conn, archived: Any, *, actor: str) -> str:
    """Record a screenshot downloaded from the screenshot stream and move the evidence layer
    (R10, R21): one transaction; returns the sample's evidence state afterwards."""
    from geo_pipeline.evidence import record_screenshot

    with conn.transaction(), conn.cursor() as cur:
        _actor(conn, actor)
        outcome = record_screenshot(conn, archived)
        cur.execute(
            Q("execution.set_late_evidence_state"),
            {"sample_id": archived.ref.sample_id, "state": outcome.state, "reason": outcome.reason},
        )
    return str(outcome.state)
