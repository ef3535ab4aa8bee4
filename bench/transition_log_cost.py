"""What logging a batched UPDATE of samples' state transitions costs PostgreSQL, by batch size
(issue 33; migration 0091).

    python bench/transition_log_cost.py                    # n = 1 .. 1,500, 7 repeats, 2 rounds
    python bench/transition_log_cost.py --sizes 45,80,110 --reps 9

Every batched UPDATE of geo.samples (claims, sends, acceptances, finishes, lease renewals) runs
the statement trigger log_sample_transitions, which joins the statement's old and new rows.
Its statements are planned once per session, with the transition tables estimated at the row
count of the call that planned them. Each pass here is such a session: a fresh connection
whose first UPDATE moves one sample (as a worker's first claim or send may), then UPDATEs of n
samples (queued -> running, one transition row each), each rolled back. The figure is the
server backend's CPU during the UPDATE (/proc/<pid>/schedstat), per sample, median of the
repeats, best of the rounds; the variants alternate round by round on one scratch database:

* ``0090``: the function as migration 0090 left it (no SET clause: a nested loop planned at
  one row stays for the session);
* ``0091``: enable_nestloop and jit off while it runs, reopen_run_retention with
  enable_nestloop on (the shipped schema).

Run it on the box's PostgreSQL (it reads the backend's /proc entry).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput
from _machine import print_table

VARIANTS = {
    "0090": [
        "ALTER FUNCTION geo.log_sample_transitions() RESET ALL",
        "ALTER FUNCTION geo.reopen_run_retention() RESET ALL",
    ],
    "0091": [
        "ALTER FUNCTION geo.log_sample_transitions() SET enable_nestloop = off",
        "ALTER FUNCTION geo.log_sample_transitions() SET jit = off",
        "ALTER FUNCTION geo.reopen_run_retention() SET enable_nestloop = on",
    ],
}
MOVE = (
    "UPDATE geo.samples SET collection_state = 'running', lease_owner = 'bench',"
    " lease_until = now() + interval '1 minute', fencing_token = fencing_token + 1"
    " WHERE sample_id = ANY(%s)"
)


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        return int(f.read().split()[0])


def one_pass(url: str, variant: str, ids: list[str], sizes: list[int], reps: int) -> dict:
    with psycopg.connect(url, autocommit=True) as c:
        for stmt in VARIANTS[variant]:
            c.execute(stmt)  # type: ignore[arg-type]
    out: dict[int, float] = {}
    with psycopg.connect(url) as conn:
        pid = conn.info.backend_pid
        # The session's first UPDATE moves one sample; a few small ones past the custom plans.
        for k in range(9):
            conn.execute(MOVE, [ids[k : k + (1 if k == 0 else 2)]])
            conn.rollback()
        for n in sizes:
            vals = []
            for r in range(reps):
                start = (r * 7) % max(1, len(ids) - n)
                t0 = _cpu_ns(pid)
                conn.execute(MOVE, [ids[start : start + n]])
                vals.append(_cpu_ns(pid) - t0)
                conn.rollback()
            out[n] = statistics.median(vals) / n / 1e3
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("VACUUM geo.samples")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1,10,45,80,110,300,1500")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    name, url = throughput.create_db()
    try:
        throughput.make_run(url, max(2000, max(sizes) + 100), "tlog")
        with psycopg.connect(url) as c:
            ids = [r[0] for r in c.execute(
                "SELECT sample_id FROM geo.samples WHERE collection_state = 'queued'"
                " ORDER BY sample_id"
            ).fetchall()]  # fmt: skip
        got: dict[str, list[dict[int, Any]]] = {v: [] for v in VARIANTS}
        for rnd in range(args.rounds):
            for v in list(VARIANTS) if rnd % 2 == 0 else list(VARIANTS)[::-1]:
                got[v].append(one_pass(url, v, ids, sizes, args.reps))
        table = [
            {"variant": v, **{f"n={n}": f"{min(g[n] for g in got[v]):.1f}" for n in sizes}}
            for v in VARIANTS
        ]
        print_table(
            table,
            "backend CPU per updated sample (us), UPDATE of n samples with one transition each, "
            f"after a first 1-sample UPDATE in the session; median of {args.reps}, best of "
            f"{args.rounds} rounds",
        )
    finally:
        throughput.drop_db(name)


if __name__ == "__main__":
    main()
