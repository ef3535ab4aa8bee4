"""Scale-sweep paths of the core (bench/scale.py loads ``PATHS`` from every bench/_scale_*.py):
creating a run with its plan checks, and settling (reconciling) a run's charges.

Each measure(size) works in a scratch database of its own path, created on first use and dropped
when the process ends; the rows it builds stay, so later sizes and repeats run beside history,
as in production. The work counted (rows read, buffers, statements) is the measured block's
only (geo_pipeline.store.work), the set-up is not timed.
"""

from __future__ import annotations

import atexit
import contextlib
import time
from collections.abc import Callable
from typing import Any

import psycopg
from _machine import _proc_cpu, scratch
from plan import config as plan_config
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.connectors.base import FeeLine, FeeStatement
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import Plan, build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.flows.settle import settle_run
from geo_pipeline.store import migrate
from geo_pipeline.store.work import measured

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}
_exit = contextlib.ExitStack()
atexit.register(_exit.close)
_conns: dict[str, Any] = {}


def _conn(path: str) -> Any:
    """The path's scratch database (migrated, a funded tenant), made once per process."""
    if path not in _conns:
        url, _ns = _exit.enter_context(scratch(f"geo_scale_{path}"))
        conn = _exit.enter_context(psycopg.connect(url, row_factory=dict_row))  # type: ignore[arg-type]
        migrate.upgrade(conn)
        conn.commit()
        ledger.deposit(conn, "scale", 10**13, "CNY", f"scale-deposit-{path}")
        conn.commit()
        _conns[path] = conn
    return _conns[path]


def _cpu(pid: int) -> float:
    got = _proc_cpu(f"/proc/{pid}/stat")
    return got[1] if got else float("nan")


def _timed(conn: Any, block: Callable[[], object]) -> dict[str, float]:
    """Wall seconds, CPU seconds (this process + the database backend) and work of ``block``."""
    pid = conn.info.backend_pid
    c0, s0, t0 = time.process_time(), _cpu(pid), time.perf_counter()
    with measured(conn) as w:
        block()
    t1, c1, s1 = time.perf_counter(), time.process_time(), _cpu(pid)
    return {
        "seconds": t1 - t0,
        "cpu_s": (c1 - c0) + (s1 - s0),
        "rows": w.rows_read,
        "buffers": w.buffers,
        "statements": w.statements,
    }


# --------------------------------------------------------------------------- create_run
_runs = 0


def plan_of_size(samples: int, run_id: str, tenant: str = "scale") -> Plan:
    """bench/plan.py's config (20 channel settings, cap 100) sized to ``samples``: 10 repeats
    and samples // 200 questions up to 100,000 samples; above, 500 questions (the most a run
    may ask) and more repeats (at most 20: the largest run this config shape allows is 200,000
    samples; a run may not exceed 500 questions x 28 channel settings x 20 repeats)."""
    raw = plan_config()
    questions = max(1, min(500, samples // 200))
    raw["tenant"] = tenant
    raw["repeats"] = max(1, min(20, samples // (20 * questions)))
    raw["questions"] = [f"问题 {i}：哪家连锁咖啡性价比最高？" for i in range(questions)]
    n = normalise_and_validate(raw, CAPS)
    return build_plan(n, quote(n, PRICES), run_id)


def measure_create_run(size: int) -> dict[str, float]:
    """create_run with its plan checks and first dispatch, in one transaction."""
    global _runs
    conn = _conn("create")
    _runs += 1
    plan = plan_of_size(size, f"scale-{size}-{_runs}")
    return _timed(conn, lambda: create_run(conn, plan))


# --------------------------------------------------------------------------- settlement
_settle_runs: dict[int, str] = {}


def _charged_run(conn: Any, size: int) -> str:
    """A run of ``size`` samples (plan_of_size), each charged once (one upstream task), and each
    platform's statement for the day listing its tasks with the amounts we charged (so every
    task reconciles, matched)."""
    if size in _settle_runs:
        return _settle_runs[size]
    run_id = f"settle-{size}"
    plan = plan_of_size(size, run_id)
    create_run(conn, plan, confirm=True, dispatch=False)
    conn.commit()
    requests = [
        ledger.ChargeRequest(
            "scale", run_id, s.sample_id, 1, f"u-{s.sample_id}", s.platform, s.mode, "completed"
        )
        for s in plan.samples
    ]
    with conn.transaction():
        ledger.post_charges(conn, requests)
    charged = conn.execute(
        "SELECT e.upstream_id, e.details->>'platform' AS platform, e.details->'items' AS items,"
        " e.currency, (e.created_at AT TIME ZONE 'UTC')::date AS day FROM geo.ledger_entries e"
        " WHERE e.run_id = %s AND e.kind = 'charge' ORDER BY e.entry_id",
        (run_id,),
    ).fetchall()
    conn.commit()
    by_platform: dict[str, list[FeeLine]] = {}
    for r in charged:
        for item, amount in sorted((r["items"] or {}).items()):
            line = FeeLine(r["upstream_id"], item, int(amount), r["currency"].strip())
            by_platform.setdefault(r["platform"], []).append(line)
    day, currency = charged[0]["day"].isoformat(), charged[0]["currency"].strip()
    for platform, lines in sorted(by_platform.items()):
        reconcile.import_statement(conn, FeeStatement(platform, day, currency, tuple(lines)))
    conn.commit()
    _settle_runs[size] = run_id
    return run_id


def measure_settlement(size: int) -> dict[str, float]:
    """settle_run without a registry: the run's status, then reconcile its charges against the
    imported statement (rewriting its reconciliation lines); repeats re-settle the same run."""
    conn = _conn("settle")
    run_id = _charged_run(conn, size)
    return _timed(conn, lambda: settle_run(conn, run_id, registry=None))


# (name, sizes, measure[, sizes run only with --big]). The default sizes keep `make bench`
# within minutes on 2 cores; the large ones take their set-up time (a 100,000-charge run)
# or are slow by nature (a 200,000-sample run: the largest bench/plan.py's
# config shape allows, 500 questions x 20 channel settings x 20 repeats).
PATHS: list[tuple[Any, ...]] = [
    (
        "create_run + plan checks (samples)",
        [1_000, 10_000, 100_000],
        measure_create_run,
        [200_000],
    ),
    ("settlement / reconciliation (charges)", [1_000, 10_000], measure_settlement, [100_000]),
]
