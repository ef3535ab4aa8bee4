"""The one aggregation service (R7). Every list, detail, export and Dagster asset reads status
from here; nothing else counts sample states or decides "complete".
"""

from __future__ import annotations

from collections import defaultdict

from geo_pipeline.domain.states import AggregateStatus, LayerCounts, derive_status
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def _counts(
    conn: Conn, run_id: str, channel: str | None, question_revision: str | None
) -> LayerCounts:
    by: dict[str, dict[str, int]] = defaultdict(dict)
    with conn.cursor() as cur:
        cur.execute(
            Q("status.layer_counts"),
            {"run_id": run_id, "channel": channel, "question_revision": question_revision},
        )
        for row in cur.fetchall():
            r = dict(row)
            by[r["layer"]][r["state"]] = int(r["n"])
    total = sum(by["collection"].values())
    return LayerCounts(
        total=total,
        submission=by["submission"],
        collection=by["collection"],
        evidence=by["evidence"],
        analysis=by["analysis"],
        evidence_reasons=by["evidence_reason"],
        failure_reasons=by["failure_reason"],
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
