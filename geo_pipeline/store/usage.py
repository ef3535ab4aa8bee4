"""Request-level usage recorded with each attempt (migration 0022): one statement for a whole
batch of attempt ends, inside the caller's completion transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from geo_pipeline.domain.usage import Usage
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def record_attempt_usage(conn: Conn, items: Sequence[tuple[str, int, Usage]]) -> int:
    """Write (sample_id, attempt_no, usage) for many attempts in ONE statement; returns the
    number of attempt rows written. The caller holds the transaction (and the fence)."""
    if not items:
        return 0
    params: dict[str, Any] = {
        "ids": [i[0] for i in items],
        "attempt_nos": [int(i[1]) for i in items],
        "input_tokens": [i[2].input_tokens for i in items],
        "output_tokens": [i[2].output_tokens for i in items],
        "total_tokens": [i[2].total_tokens for i in items],
        "cached_input_tokens": [i[2].cached_input_tokens for i in items],
        "reasoning_tokens": [i[2].reasoning_tokens for i in items],
        "web_search_requests": [i[2].web_search_requests for i in items],
        "search_context": [i[2].search_context_size for i in items],
        "source": [i[2].source or "usage" for i in items],
    }
    with conn.cursor() as cur:
        cur.execute(Q("usage.record_attempt_usage"), params)
        return cur.rowcount


def run_attempt_usage(conn: Conn, run_id: str) -> list[dict[str, Any]]:
    """Every attempt of the run that reached an upstream task, with its recorded usage
    (``source`` None = none recorded)."""
    with conn.cursor() as cur:
        cur.execute(Q("usage.run_attempt_usage"), {"run_id": run_id})
        return [dict(r) for r in cur.fetchall()]
