"""Exactly one charge per charged attempt under crashes, replays and concurrency (R9, R24, R25).

A real process is killed (SIGKILL) inside the completion transaction after posting the charge
(before commit: the work is lost with it) and after commit but before the stream ack (the work is
kept and the message will be redelivered). Every completion is then replayed many times, also
concurrently from several connections: one charge entry per attempt, never two.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline_tests.integration.billing.helpers import create
from geo_pipeline_tests.processes import outcome

WORKER = textwrap.dedent(
    """
    import json, os, signal, sys
    import psycopg
    from psycopg.rows import dict_row
    from geo_pipeline.billing import ledger

    url, mode, req = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    conn = psycopg.connect(url, row_factory=dict_row)
    with conn.transaction():
        # the fenced completion would update the sample here; the charge is in the same tx
        ledger.post_charge(conn, ledger.ChargeRequest(**req))
        if mode == "before_commit":
            os.kill(os.getpid(), signal.SIGKILL)
    if mode == "before_ack":
        os.kill(os.getpid(), signal.SIGKILL)  # committed; the stream message is never acked
    """
)


def request(plan, i, attempt=1, **kw):
    s = plan.samples[i]
    return ChargeRequest(
        plan.config.tenant,
        plan.run_id,
        s.sample_id,
        attempt,
        f"up-{i}-{attempt}",
        s.platform,
        s.mode,
        "completed",
        **kw,
    )


def run_worker(db_url, mode, req):
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, db_url, mode, json.dumps(req.__dict__)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, outcome(proc)


def replay(db_url, req, times, threads=4):
    results = []
    lock = threading.Lock()

    def go():
        with psycopg.connect(db_url, row_factory=dict_row) as conn:
            for _ in range(times):
                with conn.transaction():
                    r = ledger.post_charge(conn, req)
                with lock:
                    results.append(r)

    ts = [threading.Thread(target=go) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def charges(db, run_id):
    return [
        (e["sample_id"], e["attempt_no"], e["amount_minor"])
        for e in ledger.run_ledger(db, run_id)["entries"]
        if e["kind"] == "charge"
    ]


@pytest.mark.parametrize("mode", ["before_commit", "before_ack"])
def test_killed_worker_then_replays_charge_exactly_once(db, db_url, mode):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "rf", questions=2)
    req = request(plan, 0, screenshot_used=True)
    run_worker(db_url, mode, req)
    db.rollback()
    assert len(charges(db, "rf")) == (1 if mode == "before_ack" else 0)
    results = replay(db_url, req, times=5, threads=4)
    assert charges(db, "rf") == [(req.sample_id, 1, 8)]
    new_entries = [r for r in results if r is not None]
    assert len(new_entries) == (0 if mode == "before_ack" else 1)
    assert ledger.account_drift(db) == []
    assert ledger.balances(db, "acme").spent.amount_minor == 8


def test_concurrent_charges_of_one_run_share_the_reservation_exactly(db, db_url):
    """Many workers charge different attempts at once; the reservation is smaller than their
    total: every overrun is adjusted explicitly, to the minor unit, and nothing is lost."""
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    plan = create(db, "rc", questions=10, repeats=2, max_attempts=1, screenshot="off")
    est = plan.quote.estimated_max.amount_minor
    assert est == 20 * 6
    reqs = [request(plan, i, a) for i in range(20) for a in (1, 2)]  # twice what was reserved
    errors = []

    def go(chunk):
        try:
            with psycopg.connect(db_url, row_factory=dict_row) as conn:
                for r in chunk:
                    with conn.transaction():
                        ledger.post_charge(conn, r)
                        ledger.post_charge(conn, r)  # a duplicate inside the same completion
        except Exception as exc:  # surfaced below; a thread must not swallow it
            errors.append(exc)

    ts = [threading.Thread(target=go, args=(reqs[i::4],)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    t = ledger.run_ledger(db, "rc")["totals"]
    assert t["charged_minor"] == 40 * 6
    assert t["overrun_minor"] == 40 * 6 - est
    assert sum(e["amount_minor"] for e in ledger.entries_for_review(db, "rc")) == 40 * 6 - est
    assert len(charges(db, "rc")) == 40
    assert ledger.account_drift(db) == []
