"""Where a 100,000-sample create_run spends the database's time, statement by statement (issue 39).

python bench/create_run_statements.py              # 3 rounds into a growing history
python bench/create_run_statements.py --rounds 1

bench/plan.py's rounds (the same config, the same growing history), with every statement
create_run sends timed by the CPU of the server backend that ran it (/proc/<pid>/schedstat,
nanoseconds: a shared machine's load inflates it far less than the wall clock) and by the wall
clock; the commit (its WAL flush) is timed apart. The COPY's row includes the statement-level
insert guard (geo.guard_sample_insert), whose own time is shown from pg_stat_xact_user_functions
(track_functions = 'pl' for this session only). Statements are named by their first SQL line.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import print_table
from plan import config

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.runtime import services
from geo_pipeline.store import migrate
from geo_pipeline.store.queries import _load_all


def cpu_ns(pid: int) -> int:
    """CPU nanoseconds the process ``pid`` has run (0 when it is not local)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0])
    except OSError:
        return 0


def _name(query: object) -> str:
    text = query if isinstance(query, str) else str(query)
    for name, sql in _load_all().items():
        if sql == text:
            return name
    return text.strip().splitlines()[0][:60]


class Timer:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.notes = ""

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        c0, t0 = cpu_ns(self.pid), time.perf_counter()
        try:
            yield
        finally:
            self.cpu[name] += (cpu_ns(self.pid) - c0) / 1e9
            self.wall[name] += time.perf_counter() - t0
            self.calls[name] += 1


@contextmanager
def patched(timer: Timer) -> Iterator[None]:
    """Time every cursor.execute / executemany / copy of the block."""
    cur = psycopg.Cursor
    ex, exm, cp = cur.execute, cur.executemany, cur.copy

    def execute(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        with timer.timed(_name(query)):
            return ex(self, query, *a, **k)

    def executemany(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        with timer.timed(_name(query)):
            return exm(self, query, *a, **k)

    @contextmanager
    def copy(self: Any, statement: Any, *a: Any, **k: Any) -> Iterator[Any]:
        with timer.timed(_name(statement)), cp(self, statement, *a, **k) as c:
            yield c

    cur.execute, cur.executemany, cur.copy = execute, executemany, copy  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        cur.execute, cur.executemany, cur.copy = ex, exm, cp  # type: ignore[method-assign]


TEMP = """SELECT temp_files, temp_bytes FROM pg_stat_database WHERE datname = current_database()"""
GUARD = """SELECT coalesce(sum(total_time), 0) / 1000 AS s FROM pg_stat_xact_user_functions
  WHERE schemaname = 'geo' AND funcname = 'guard_sample_insert'"""


def temp_files(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """The database's temporary files and bytes so far (this backend's own counts flushed)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.commit()
    time.sleep(0.05)  # the flush happens when the backend goes idle
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(TEMP).fetchone()
    conn.commit()
    return (int(row["temp_files"]), int(row["temp_bytes"])) if row else (0, 0)  # type: ignore[call-overload]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="runs to create (default 3)")
    args = ap.parse_args()
    admin = services.postgres(
        Path(tempfile.gettempdir()) / "geo-bench-pg", env_var="GEO_BENCH_DATABASE_URL", admin=True
    )
    name = f"geo_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin.url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    url = urlunsplit(urlsplit(admin.url)._replace(path="/" + name))
    rounds: list[Timer] = []
    try:
        with psycopg.connect(url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
            migrate.upgrade(conn)
            ledger.deposit(conn, "bench", 10**12, "CNY", "bench-deposit")
            conn.execute("SET track_functions = 'pl'")
            conn.commit()
            caps = load_registry().capabilities()
            for i in range(args.rounds):
                n = normalise_and_validate(config(), caps)
                plan = build_plan(n, quote(n, {p: c.prices for p, c in caps.items()}), f"bench-{i}")
                timer = Timer(conn.info.backend_pid)
                temp0 = temp_files(conn)
                with timer.timed("(create_run: everything to the commit)"):
                    tx = conn.transaction()
                    tx.__enter__()
                    with patched(timer):
                        create_run(conn, plan)
                    row = conn.execute(GUARD).fetchone()
                    with timer.timed("COMMIT"):
                        tx.__exit__(None, None, None)
                timer.cpu["  of which geo.guard_sample_insert"] = float(row["s"]) if row else 0.0  # type: ignore[call-overload]
                temp1 = temp_files(conn)
                timer.cpu["(temporary files written: n, MB)"] = 0.0
                timer.notes = f"{temp1[0] - temp0[0]}, {(temp1[1] - temp0[1]) / 1e6:.1f}"
                rounds.append(timer)
    finally:
        with psycopg.connect(admin.url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
        admin.stop()
    names = sorted({k for t in rounds for k in t.cpu}, key=lambda k: -rounds[0].cpu.get(k, 0))
    table = []
    for k in names:
        row: dict[str, str] = {"statement": k, "calls": str(rounds[0].calls.get(k, 0))}
        for i, t in enumerate(rounds):
            row[f"cpu_pg_s r{i}"] = (
                t.notes if k.startswith("(temporary") else f"{t.cpu.get(k, 0):.3f}"
            )
            row[f"wall_s r{i}"] = f"{t.wall.get(k, 0):.3f}" if k in t.wall else "-"
        table.append(row)
    print_table(
        table,
        "bench/create_run_statements.py — a 100,000-sample create_run per statement, rounds into "
        "a growing history (cpu_pg_s: the server backend's CPU; the guard's row: its total time)",
    )
    print(f"load: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
