"""The one aggregation service (R7). Every list, detail, export and Dagster asset reads status
from here; nothing else counts sample states or decides "complete".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from geo_pipeline.domain.states import (
    AggregateStatus,
    LayerCounts,
    Publication,
    combine_publications,
    derive_status,
)
from geo_pipeline.domain.words import evidence_status
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

LAYERS = ("submission", "collection", "evidence", "analysis")
SCREENSHOT_PENDING = "SCREENSHOT_PENDING"


def _counts(
    conn: Conn, run_id: str, channel: str | None, question_revision: str | None
) -> LayerCounts:
    by: dict[str, Counter[str]] = defaultdict(Counter)
    total = 0
    awaiting = 0
    with conn.cursor() as cur:
        cur.execute(
            Q("status.layer_counts"),
            {"run_id": run_id, "channel": channel, "question_revision": question_revision},
        )
        for r in cur.fetchall():
            n = int(r["n"])
            total += n
            states = {layer: r[f"{layer}_state"] for layer in LAYERS}
            # The text is stored and the screenshot is still being fetched: pending evidence
            # (THE word set, domain.words.evidence_status), so the reason is never shown next
            # to a pending count of 0 and the sample list says the same word.
            # A failed collection stored no answer: its evidence is failed, with the
            # collection's reason (the query gives it as evidence_reason), never pending.
            states["evidence"] = evidence_status(
                states["evidence"], r["evidence_reason"], states["collection"]
            )
            for layer in LAYERS:
                by[layer][states[layer]] += n
            if r["evidence_reason"] is not None:
                by["evidence_reason"][r["evidence_reason"]] += n
            if r["failure_reason"] is not None:
                by["failure_reason"][r["failure_reason"]] += n
            if r["invalid_reason"] is not None:
                by["invalid_reason"][r["invalid_reason"]] += n
            if (
                r["analysis_state"] == "pending"
                and r["collection_state"] == "completed"
                and r["evidence_state"] in ("stored", "partial")
            ):
                awaiting += n
    return LayerCounts(
        total=total,
        submission=dict(by["submission"]),
        collection=dict(by["collection"]),
        evidence=dict(by["evidence"]),
        analysis=dict(by["analysis"]),
        evidence_reasons=dict(by["evidence_reason"]),
        failure_reasons=dict(by["failure_reason"]),
        invalid_reasons=dict(sorted(by["invalid_reason"].items())),
        awaiting_analysis=awaiting,
    )


def _cancelled(conn: Conn, run_id: str) -> bool:
    with conn.cursor() as cur:
        cur.execute(Q("status.run_cancelled"), {"run_id": run_id})
        row = cur.fetchone()
    return bool(row and row["cancelled"])


def run_status(conn: Conn, run_id: str) -> AggregateStatus:
    return derive_status(_counts(conn, run_id, None, None), cancelled=_cancelled(conn, run_id))


def partition_status(conn: Conn, run_id: str, channel: str) -> AggregateStatus:
    """Status of one Dagster partition (run x channel)."""
    return derive_status(_counts(conn, run_id, channel, None), cancelled=_cancelled(conn, run_id))


def question_status(conn: Conn, run_id: str, question_revision: str) -> AggregateStatus:
    return derive_status(_counts(conn, run_id, None, question_revision))


def channels_of_run(conn: Conn, run_id: str) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute(Q("status.partition_keys"), {"run_id": run_id})
        return {dict(r)["channel"]: int(dict(r)["n"]) for r in cur.fetchall()}


def terminal_partitions(conn: Conn, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """Of the given (run_id, channel) pairs, those whose samples are all terminal (collection)."""
    if not pairs:
        return set()
    with conn.cursor() as cur:
        cur.execute(
            Q("status.terminal_partitions"),
            {"run_ids": [p[0] for p in pairs], "channels": [p[1] for p in pairs]},
        )
        return {(dict(r)["run_id"], dict(r)["channel"]) for r in cur.fetchall()}


# --------------------------------------------------------------------------- publication
# A partition is "publishable" when every sample is terminal, or its run's publish deadline has
# passed; then the open samples are "excluded" with their reasons (geo.exclusion_reason). The
# sensor, the assets and the analyst views all decide this here (R7).
def _publication(r: Mapping[str, Any]) -> Publication:
    deadline = r.get("deadline_at")
    return Publication(
        run_id=r["run_id"],
        channel=r["channel"],
        samples=int(r["samples"]),
        terminal=int(r["terminal"]),
        deadline_passed=bool(r["deadline_passed"]),
        deadline_at=deadline.isoformat() if isinstance(deadline, datetime) else deadline,
        excluded_reasons={k: int(v) for k, v in dict(r["excluded_reasons"] or {}).items()},
        publication_id=r.get("publication_id"),
    )


def publication_states(
    conn: Conn, pairs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], Publication]:
    """Publication state of each given (run_id, channel) pair whose run PostgreSQL knows."""
    pairs = sorted(set(pairs))
    if not pairs:
        return {}
    with conn.cursor() as cur:
        cur.execute(
            Q("status.publication_states"),
            {"run_ids": [p[0] for p in pairs], "channels": [p[1] for p in pairs]},
        )
        return {(p.run_id, p.channel): p for p in map(_publication, cur.fetchall())}


def partition_publication(conn: Conn, run_id: str, channel: str) -> Publication:
    """Publication state of one partition (an unknown run has no samples: not publishable)."""
    found = publication_states(conn, [(run_id, channel)])
    return found.get(
        (run_id, channel),
        Publication(run_id, channel, samples=0, terminal=0, deadline_passed=False),
    )


def run_publications(
    conn: Conn, channels_by_run: Mapping[str, Iterable[str]]
) -> dict[str, Publication]:
    """Per run, the publication of all its channels together (billing is per run)."""
    pairs = [(rid, ch) for rid, chs in channels_by_run.items() for ch in chs]
    states = publication_states(conn, pairs)
    return {
        rid: combine_publications(rid, [states[(rid, ch)] for ch in chs if (rid, ch) in states])
        for rid, chs in ((rid, list(chs)) for rid, chs in channels_by_run.items())
    }


def record_publication(
    conn: Conn, run_id: str, channel: str, dagster_run_id: str | None
) -> Publication:
    """Record what a materialisation of the partition publishes and every sample it excludes
    (geo.partition_publications, geo.publication_exclusions; one statement, one snapshot)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("status.record_publication"),
            {"run_id": run_id, "channel": channel, "dagster_run_id": dagster_run_id},
        )
        row = cur.fetchone()
    if row is None:
        raise LookupError(f"run {run_id!r} has no publish deadline (is it in PostgreSQL?)")
    return _publication(row)


def deadline_crossed(
    conn: Conn, since: datetime | None, days: int
) -> tuple[set[tuple[str, str]], datetime]:
    """Partitions whose run's deadline passed after ``since`` with samples still open, and the
    database time to pass as ``since`` next time."""
    with conn.cursor() as cur:
        cur.execute(Q("status.deadline_crossed"), {"since": since, "days": days})
        row = cur.fetchone()
    assert row is not None
    return set(zip(row["run_ids"], row["channels"], strict=True)), row["checked_at"]


def republish_due(conn: Conn, days: int) -> set[tuple[str, str]]:
    """Partitions published with exclusions of which some have since become terminal."""
    with conn.cursor() as cur:
        cur.execute(Q("status.republish_due"), {"days": days})
        return {(r["run_id"], r["channel"]) for r in cur.fetchall()}
