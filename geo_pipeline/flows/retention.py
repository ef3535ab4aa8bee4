"""Retention (D9): raw evidence and the execution log expire on each tenant's policy; aggregates,
analysis results and the ledger stay for ever.

Per run past a window of its tenant, with no sample still in flight:
- raw window (``geo.tenants.retention_days``, default 30): the archived evidence objects (bytes in
  the archive, then their ``geo.evidence_objects`` rows) and the raw answer text (set NULL with
  ``raw_expired_at``; the sanitised version, the digests and the analysis stay; an answer whose
  analysis has not finished keeps its text);
- log window (``log_retention_days``, NULL: the raw window): ``geo.attempts`` and the
  ``geo.state_transitions`` of the run.
Samples and their states, citations, analysis, the ledger and reconciliation lines are kept. Each
run's pass writes one ``geo.retention_log`` row, so a missing screenshot of an old run is
explained, not silent.

Table-wide, not per tenant: published outbox rows older than ``outbox_keep`` (the relay is done
with them; unpublished rows are never touched) and dead letters whose sample has settled after
``dead_settled_keep``, or any after ``dead_letter_keep``.

Expiring raw text and the transition log rewrites the record of what happened, which the
processes' role (geo_service) may not do: that step needs the owner (GEO_RETENTION_DATABASE_URL,
a geo_owner login). On a connection without the privilege it is skipped, said so in the report's
``refused``, and the rest of the pass still runs.

Order matters: bytes are deleted before rows. A crash in between leaves rows whose objects are
gone, which the next pass deletes again (deleting a missing object is not an error); the other
order could leave objects no row points to, which nothing would ever find again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from geo_pipeline.evidence.archive import Archive
from geo_pipeline.evidence.display import materialise_displays
from geo_pipeline.evidence.warc import is_record_key
from geo_pipeline.evidence.warc_store import run_prefix
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


@dataclass(frozen=True)
class TableWindows:
    """How long the table-wide hot rows are kept."""

    outbox_keep: timedelta = timedelta(days=1)
    dead_settled_keep: timedelta = timedelta(days=1)
    dead_letter_keep: timedelta = timedelta(days=30)
    chunk: int = 50_000  # outbox rows per delete statement


@dataclass
class RunRetention:
    run_id: str
    tenant_id: str
    retention_days: int
    cutoff: datetime
    log_retention_days: int = 0
    object_keys: list[str] = field(default_factory=list)
    # The run's WARC batch objects (issue 33): every one under the run's warc/ prefix, those
    # the index names and any no row names (a worker killed between the PUT and its commit).
    warc_objects: list[str] = field(default_factory=list)
    bytes: int = 0
    attempts: int = 0
    answers: int = 0  # raw texts cleared
    transitions: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "tenant_id": self.tenant_id,
            "retention_days": self.retention_days,
            "log_retention_days": self.log_retention_days,
            "cutoff": self.cutoff,
            "objects": len(self.object_keys),
            "object_keys": self.object_keys,
            "warc_objects": self.warc_objects,
            "bytes": self.bytes,
            "attempts": self.attempts,
            "answers": self.answers,
            "transitions": self.transitions,
        }


@dataclass
class RetentionReport:
    """What a pass removed (or, in a dry run, would remove)."""

    dry_run: bool
    now: datetime
    runs: list[RunRetention]
    outbox: int = 0
    dead_letters: int = 0
    refused: list[str] = field(default_factory=list)  # steps the connection's role may not do

    @property
    def objects(self) -> int:
        return sum(len(r.object_keys) for r in self.runs)

    @property
    def attempts(self) -> int:
        return sum(r.attempts for r in self.runs)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.runs)

    @property
    def answers(self) -> int:
        return sum(r.answers for r in self.runs)

    @property
    def transitions(self) -> int:
        return sum(r.transitions for r in self.runs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "now": self.now,
            "runs": [r.as_dict() for r in self.runs],
            "objects": self.objects,
            "attempts": self.attempts,
            "bytes": self.bytes,
            "answers": self.answers,
            "transitions": self.transitions,
            "outbox": self.outbox,
            "dead_letters": self.dead_letters,
            "refused": self.refused,
        }


def _count(conn: Conn, name: str, params: dict[str, Any]) -> int:
    with conn.cursor() as cur:
        cur.execute(Q(name), params)
        row = cur.fetchone()
    return int(dict(row)["n"]) if row else 0


def _due_runs(conn: Conn, now: datetime, limit: int) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("ops.retention_due_runs"), {"now": now, "limit": limit})
        return [dict(r) for r in cur.fetchall()]


def _plan_run(
    conn: Conn, due: dict[str, Any], archive: Archive | None = None
) -> tuple[RunRetention, list[int]]:
    run = {"run_id": due["run_id"]}
    objects: list[dict[str, Any]] = []
    plan = RunRetention(
        run_id=due["run_id"],
        tenant_id=due["tenant_id"],
        retention_days=int(due["retention_days"]),
        log_retention_days=int(due["log_retention_days"]),
        cutoff=due["cutoff"],
    )
    if due["raw_due"]:
        with conn.cursor() as cur:
            cur.execute(Q("ops.retention_objects"), run)
            objects = [dict(r) for r in cur.fetchall()]
        plan.object_keys = [o["storage_key"] for o in objects]
        plan.bytes = sum(int(o["size_bytes"]) for o in objects)
        # A WARC object holds records of one tenant's run only, so the run's window covers all
        # of them: it goes whole, with any object of the run that no row names.
        with conn.cursor() as cur:
            cur.execute(Q("ops.retention_warc_objects"), run)
            named = [dict(r)["object_key"] for r in cur.fetchall()]
        found = archive.list_keys(run_prefix(due["tenant_id"], due["run_id"])) if archive else []
        plan.warc_objects = sorted({*named, *found})
        plan.answers = _count(conn, "ops.retention_raw_text_count", run)
    if due["log_due"]:
        plan.attempts = _count(conn, "ops.retention_attempt_count", run)
        plan.transitions = _count(conn, "ops.retention_transition_count", run)
    return plan, [int(o["object_id"]) for o in objects]


REFUSED_HISTORY = (
    "raw answer text and the transition log were not expired: the connection's role may not "
    "rewrite history (run retention with GEO_RETENTION_DATABASE_URL, a geo_owner login)"
)


def _history_step(conn: Conn, query: str, params: dict[str, Any], refused: list[str]) -> bool:
    """One history-expiring statement in its own savepoint; False when the role may not."""
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(Q(query), params)
        return True
    except psycopg.errors.InsufficientPrivilege:
        if REFUSED_HISTORY not in refused:
            refused.append(REFUSED_HISTORY)
        return False


def _clear_raw_text(conn: Conn, run_id: str, now: datetime, refused: list[str]) -> bool:
    """Clear the run's raw answer text past its window, in one savepoint with storing the
    displays still derived from that text (evidence.display): once the text is gone the stored
    display is all a report has left. False when the role may not (the owner's step)."""
    try:
        with conn.transaction(), conn.cursor() as cur:
            materialise_displays(conn, run_id)
            cur.execute(Q("ops.retention_clear_raw_text"), {"run_id": run_id, "now": now})
        return True
    except psycopg.errors.InsufficientPrivilege:
        if REFUSED_HISTORY not in refused:
            refused.append(REFUSED_HISTORY)
        return False


def _apply_run(
    conn: Conn,
    archive: Archive,
    plan: RunRetention,
    object_ids: list[int],
    now: datetime,
    refused: list[str],
) -> None:
    for key in dict.fromkeys(plan.object_keys):
        if not is_record_key(key):  # a record goes with its WARC object
            archive.delete(key)
    for key in plan.warc_objects:
        archive.delete(key)
    run = {"run_id": plan.run_id}
    with conn.transaction(), conn.cursor() as cur:
        if object_ids:
            cur.execute(Q("ops.retention_delete_objects"), {"object_ids": object_ids})
        if plan.warc_objects:
            cur.execute(Q("ops.retention_delete_warc_records"), run)
        if plan.attempts:
            cur.execute(Q("ops.retention_delete_attempts"), run)
        if plan.answers and not _clear_raw_text(conn, plan.run_id, now, refused):
            plan.answers = 0
        if plan.transitions and not _history_step(
            conn, "ops.retention_delete_transitions", run, refused
        ):
            plan.transitions = 0
        cur.execute(
            Q("ops.retention_log_insert"),
            {
                "run_id": plan.run_id,
                "tenant_id": plan.tenant_id,
                "retention_days": plan.retention_days,
                "log_retention_days": plan.log_retention_days,
                "cutoff": plan.cutoff,
                "objects_deleted": len(object_ids),
                "bytes_deleted": plan.bytes,
                "attempts_deleted": plan.attempts,
                "answers_cleared": plan.answers,
                "transitions_deleted": plan.transitions,
            },
        )


def _mark_run(conn: Conn, due: dict[str, Any], now: datetime) -> None:
    """Mark the windows of the run that the step left nothing of, so later passes skip them
    (0050: a pass costs the runs with something to expire, not the history)."""
    params = {k: due[k] for k in ("run_id", "raw_due", "log_due")}
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("ops.retention_mark_run"), {**params, "now": now})


def _table_pass(conn: Conn, now: datetime, windows: TableWindows, dry_run: bool) -> tuple[int, int]:
    outbox = {"cutoff": now - windows.outbox_keep, "limit": windows.chunk}
    dead = {
        "old_cutoff": now - windows.dead_letter_keep,
        "resolved_cutoff": now - windows.dead_settled_keep,
    }
    if dry_run:
        return (
            _count(conn, "ops.retention_outbox_count", outbox),
            _count(conn, "ops.retention_dead_letter_count", dead),
        )
    removed_outbox = 0
    while True:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(Q("ops.retention_delete_outbox"), outbox)
            n = cur.rowcount
        removed_outbox += n
        if n < windows.chunk:
            break
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("ops.retention_delete_dead_letters"), dead)
        removed_dead = cur.rowcount
    return removed_outbox, removed_dead


def apply_retention(
    conn: Conn,
    archive: Archive,
    now: datetime,
    dry_run: bool = True,
    limit: int = 500,
    windows: TableWindows | None = None,
) -> RetentionReport:
    """Remove what is past its window (module docstring): per run, then table-wide.

    ``now`` is the reference time (pass the database's ``now()`` in production; tests move it).
    ``dry_run`` (the default, so a mistaken call deletes nothing) returns exactly what a real
    pass at the same ``now`` would remove. Each run is its own transaction; at most ``limit``
    runs per pass so a schedule tick stays short.
    """
    runs: list[RunRetention] = []
    refused: list[str] = []
    for due in _due_runs(conn, now, limit):
        plan, object_ids = _plan_run(conn, due, archive)
        runs.append(plan)
        if dry_run:
            continue
        _apply_run(conn, archive, plan, object_ids, now, refused)
        _mark_run(conn, due, now)
        if not conn.autocommit:
            conn.commit()  # the reads above opened an outer transaction; end it per run
    outbox, dead = _table_pass(conn, now, windows or TableWindows(), dry_run)
    if not conn.autocommit:
        # a dry run only read; a real pass committed each step: leave no transaction open
        conn.rollback() if dry_run else conn.commit()
    return RetentionReport(
        dry_run=dry_run, now=now, runs=runs, outbox=outbox, dead_letters=dead, refused=refused
    )


def database_now(conn: Conn) -> datetime:
    """The database's clock, the one every lease and state change uses (R11)."""
    with conn.cursor() as cur:
        cur.execute(Q("ops.database_now"))
        row = cur.fetchone()
    if row is None:
        raise RuntimeError("the database returned no time")
    now: datetime = dict(row)["now"]
    return now
