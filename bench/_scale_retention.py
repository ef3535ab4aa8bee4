"""Scale path of retention (bench/scale.py loads ``PATHS``): the pass that expires the newest
day's run of a tenant's history of daily 200-sample runs, every older day already expired by
earlier passes (as geo_pipeline_tests/ops/test_retention_growth.py, at bench sizes). Its cost
should be that day's rows, not the history's: slope ~0 over the history's size.

A scratch database per size (dropped at exit) holds ``size`` days of completed runs
(geo_pipeline_tests/scale_data.completed_run, runs.created_at moved to their day); each
measurement adds the next day's run, lets a first pass expire everything older, then measures the
pass that expires that day (geo_pipeline.flows.retention.apply_retention against a local archive).
Work from PostgreSQL's cumulative statistics (scale_data.counted: rows and index entries read,
buffers) with autovacuum off on the scratch tables; statements are not counted.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from _machine import _proc_cpu, scratch
from psycopg.rows import dict_row

from geo_pipeline.evidence.archive import LocalArchive
from geo_pipeline.flows import retention
from geo_pipeline.store import migrate
from geo_pipeline_tests.scale_data import completed_run, counted, quiet_autovacuum

BASE = datetime(2026, 1, 1, 12, tzinfo=UTC)
WINDOW = timedelta(days=30)  # the tenants' default retention_days
RUN_SAMPLES = 200
_exit = contextlib.ExitStack()
_worlds: dict[int, dict[str, Any]] = {}


def _day_run(conn: Any, day: int) -> str:
    run_id = f"ret-{day:05d}"
    completed_run(conn, run_id, RUN_SAMPLES, tenant="ret")
    conn.execute("UPDATE geo.runs SET created_at = %s WHERE run_id = %s",
                 (BASE + timedelta(days=day), run_id))  # fmt: skip
    conn.commit()
    return run_id


def _world(days: int) -> dict[str, Any]:
    if days not in _worlds:
        import atexit

        if not _worlds:
            atexit.register(_exit.close)
        url, _ns = _exit.enter_context(scratch(f"geo_scale_retention{days}"))
        conn = _exit.enter_context(psycopg.connect(url, row_factory=dict_row))  # type: ignore[arg-type]
        migrate.upgrade(conn)
        conn.commit()
        t0 = time.perf_counter()
        for d in range(days):
            _day_run(conn, d)
        quiet_autovacuum(conn)
        conn.execute("ANALYZE")
        conn.commit()
        archive = LocalArchive(Path(_exit.enter_context(tempfile.TemporaryDirectory())))
        print(f"  (retention history of {days:,} daily runs made: "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
        _worlds[days] = {"conn": conn, "archive": archive, "next": days}
    return _worlds[days]


def measure_retention(days: int) -> dict[str, float]:
    """The pass that expires the newest day's run over ``days`` days of expired history."""
    w = _world(days)
    conn, archive = w["conn"], w["archive"]
    day = w["next"]
    w["next"] += 1
    run_id = _day_run(conn, day)
    last = BASE + timedelta(days=day)
    retention.apply_retention(conn, archive, last + WINDOW - timedelta(hours=1), False)
    pid = conn.info.backend_pid
    got0 = _proc_cpu(f"/proc/{pid}/stat")
    c0, t0 = time.process_time(), time.perf_counter()
    with counted(conn) as work:
        rep = retention.apply_retention(conn, archive, last + WINDOW + timedelta(hours=1), False)
    t1, c1 = time.perf_counter(), time.process_time()
    got1 = _proc_cpu(f"/proc/{pid}/stat")
    assert [r.run_id for r in rep.runs] == [run_id], rep.runs
    backend = (got1[1] - got0[1]) if got0 and got1 else 0.0
    return {"seconds": t1 - t0, "cpu_s": (c1 - c0) + backend, "rows": work.rows_read,
            "buffers": work.buffers}  # fmt: skip


PATHS: list[tuple[Any, ...]] = [
    ("retention of a day's run (history days x 200 samples)", [5, 50], measure_retention,
     [500]),
]  # fmt: skip
