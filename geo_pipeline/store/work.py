"""The work PostgreSQL does for a piece of code: statements issued, rows and index entries read,
buffers requested. The growth tests and ``bench/scale.py`` compare these at two sizes, so a path
whose cost grows faster than its data is caught on any machine, fast or slow: no clock involved.

Rows and buffers come from the backend's own transaction counters (``work.xact_counters``), which
PostgreSQL keeps as it works and flushes only when the transaction ends; the measured block
therefore runs in one transaction (its own ``conn.transaction()`` calls become savepoints),
committed at the end like the block would have been.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


@dataclass
class Work:
    """What one measured block cost PostgreSQL (filled in when the block ends)."""

    statements: int = 0  # statements sent (each row set of an executemany counts)
    rows_read: int = 0  # heap rows from sequential scans + index entries from index scans
    buffers: int = 0  # buffer requests (hits or reads) on the project's tables and indexes
    scans: int = 0  # sequential and index scans started

    def as_dict(self) -> dict[str, int]:
        return {
            "statements": self.statements,
            "rows_read": self.rows_read,
            "buffers": self.buffers,
            "scans": self.scans,
        }


class _CountingCursor(psycopg.Cursor[Any]):
    """A cursor that adds every statement it sends to its connection's open meter."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        meter = getattr(self.connection, "_geo_work_meter", None)
        if meter is not None:
            meter.statements += 1
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        meter = getattr(self.connection, "_geo_work_meter", None)
        if meter is not None:
            params_seq = list(params_seq)
            meter.statements += len(params_seq)
        super().executemany(query, params_seq, **kwargs)

    def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        meter = getattr(self.connection, "_geo_work_meter", None)
        if meter is not None:
            meter.statements += 1
        return super().copy(statement, params, **kwargs)


def _counters(conn: Conn) -> Sequence[int]:
    with psycopg.ClientCursor(conn) as cur:  # not counted: the meter's own statement
        cur.execute(Q("work.xact_counters"))
        row = cur.fetchone()
    assert row is not None
    return (row[0], row[1], row[2]) if not isinstance(row, dict) else tuple(row.values())


@contextmanager
def measured(conn: Conn) -> Iterator[Work]:
    """Run the block in one transaction on ``conn`` and fill the yielded :class:`Work` with what
    it cost when the block ends. The connection must not be inside a transaction already (the
    counters would include the work done before the block). The transaction commits when the
    block ends normally; an exception rolls ALL of it back (also what the block would have
    committed itself, e.g. a run kept by a failing plan check): for measuring, not for use."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("measured(): the connection is inside a transaction already")
    work = Work()
    factory = conn.cursor_factory
    with conn.transaction():
        before = _counters(conn)
        conn.cursor_factory = _CountingCursor
        conn._geo_work_meter = work  # type: ignore[attr-defined]
        try:
            yield work
        finally:
            conn.cursor_factory = factory
            del conn._geo_work_meter  # type: ignore[attr-defined]
        after = _counters(conn)
        work.rows_read, work.buffers, work.scans = (
            a - b for a, b in zip(after, before, strict=True)
        )
