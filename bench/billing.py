"""Billing throughput on this machine: charges posted per second (one run, many workers: they
serialise on the run's account row by design; many runs: they do not), a plain unique-key insert
for comparison, and what a balance read costs as a tenant's ledger grows.

    python bench/billing.py [--charges 4000] [--threads 1,4,8]

Needs PostgreSQL (GEO_DATABASE_URL, default postgresql://postgres@127.0.0.1:5432/postgres as
admin); creates and drops its own database.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import print_table

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import Plan, build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import migrate

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}


def with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def make_run(conn, tenant: str, run_id: str, questions: int) -> Plan:
    raw = {
        "tenant": tenant,
        "brand": {"name": "bench"},
        "questions": [f"question number {i} about coffee?" for i in range(questions)],
        "channels": [{"platform": "doubao", "device": "web"}],
        "repeats": 10,
        "max_attempts": 1,
    }
    cfg = normalise_and_validate(raw, CAPS)
    plan = build_plan(cfg, quote(cfg, PRICES), run_id)
    create_run(conn, plan, confirm=True, dispatch=False)
    conn.commit()
    return plan


def charge_all(url: str, reqs: list[ledger.ChargeRequest], threads: int) -> float:
    chunks = [reqs[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def go(chunk: list[ledger.ChargeRequest]) -> None:
        with psycopg.connect(url, row_factory=dict_row) as conn:
            barrier.wait()
            for r in chunk:
                with conn.transaction():  # the worker's completion transaction
                    ledger.post_charge(conn, r)

    ts = [threading.Thread(target=go, args=(c,)) for c in chunks]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def plain_inserts(url: str, n: int, threads: int) -> float:
    barrier = threading.Barrier(threads + 1)

    def go(k: int) -> None:
        with psycopg.connect(url) as conn:
            barrier.wait()
            for i in range(n // threads):
                with conn.transaction():  # same transaction shape as a completion
                    conn.execute(
                        "INSERT INTO geo.ledger_entries (tenant_id, kind, amount_minor, currency,"
                        " idempotency_key) VALUES ('bench', 'deposit', 1, 'CNY', %s)"
                        " ON CONFLICT (idempotency_key) DO NOTHING",
                        (f"plain:{k}:{i}:{uuid.uuid4().hex}",),
                    )

    ts = [threading.Thread(target=go, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--charges", type=int, default=4000)
    ap.add_argument("--threads", default="1,4,8")
    args = ap.parse_args()
    admin = os.environ.get("GEO_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"billingbench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    url = with_db(admin, name)
    rows: list[dict[str, object]] = []
    try:
        with psycopg.connect(url, row_factory=dict_row) as conn:
            migrate.upgrade(conn)
            conn.commit()
            ledger.deposit(conn, "bench", 10**12, "CNY", "bench-deposit")
            n_q = max(1, args.charges // 10)
            threads_list = [int(t) for t in args.threads.split(",")]
            for threads in threads_list:
                for layout in ("one run", "run per thread"):
                    runs = 1 if layout == "one run" else threads
                    reqs: list[ledger.ChargeRequest] = []
                    for r in range(runs):
                        run_id = f"b{threads}-{r}-{uuid.uuid4().hex[:6]}"
                        plan = make_run(conn, "bench", run_id, max(1, n_q // runs))
                        reqs += [
                            ledger.ChargeRequest(
                                "bench",
                                run_id,
                                s.sample_id,
                                1,
                                f"u-{s.sample_id}",
                                s.platform,
                                s.mode,
                                "completed",
                                screenshot_used=True,
                            )
                            for s in plan.samples
                        ]
                    secs = charge_all(url, reqs, threads)
                    rows.append(
                        {
                            "what": f"post_charge, {layout}",
                            "threads": threads,
                            "charges": len(reqs),
                            "per_s": round(len(reqs) / secs),
                            "ms_each": round(secs / len(reqs) * 1000 * threads, 3),
                        }
                    )
                secs = plain_inserts(url, args.charges, threads)
                rows.append(
                    {
                        "what": "plain unique-key insert (baseline)",
                        "threads": threads,
                        "charges": args.charges,
                        "per_s": round(args.charges / secs),
                        "ms_each": round(secs / args.charges * 1000 * threads, 3),
                    }
                )
            assert ledger.account_drift(conn) == [], "run accounts drifted from the entries"
            entries = conn.execute(
                "SELECT count(*) AS n FROM geo.ledger_entries WHERE tenant_id = 'bench'"
            ).fetchone()
            for label, fn in (
                ("balances(tenant): run accounts + deposits", ledger.balances),
                ("balances_from_entries(tenant): every entry", ledger.balances_from_entries),
            ):
                t0 = time.perf_counter()
                for _ in range(20):
                    fn(conn, "bench")
                secs = time.perf_counter() - t0
                rows.append(
                    {
                        "what": label,
                        "threads": 1,
                        "charges": f"{entries['n'] if entries else 0} entries",
                        "per_s": round(20 / secs),
                        "ms_each": round(secs / 20 * 1000, 3),
                    }
                )
            assert ledger.balances(conn, "bench") == ledger.balances_from_entries(conn, "bench")
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
    print_table(rows, "billing: charges in the completion transaction (synchronous_commit on)")


if __name__ == "__main__":
    main()
