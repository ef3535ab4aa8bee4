"""PostgreSQL side of the execution core: fair claims, batched lease renewals, the acceptance
record, the fence and the statement of end-of-attempt writes, the outbox relay, the sweeper and
the operator verdicts. SQL text lives in ``sql/queries/execution.sql``. The end of an attempt
also records evidence and charges in the same transaction: that crosses parts, so it is
``geo_pipeline.flows.complete``, built on ``fence_lock`` and ``write_finish`` here.

Every function runs its own transaction and names its actor (``SET LOCAL geo.actor``) so the
transition log says who moved each sample. Writes to a claimed sample carry its fencing token:
a stale token writes nothing (R11).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from geo_pipeline.domain.retry import Candidate, fair_pick
from geo_pipeline.domain.streams import STREAM_PARAMS
from geo_pipeline.observability.metrics import DB_WRITE_LATENCY, STALE_WRITES
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def set_actor(conn: Conn, actor: str) -> None:
    """Name who moves samples in this transaction, for the transition log."""
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
    retention_s: Mapping[str, float | None] | None = None,
) -> list[dict[str, Any]]:
    """Claim up to ``want`` due samples of ``platforms``, fairly across tenants and within each
    tenant's max_in_flight, with priority aging (geo_pipeline.domain.retry.fair_pick).
    ``retention_s``: per platform, how long its service keeps a result; accepted samples of
    such a platform are claimed first, by fetch deadline."""
    keeps = retention_s or {}
    if want <= 0:
        return []
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        set_actor(conn, owner)
        cur.execute(Q("execution.claim_without_jit"))  # compiling it cost seconds per claim
        cur.execute(
            Q("execution.claim_candidates"),
            {"platforms": list(platforms), "k": want, "lookup_platforms": list(lookup_platforms)},
        )
        rows = cur.fetchall()
        room = {r["tenant_id"]: int(r["room"]) for r in rows}
        picked = fair_pick(
            (
                Candidate(
                    r["sample_id"],
                    r["tenant_id"],
                    int(r["priority"]),
                    float(r["waited_s"]),
                    fetch_deadline(keeps.get(r["platform"]), r["accepted_age_s"]),
                )
                for r in rows
            ),
            room,
            want,
            aging_s,
        )
        chosen = set(picked)
        tenants = sorted({r["tenant_id"] for r in rows if r["sample_id"] in chosen})
        claimed = _claim(cur, picked, owner, lease_s, lookup_platforms, tenants) if picked else []
    DB_WRITE_LATENCY.labels("claim").observe(time.perf_counter() - t0)
    return claimed


def fetch_deadline(retention_s: float | None, accepted_age_s: float | None) -> float | None:
    """Seconds until an accepted task's result is gone upstream; None when nothing expires."""
    if retention_s is None or accepted_age_s is None:
        return None
    return float(retention_s) - float(accepted_age_s)


def claim_ids(
    conn: Conn, ids: Sequence[str], *, owner: str, lease_s: float
) -> list[dict[str, Any]]:
    """Claim exactly these samples where they are still claimable (skip the rest); an uncertain
    one whatever its platform (the caller chose it)."""
    if not ids:
        return []
    with conn.transaction(), conn.cursor() as cur:
        set_actor(conn, owner)
        return _claim(cur, ids, owner, lease_s, None)


def _claim(
    cur: Any,
    ids: Sequence[str],
    owner: str,
    lease_s: float,
    lookup_platforms: Sequence[str] | None,
    tenants: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Lock the tenants claimed for (None: those of ``ids``), then claim within their room:
    two statements, so the claim's snapshot sees every claim of these tenants that committed
    while this one waited for the lock (max_in_flight holds under concurrent claims)."""
    cur.execute(
        Q("execution.lock_claim_tenants"),
        {"tenants": list(tenants) if tenants is not None else None, "ids": list(ids)},
    )
    cur.execute(
        Q("execution.claim"),
        {
            "ids": list(ids),
            "owner": owner,
            "lease_s": lease_s,
            "lookup_platforms": None if lookup_platforms is None else list(lookup_platforms),
        },
    )
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
        set_actor(conn, owner)
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
def fence_lock(
    conn: Conn, *, owner: str, ids: Sequence[str], tokens: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """Lock, for the rest of the caller's transaction, the samples still ours: this owner, this
    fencing token, still running (R11). The rows (ctid, run_id, submission_state) feed
    ``write_finish``; a sample missing here is stale and must get nothing written."""
    with conn.cursor() as cur:
        cur.execute(
            Q("execution.fence_lock"), {"owner": owner, "ids": list(ids), "tokens": list(tokens)}
        )
        return {r["sample_id"]: r for r in cur.fetchall()}


def write_finish(conn: Conn, params: dict[str, Any]) -> dict[str, str]:
    """The end-of-attempt statement for samples ``fence_lock`` returned (one array per column,
    see ``execution.finish``): sample layers, attempt rows, acceptance records and outbox rows
    in one statement. Returns sample_id -> the collection state written."""
    with conn.cursor() as cur:
        cur.execute(Q("execution.finish"), {**STREAM_PARAMS, **params})
        return {r["sample_id"]: r["collection_state"] for r in cur.fetchall()}


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
        set_actor(conn, actor)
        cur.execute(Q("execution.sweep_expired"), {**STREAM_PARAMS, "limit": limit})
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
                **STREAM_PARAMS,
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
        set_actor(conn, actor)
        cur.execute(Q("execution.sweep_cancelled"), {**STREAM_PARAMS, "limit": limit})
        return [r["sample_id"] for r in cur.fetchall()]


def sweep_screenshots(conn: Conn, *, ttl_s: float, limit: int = 5000) -> list[str]:
    """Queue screenshot hints again for required screenshots still pending whose hint is older
    than ``ttl_s`` (Redis lost or trimmed it)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("execution.sweep_screenshots"), {**STREAM_PARAMS, "ttl_s": ttl_s, "limit": limit}
        )
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
        set_actor(conn, actor)
        cur.execute(Q("execution.cancel_run"), {"run_id": run_id})
        row = cur.fetchone()
        if row is None:
            raise NotFoundError(f"no run with id {run_id!r}")
        cur.execute(Q("execution.cancel_unsubmitted"), {**STREAM_PARAMS, "run_id": run_id})
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
        set_actor(conn, actor)
        if accepted_upstream_id:
            cur.execute(
                Q("execution.resolve_accepted"),
                {
                    **STREAM_PARAMS,
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
                {**STREAM_PARAMS, "sample_id": sample_id, "note": note, "actor": actor},
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


def set_late_evidence_state(conn: Conn, sample_id: str, state: str, reason: str | None) -> None:
    """Move the evidence layer after a late screenshot was recorded (caller's transaction)."""
    conn.execute(
        Q("execution.set_late_evidence_state"),
        {"sample_id": sample_id, "state": state, "reason": reason},
    )
