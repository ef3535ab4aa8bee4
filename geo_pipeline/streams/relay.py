"""The transactional outbox relay (R8, R10, R25): publish outbox rows to their Redis Streams
and mark them published.

Rows are locked (FOR UPDATE SKIP LOCKED) while they are published, so two relays never publish
the same batch at once. A crash between XADD and the mark publishes the batch again on restart:
a duplicate hint is harmless (claims are idempotent, the completion sensor dedupes by
event_id). A crash before XADD loses nothing: the rows are still unpublished.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import DB_WRITE_LATENCY, OUTBOX_PUBLISHED
from geo_pipeline.runtime.crash import crashpoint
from geo_pipeline.store import execution as ex
from geo_pipeline.store.db import Conn
from geo_pipeline.streams.keys import stream_key

log = logging.getLogger("geo_pipeline.relay")


def message_fields(row: dict[str, Any]) -> dict[str, str]:
    """Ids and routing only (R8): never answers, configs or credentials. Completion entries
    carry exactly event_id, sample_id, run_id, channel, collection_state (the sensor's contract).
    """
    payload = row.get("payload") or {}
    if row["kind"] == "completion":
        return {
            "event_id": str(row["outbox_id"]),
            "sample_id": str(row["sample_id"]),
            "run_id": str(row["run_id"]),
            "channel": str(payload.get("channel", "")),
            "collection_state": str(payload.get("collection_state", "")),
        }
    fields = {
        "event_id": str(row["outbox_id"]),
        "kind": str(row["kind"]),
        "sample_id": str(row["sample_id"] or ""),
        "run_id": str(row["run_id"] or ""),
        "tenant_id": str(row["tenant_id"] or ""),
    }
    for k in ("priority", "attempt_no"):
        if k in payload:
            fields[k] = str(payload[k])
    if row.get("batch_no") is not None:  # a batch hint (migration 0010): wakes the lane
        fields["batch_no"] = str(row["batch_no"])
        fields["channel"] = str(row.get("channel") or "")
    return fields


def relay_once(conn: Conn, redis: Any, ns: str, limit: int = 1000) -> int:
    """Publish one batch; returns how many rows were published."""
    t0 = time.perf_counter()
    with conn.transaction():
        rows = ex.outbox_batch(conn, limit)
        if not rows:
            return 0
        crashpoint("after_commit_before_publish")
        pipe = redis.pipeline(transaction=False)
        for r in rows:
            pipe.xadd(stream_key(ns, r["stream"]), message_fields(r))
        pipe.execute()
        crashpoint("after_publish_before_mark")
        ex.outbox_mark(conn, [r["outbox_id"] for r in rows])
    DB_WRITE_LATENCY.labels("relay").observe(time.perf_counter() - t0)
    per_stream: dict[str, int] = {}
    for r in rows:
        per_stream[r["stream"]] = per_stream.get(r["stream"], 0) + 1
    for s, n in per_stream.items():
        OUTBOX_PUBLISHED.labels(s).inc(n)
    return len(rows)


def run_relay(
    conn: Conn,
    redis: Any,
    ns: str,
    *,
    stop: threading.Event,
    batch: int = 1000,
    idle_s: float = 0.05,
) -> int:
    """Publish until ``stop`` is set. A full batch loops at once; an empty one waits ``idle_s``
    (a bounded wait, D3). Returns the number of rows published."""
    total = 0
    event(log, "relay.started", namespace=ns)
    while not stop.is_set():
        try:
            n = relay_once(conn, redis, ns, batch)
        except Exception as exc:
            log.warning("relay batch failed: %s", exc)
            conn.rollback()
            stop.wait(1.0)
            continue
        total += n
        if n < batch:
            stop.wait(idle_s)
    event(log, "relay.stopped", published=total)
    return total
