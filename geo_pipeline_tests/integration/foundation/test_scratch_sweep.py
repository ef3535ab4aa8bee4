"""A test process killed before its teardown left its scratch databases on the shared server for
ever. A pytest session drops, when it starts, the ones whose creator is gone, and never one of a
live process (another xdist worker, another worktree's session) or of another machine."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from geo_pipeline_tests.fixtures.postgres import create_database, drop_database

REPO = Path(__file__).resolve().parents[3]
# A creator imports psycopg and the fixtures and creates one database: about 1 s here on a
# loaded 2-core box; the bound is generous and only reached when something is broken.
READY_WITHIN_S = 120

CREATOR = """
import sys, time
from geo_pipeline_tests.fixtures.postgres import create_database
create_database(sys.argv[1], sys.argv[2])
print("created", flush=True)
time.sleep(3600)
"""


def _failure(proc: subprocess.Popen[str], what: str) -> str:
    proc.kill()
    out, err = proc.communicate()
    return f"{what}\n--- stdout\n{out}\n--- stderr\n{err}"


def _start_creator(admin_url: str, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CREATOR, admin_url, name],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_WITHIN_S)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "created":
        pytest.fail(_failure(proc, f"the creator did not create {name} (read {line!r})"))
    return proc


def _exists(admin_url: str, name: str) -> bool:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


def _new_session(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A pytest session of one test asking for the server (the fixtures' session start)."""
    (tmp_path / "test_asks.py").write_text(
        textwrap.dedent("""
            def test_asks_for_the_server(pg_admin_url):
                assert pg_admin_url
        """)
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "geo_pipeline_tests.fixtures.postgres",
         "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"),
         "--rootdir", str(tmp_path), str(tmp_path / "test_asks.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture
def names(pg_admin_url: str) -> Iterator[dict[str, str]]:
    made = {k: f"geo_t_{uuid.uuid4().hex[:12]}" for k in ("dead", "live", "elsewhere")}
    yield made
    for name in made.values():
        drop_database(pg_admin_url, name)


def test_a_session_drops_the_scratch_databases_of_killed_creators_only(
    pg_admin_url: str, names: dict[str, str], tmp_path: Path
) -> None:
    dead = _start_creator(pg_admin_url, names["dead"])
    live = _start_creator(pg_admin_url, names["live"])
    try:
        dead.send_signal(signal.SIGKILL)  # no teardown runs
        dead.wait()
        # a database marked by a process of another machine (its own boot id, pid 1)
        create_database(pg_admin_url, names["elsewhere"])
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                (names["elsewhere"],),
            ).fetchone()
            prefix, brace, creator = ((row[0] if row else None) or "").partition("{")
            if brace:
                other = {**json.loads(brace + creator), "boot_id": str(uuid.uuid4()), "pid": 1}
                conn.execute(
                    sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                        sql.Identifier(names["elsewhere"]), sql.Literal(prefix + json.dumps(other))
                    )
                )

        session = _new_session(tmp_path)
        assert session.returncode == 0, f"{session.stdout}\n{session.stderr}"
        left = {k: _exists(pg_admin_url, n) for k, n in names.items()}
        assert left == {"dead": False, "live": True, "elsewhere": True}, (
            f"after a new session's start: {left} (True: still on the server)"
        )
        assert live.poll() is None, _failure(live, "the live creator ended")
    finally:
        live.kill()
        live.communicate()
