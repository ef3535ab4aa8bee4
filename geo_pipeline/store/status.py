"""The one aggregation service (R7). Every list, detail, export and Dagster asset reads status
from here; nothing else counts sample states or decides "complete".
"""

from __future__ import annotations

from collections import Counter, defaultdict

from geo_pipeline.domain.states import AggregateStatus, LayerCounts, derive_status
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


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
            for layer in ("submission", "collection", "evidence", "analysis"):
                by[layer][r[f"{layer}_state"]] += n
            if r["evidence_reason"] is not None:
                by["evidence_reason"][r["evidence_reason"]] += n
            if r["failure_reason"] is not None:
                by["failure_reason"][r["failure_reason"]] += n
            if r["analysis_state"] == "pending" and r["evidence_state"] in ("stored", "partial"):
                awaiting += n
    return LayerCounts(
        total=total,
        submission=dict(by["submission"]),
        collection=dict(by["collection"]),
        evidence=dict(by["evidence"]),
        analysis=dict(by["analysis"]),
        evidence_reasons=dict(by["evidence_reason"]),
        failure_reasons=dict(by["failure_reason"]),
        awaiting_analysis=awaiting,
    )


def run_status(conn: Conn, run_id: str) -> AggregateStatus:
    return derive_status(_counts(conn, run_id, None, None))


def partition_status(conn: Conn, run_id: str, channel: str) -> AggregateStatus:
    """Status of one Dagster partition (run x channel)."""
    return derive_status(_counts(conn, run_id, channel, None))


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
