"""The fenced end of attempts (R11, R17, R24, R25): for many attempts in ONE transaction, the
fence check, the evidence rows, the ledger charges, the sample layers, the attempt rows, the
acceptance records and the outbox rows. Either all of an attempt's records commit with its end,
or none do; an attempt whose lease or token is no longer current writes nothing and is counted
stale. The worker ends attempts here; a late screenshot is recorded here too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from geo_pipeline.billing import ledger
from geo_pipeline.evidence import warc_late
from geo_pipeline.evidence.recording import record_evidence_batch
from geo_pipeline.observability.metrics import DB_WRITE_LATENCY, STALE_WRITES
from geo_pipeline.store import execution as ex
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q
from geo_pipeline.store.usage import record_attempt_usage


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
    accept: ex.AcceptanceRecord | None = None
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
    with conn.transaction():
        ex.set_actor(conn, owner)
        ours = ex.fence_lock(
            conn, owner=owner, ids=[i.sample_id for i in items], tokens=[i.token for i in items]
        )
        # Ledger accounts are locked per run: take them in one order across all batches.
        live = sorted((i for i in items if i.sample_id in ours), key=lambda i: i.sample_id)
        live.sort(key=lambda i: i.charge.run_id if i.charge else "")
        # Every attempt's evidence rows in a few statements for the whole batch, not per sample.
        with_evidence = [i for i in live if i.archived is not None]
        outcomes = record_evidence_batch(conn, [i.archived for i in with_evidence])
        for item, outcome in zip(with_evidence, outcomes, strict=True):
            item.ev_to = outcome.state
            item.ev_reason = outcome.reason
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
            done = ex.write_finish(conn, params)
            if len(done) != len(live):
                # Locked rows that were not written: never commit their charges and evidence.
                missing = sorted({i.sample_id for i in live} - set(done))
                raise RuntimeError(
                    f"finish wrote {len(done)} of {len(live)} locked samples "
                    f"(first missing: {missing[:3]})"
                )
            # Request-level usage of the batch's answered attempts: one statement (issue 19).
            used = [(c.sample_id, c.attempt_no, c.usage) for c in charges if c.usage is not None]
            record_attempt_usage(conn, used)
    DB_WRITE_LATENCY.labels("finish").observe(time.perf_counter() - t0)
    stale = [i.sample_id for i in items if i.sample_id not in done]
    if stale:
        STALE_WRITES.labels("finish").inc(len(stale))
    return FinishResult(done, stale)


def _finish_params(owner: str, items: Iterable[Finish]) -> dict[str, Any]:
    """The columns of ``execution.finish``, one array each, in the order of ``items``."""
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


def record_late_screenshots(conn: Conn, items: Sequence[Any], *, actor: str) -> list[str]:
    """Record screenshots downloaded from the screenshot stream and move their samples'
    evidence layer (R10, R21) in ONE transaction with one statement per table, however many
    (issue 33): the samples' evidence locks, what the verdict is decided from, the WARC index
    rows, the evidence object rows, the samples' evidence layer. Guarded as every late move is:
    only a completed sample moves, and only as R6 allows. Returns each sample's evidence state
    afterwards, in the order of ``items`` (geo_pipeline.evidence ArchivedScreenshot)."""
    if not items:
        return []
    t0 = time.perf_counter()
    with conn.transaction():
        ex.set_actor(conn, actor)
        outcomes = warc_late.record_late_screenshots(conn, items)
        last = {item.ref.sample_id: o for item, o in zip(items, outcomes, strict=True)}
        conn.execute(
            Q("execution.set_late_evidence_states"),
            {
                "sample_ids": list(last),
                "states": [o.state for o in last.values()],
                "reasons": [o.reason for o in last.values()],
            },
        )
    DB_WRITE_LATENCY.labels("late_screenshots").observe(time.perf_counter() - t0)
    return [str(o.state) for o in outcomes]


def record_late_screenshot(conn: Conn, archived: Any, *, actor: str) -> str:
    """``record_late_screenshots`` for one screenshot (the bundle format's lane)."""
    return record_late_screenshots(conn, [archived], actor=actor)[0]
