"""CPU seconds a ``geo-pipeline`` command costs before it does its work (issue 30 §4: goal
< 0.4 s for ``--help`` and for commands that do not touch Dagster).

    python bench/cli_startup.py [--repeats 7] [--source DIR]

Each command runs ``--repeats`` times in a fresh interpreter (``python -m
geo_pipeline.cli.main``, what the ``geo-pipeline`` script runs); the table shows the child's CPU
seconds (user + system, from ``wait4``), min / median / max, and the wall time. CPU seconds are
less sensitive than wall time to other work on the machine, but a loaded machine still inflates
them (shared caches, SMT siblings): the load average at the start and end is printed; read the
figures as upper bounds. ``--source DIR`` measures another checkout (e.g. an older commit in a git
worktree) with this interpreter: DIR goes first on PYTHONPATH. ``python -c pass`` is the floor.

The commands that read the database run against a scratch database migrated for the purpose
(``runs show`` of an unknown run: connect, one query, an error message; ``runs list`` of an
empty database). What each command imports is tested by counting, not timing:
geo_pipeline_tests/unit/foundation/test_cli_imports.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _machine import ADMIN_URL, print_table, scratch  # noqa: E402

COMMANDS: list[tuple[str, list[str], bool]] = [
    # (label, arguments, needs the database)
    ("python -c pass (floor)", [], False),
    ("--help", ["--help"], False),
    ("runs --help", ["runs", "--help"], False),
    ("runs show --help", ["runs", "show", "--help"], False),
    ("evidence get --help", ["evidence", "get", "--help"], False),
    ("runs show UNKNOWN", ["runs", "show", "no-such-run"], True),
    ("runs list", ["runs", "list", "--json"], True),
    ("tenants list", ["tenants", "list", "--json"], True),
]


def measure(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(CPU seconds of the child, wall seconds, exit code) of one run."""
    cli = [sys.executable, "-m", "geo_pipeline.cli.main", *argv]
    cmd = cli if argv else [sys.executable, "-c", "pass"]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):  # 1: `runs show` of an unknown run, on purpose
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{err.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime, wall, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--source", type=Path, default=None, help="Measure this checkout instead.")
    a = ap.parse_args()
    env = dict(os.environ)
    if a.source is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(a.source.resolve()), *filter(None, [env.get("PYTHONPATH")])]
        )
    # `python -m` puts the working directory first on sys.path: run in the measured checkout.
    cwd = a.source.resolve() if a.source is not None else ROOT
    where = subprocess.run(
        [sys.executable, "-c", "import geo_pipeline; print(geo_pipeline.__file__)"],
        env=env, cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    load_start = os.getloadavg()
    rows = []
    with scratch("cli_startup") as (db_url, _prefix):
        env["GEO_DATABASE_URL"] = db_url
        upgrade = [sys.executable, "-m", "geo_pipeline.cli.main", "db", "upgrade"]
        subprocess.run(upgrade, env=env, cwd=cwd, check=True, capture_output=True)
        for label, argv, _needs_db in COMMANDS:
            cpu, wall = [], []
            for _ in range(a.repeats):
                c, w, _code = measure(argv, env, cwd)
                cpu.append(c)
                wall.append(w)
            rows.append({
                "command": label,
                "cpu min s": f"{min(cpu):.3f}",
                "cpu median s": f"{statistics.median(cpu):.3f}",
                "cpu max s": f"{max(cpu):.3f}",
                "wall median s": f"{statistics.median(wall):.3f}",
                "runs": a.repeats,
            })  # fmt: skip
    load_end = os.getloadavg()
    print_table(rows, f"geo-pipeline start-up, CPU seconds (user + system) of {where}")
    print(
        f"load average (1, 5, 15 min): start {load_start[0]:.2f} {load_start[1]:.2f} "
        f"{load_start[2]:.2f}, end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}; "
        f"database server {ADMIN_URL.rsplit('@', 1)[-1]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
