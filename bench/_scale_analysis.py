"""Scale paths of the analysis layer, collected by bench/scale.py (``PATHS``): each entry is
(name, sizes, measure) with ``measure(size) -> {"seconds", "buffers", "rows", ...}``.

- analysis of a run: analyse_run (detection, results, mentions, guarded transitions) and then
  refresh_analytics, at 1k -> 10k (-> 100k with --big) answers; a fresh run per call in one
  scratch database,
  created the way the product creates one and filled with COPY (setup not timed). ``buffers``
  and ``rows`` as geo_pipeline.store.work counts them (buffer requests; rows and index entries
  read), from the database's cumulative statistics since analyse_run commits each chunk
  (geo_pipeline_tests/scale_data.counted); statements are not counted.
- the analyst views over a monitor's history of 100k -> 1M samples (-> 10M with --big):
  daily runs of 50 questions x 10 channels x 5 repeats x 10 brands written with COPY into the
  analyst tables (a scratch database per size), then the monitor's trends and changes stored as
  the refresh keeps them (analytics.rebuild_brand_rollup; the set-up time is printed, not
  measured). Each query run under EXPLAIN (ANALYZE, BUFFERS, TIMING OFF): ``seconds`` =
  planning + execution, ``buffers`` = shared hits + reads, ``rows`` returned. The queries: the
  analyst's (geo_pipeline_tests/scale_data.ANALYST_QUERIES: mention rate and share of voice over
  30 days, the report's 30-day trend, the day's flagged changes) and the brand dashboard's that
  read trends, changes and share of voice (deploy/grafana/dashboards/brand.json, rendered as
  Grafana does for the last 30 days). Queried as the database owner (analysts' row-level
  security not included). A query still running after GEO_SCALE_STATEMENT_TIMEOUT seconds
  (default 60) is stopped and reported as ``seconds = inf`` with ``timed_out``. Before 0049 the
  trend and change views recomputed the monitor's whole history on every query (measured on 2
  cores: the day's changes 11 s at 100k samples, 78 s at 1M; the report's trend over 30 days
  311 s at 100k).
- the refresh's rollup step for a run of the history's last day (analytics.refresh_brand_rollup),
  the work counted from PostgreSQL's statistics as for the analysis: independent of the history.

Scratch databases are created on the bench's admin URL (bench/_machine.py: GEO_BENCH_ADMIN_URL)
and dropped at exit. Run through bench/scale.py (``--only analys`` for these paths).
"""

from __future__ import annotations

import atexit
import itertools
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from _machine import ADMIN_URL
from psycopg.rows import dict_row

from geo_pipeline.analysis import analyse_run, refresh_analytics
from geo_pipeline.store import migrate
from geo_pipeline_tests.scale_data import (
    ANALYST_QUERIES,
    History,
    bulk_analyst_history,
    completed_run,
    counted,
)

Measure = Callable[[int], dict[str, float]]

_admin = ADMIN_URL
_databases: dict[str, Any] = {}  # key -> open connection to a scratch database
_run_no = itertools.count()


def _drop_all() -> None:
    for conn in _databases.values():
        name = conn.info.dbname
        conn.close()
        with psycopg.connect(_admin, autocommit=True) as a:
            a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
    _databases.clear()


atexit.register(_drop_all)


def _database(key: str) -> Any:
    if key not in _databases:
        name = f"geo_scale_{key}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(_admin, autocommit=True) as a:
            a.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        conn = psycopg.connect(_admin.rsplit("/", 1)[0] + "/" + name, row_factory=dict_row)
        migrate.upgrade(conn)
        conn.commit()
        _databases[key] = conn
    return _databases[key]


# ------------------------------------------------------------------ analysis of a run
def _fresh_run(size: int) -> tuple[Any, str]:
    conn = _database("analysis")
    run_id = f"scale-{size}-{next(_run_no)}"
    completed_run(conn, run_id, size)
    return conn, run_id


def measure_analysis(size: int) -> dict[str, float]:
    """analyse_run of a run of ``size`` completed answers (refresh not included)."""
    conn, run_id = _fresh_run(size)
    t0 = time.perf_counter()
    with counted(conn) as work:
        summary = analyse_run(conn, run_id, refresh=False)
    seconds = time.perf_counter() - t0
    assert summary.analysed == size, summary
    return {"seconds": seconds, "buffers": work.buffers, "rows": work.rows_read}


def measure_refresh(size: int) -> dict[str, float]:
    """refresh_analytics of a freshly analysed run of ``size`` answers."""
    conn, run_id = _fresh_run(size)
    analyse_run(conn, run_id, refresh=False)
    t0 = time.perf_counter()
    with counted(conn) as work:
        refresh_analytics(conn, run_id)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "buffers": work.buffers, "rows": work.rows_read}


# ------------------------------------------------------------------ analyst views
HISTORY_SIZES = [100_000, 1_000_000]
HISTORY_BIG = [10_000_000]


# Generated histories are kept in databases of their own, named by size (WORLD_PREFIX + size),
# and reused by later processes when GEO_SCALE_KEEP_WORLDS=1 (or when they exist already):
# generate once per size, measure as often as wanted. Without it they are dropped at exit.
WORLD_PREFIX = "geo_scale_world_"
KEEP_WORLDS = os.environ.get("GEO_SCALE_KEEP_WORLDS", "") not in ("", "0")


def _world(size: int) -> tuple[Any, History]:
    """The history of ``size`` samples in its own database: reused when a complete one exists,
    else generated (bulk_analyst_history) and recorded as complete."""
    name = f"{WORLD_PREFIX}{size}"
    base = _admin.rsplit("/", 1)[0]
    with psycopg.connect(_admin, autocommit=True) as a:
        exists = a.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            a.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    conn = psycopg.connect(f"{base}/{name}", row_factory=dict_row)
    done = conn.execute("SELECT to_regclass('public.scale_world') IS NOT NULL AS t").fetchone()
    if done is not None and done["t"]:
        row = conn.execute("SELECT history FROM public.scale_world").fetchone()
        conn.commit()
        if row is not None:
            h = row["history"]
            history = History(
                h["tenant"],
                h["monitor"],
                datetime.fromisoformat(h["first_day"]).date(),
                h["days"],
                h["samples"],
                h["brand_metrics_rows"],
            )
            migrate.upgrade(conn)  # a world kept from an older tree gets the newer migrations
            conn.commit()
            print(f"  (history of {size:,} samples: reusing database {name})", flush=True)
            return conn, history
    conn.rollback()
    migrate.upgrade(conn)
    conn.commit()
    t0 = time.perf_counter()
    history = bulk_analyst_history(conn, size)
    conn.execute("CREATE TABLE public.scale_world (history jsonb NOT NULL)")
    conn.execute("INSERT INTO public.scale_world VALUES (%s)", (json.dumps({
        **history.__dict__, "first_day": history.first_day.isoformat()}),))  # fmt: skip
    conn.commit()
    print(f"  (history of {size:,} samples generated in database {name}, its trends and changes"
          f" stored: {time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    return conn, history


def _drop_worlds() -> None:
    for size, (conn, _h) in list(_worlds.items()):
        name = conn.info.dbname
        conn.close()
        if not KEEP_WORLDS:
            with psycopg.connect(_admin, autocommit=True) as a:
                a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
        del _worlds[size]


_worlds: dict[int, tuple[Any, History]] = {}
atexit.register(_drop_worlds)


def _history(size: int) -> tuple[Any, History]:
    if size not in _worlds:
        _worlds[size] = _world(size)
    return _worlds[size]


def _last_day(history: History) -> Any:
    return history.first_day + timedelta(days=history.days - 1)


# The brand dashboard's queries (deploy/grafana/dashboards/brand.json) that read trends, changes
# and share of voice, with Grafana's substitution (geo_pipeline_tests/deploy/
# test_brand_dashboard.render): the monitor, every channel, the target brand, the 30 days up to
# the history's last day.
def dashboard_queries() -> dict[str, str]:
    from geo_pipeline_tests.deploy.test_brand_dashboard import DASHBOARD

    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = {f"dashboard variable {v['name']}": str(v["query"])
           for v in dash["templating"]["list"] if v.get("query")}  # fmt: skip
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            raw = str(target.get("rawSql") or "")
            if any(t in raw for t in ("brand_trends", "brand_changes", "share_of_voice")):
                out[f"dashboard panel {panel['id']}"] = raw
    return out


def _dashboard_measure(name: str, raw: str) -> Measure:
    def measure(size: int) -> dict[str, float]:
        from geo_pipeline_tests.deploy.test_brand_dashboard import render

        conn, history = _history(size)
        last = _last_day(history)
        channels = [f"p{c}/web/cn/standard" for c in range(10)]
        variables = {"monitor": [history.monitor], "channel": channels, "brand": ["brand 0"],
                     "region": ["cn"], "mode": ["standard"]}  # fmt: skip
        t_to = datetime.combine(last, datetime.min.time(), UTC) + timedelta(days=1)
        rendered = render(raw, variables, t_to - timedelta(days=30), t_to)
        return explain(conn, rendered, None)

    measure.__doc__ = f"the brand dashboard's {name} over a monitor's history of `size` samples"
    return measure


def measure_rollup_refresh(size: int) -> dict[str, float]:
    """The refresh's rollup step for a run of the history's last day (analytics.
    refresh_brand_rollup: that day, the 13 after it, each channel x brand's next day), with the
    work counted by PostgreSQL's statistics."""
    conn, history = _history(size)
    t0 = time.perf_counter()
    with counted(conn) as work:
        conn.execute("SELECT analytics.refresh_brand_rollup(%s, %s)",
                     (history.monitor, _last_day(history)))  # fmt: skip
        conn.commit()
    return {"seconds": time.perf_counter() - t0, "buffers": work.buffers, "rows": work.rows_read}


# A query still running after this many seconds is stopped and reported as timed out (its
# seconds are then a lower bound): the trend and change views grow with the square of the days.
STATEMENT_TIMEOUT_S = float(os.environ.get("GEO_SCALE_STATEMENT_TIMEOUT", "60"))


def explain(conn: Any, sql: str, params: dict[str, Any] | None) -> dict[str, float]:
    """Run ``sql`` under EXPLAIN (ANALYZE, BUFFERS, TIMING OFF): its server time, the shared
    buffers its plan touched and the rows it returned."""
    conn.execute("SELECT set_config('statement_timeout', %s, true)",
                 (f"{int(STATEMENT_TIMEOUT_S * 1000)}",))  # fmt: skip
    try:
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + sql,  # type: ignore[operator]
            params,
        ).fetchone()
    except psycopg.errors.QueryCanceled:
        conn.rollback()
        return {"seconds": math.inf, "timed_out": STATEMENT_TIMEOUT_S}
    conn.rollback()
    doc = next(iter(row.values()))[0]
    plan = doc["Plan"]
    return {
        "seconds": (doc["Planning Time"] + doc["Execution Time"]) / 1000.0,
        "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
        "rows": plan["Actual Rows"],
    }


def _analyst_measure(query: str) -> Measure:
    def measure(size: int) -> dict[str, float]:
        conn, history = _history(size)
        params = {"tenant": history.tenant, "monitor": history.monitor,
                  "day": _last_day(history)}  # fmt: skip
        return explain(conn, ANALYST_QUERIES[query], params)

    measure.__doc__ = f"analyst query {query!r} over a monitor's history of `size` samples"
    return measure


# (name, sizes, measure, sizes only with --big)
PATHS: list[tuple[str, list[int], Measure, list[int]]] = [
    ("analysis: analyse_run of a run (answers)", [1_000, 10_000], measure_analysis, [100_000]),
    ("analysis: refresh_analytics of a run (answers)", [1_000, 10_000], measure_refresh,
     [100_000]),
    *((f"analyst: {q} (history samples)", HISTORY_SIZES, _analyst_measure(q), HISTORY_BIG)
      for q in ANALYST_QUERIES),
    *((f"analyst: {name} (history samples)", HISTORY_SIZES, _dashboard_measure(name, raw),
       HISTORY_BIG) for name, raw in dashboard_queries().items()),
    ("analyst: the refresh's rollup of a day (history samples)", HISTORY_SIZES,
     measure_rollup_refresh, HISTORY_BIG),
]  # fmt: skip
