"""Retention (D9): raw evidence and execution attempts expire on each tenant's policy
(``geo.tenants.retention_days``, default 30); aggregates and the ledger stay for ever.

What a pass removes, per run older than its tenant's policy and with no sample still in flight:
the run's archived evidence objects (bytes in the archive, then their ``geo.evidence_objects``
rows) and its ``geo.attempts`` rows. What it keeps: samples and their states, answers and their
analysis (the analyst views are built from them), citations, the state-transition log, the
ledger, reconciliation lines. Each pass writes one ``geo.retention_log`` row per run, so a
missing screenshot of an old run is explained, not silent.

Order matters: bytes are deleted before rows. A crash in between leaves rows whose objects are
gone, which the next pass deletes again (deleting a missing object is not an error); the other
order could leave objects no row points to, which nothing would ever find again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from geo_pipeline.evidence.archive import Archive
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


@dataclass
class RunRetention:
    run_id: str
    tenant_id: str
    retention_days: int
    cutoff: datetime
    object_keys: list[str] = field(default_factory=list)
    bytes: int = 0
    attempts: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "tenant_id": self.tenant_id,
            "retention_days": self.retention_days,
            "cutoff": self.cutoff,
            "objects": len(self.object_keys),
            "object_keys": self.object_keys,
            "bytes": self.bytes,
            "attempts": self.attempts,
        }


@dataclass
class RetentionReport:
    """What a pass removed (or, in a dry run, would remove)."""

    dry_run: bool
    now: datetime
    runs: list[RunRetention]

    @property
    def objects(self) -> int:
        return sum(len(r.object_keys) for r in self.runs)

    @property
    def attempts(self) -> int:
        return sum(r.attempts for r in self.runs)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.runs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "now": self.now,
            "runs": [r.as_dict() for r in self.runs],
            "objects": self.objects,
            "attempts": self.attempts,
            "bytes": self.bytes,
        }


def delete_object(archive: Archive, key: str) -> None:
    """Remove one object; a missing object is fine (a previous pass may have removed it).

    The archive protocol has no delete yet; we use the archive's own ``delete`` when it has one
    and otherwise the two known backends' public handles."""
    deleter = getattr(archive, "delete", None)
    if callable(deleter):
        deleter(key)
        return
    from geo_pipeline.evidence.archive import LocalArchive, S3Archive

    if isinstance(archive, LocalArchive):
        archive._path(key).unlink(missing_ok=True)
    elif isinstance(archive, S3Archive):
        # DeleteObject on a missing key succeeds on S3 and its compatibles.
        archive.client.delete_object(Bucket=archive.bucket, Key=archive._key(key))
    else:
        raise TypeError(f"cannot delete from {type(archive).__name__}: it has no delete()")


def _due_runs(conn: Conn, now: datetime, limit: int) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("ops.retention_due_runs"), {"now": now, "limit": limit})
        return [dict(r) for r in cur.fetchall()]


def _plan_run(conn: Conn, due: dict[str, Any]) -> tuple[RunRetention, list[int]]:
    with conn.cursor() as cur:
        cur.execute(Q("ops.retention_objects"), {"run_id": due["run_id"]})
        objects = [dict(r) for r in cur.fetchall()]
        cur.execute(Q("ops.retention_attempt_count"), {"run_id": due["run_id"]})
        row = cur.fetchone()
    plan = RunRetention(
        run_id=due["run_id"],
        tenant_id=due["tenant_id"],
        retention_days=int(due["retention_days"]),
        cutoff=due["cutoff"],
        object_keys=[o["storage_key"] for o in objects],
        bytes=sum(int(o["size_bytes"]) for o in objects),
        attempts=int(dict(row)["n"]) if row else 0,
    )
    return plan, [int(o["object_id"]) for o in objects]


def apply_retention(
    conn: Conn, archive: Archive, now: datetime, dry_run: bool = True, limit: int = 500
) -> RetentionReport:
    """Remove raw evidence objects and attempts of runs older than their tenant's policy.

    ``now`` is the reference time (pass the database's ``now()`` in production; tests move it).
    ``dry_run`` (the default, so a mistaken call deletes nothing) returns exactly what a real
    pass at the same ``now`` would remove. Each run is its own transaction; at most ``limit``
    runs per pass so a schedule tick stays short.
    """
    runs: list[RunRetention] = []
    for due in _due_runs(conn, now, limit):
        plan, object_ids = _plan_run(conn, due)
        runs.append(plan)
        if dry_run:
            continue
        for key in plan.object_keys:
            delete_object(archive, key)
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(Q("ops.retention_delete_objects"), {"object_ids": object_ids})
            cur.execute(Q("ops.retention_delete_attempts"), {"run_id": plan.run_id})
            cur.execute(
                Q("ops.retention_log_insert"),
                {
                    "run_id": plan.run_id,
                    "tenant_id": plan.tenant_id,
                    "retention_days": plan.retention_days,
                    "cutoff": plan.cutoff,
                    "objects_deleted": len(object_ids),
                    "bytes_deleted": plan.bytes,
                    "attempts_deleted": plan.attempts,
                },
            )
        if not conn.autocommit:
            conn.commit()  # the reads above opened an outer transaction; end it per run
    if dry_run and not conn.autocommit:
        conn.rollback()  # the dry run only read; leave no transaction open
    return RetentionReport(dry_run=dry_run, now=now, runs=runs)


def database_now(conn: Conn) -> datetime:
    """The database's clock, the one every lease and state change uses (R11)."""
    with conn.cursor() as cur:
        cur.execute(Q("ops.database_now"))
        row = cur.fetchone()
    if row is None:
        raise RuntimeError("the database returned no time")
    now: datetime = dict(row)["now"]
    return now
