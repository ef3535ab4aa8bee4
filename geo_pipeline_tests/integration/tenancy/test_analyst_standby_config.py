"""The analyst endpoint's standby against a replica configured as operators configure theirs
(issue #35): the standby takes no configuration of the replica's (embedded_pg.start_standby).

A replica of the embedded binaries (PostgreSQL 18, as the standby must be), set up two ways:

- ``outside``: Debian's layout, postgresql.conf / pg_hba.conf / pg_ident.conf in a directory of
  their own (``-c config_file=...``), which a base backup does not copy;
- ``inside``: the files in the data directory (copied by the base backup), with the common
  ``local all all peer`` line, TCP on, an ``include_dir`` and ``shared_preload_libraries`` the
  wheel lacks, in the replica's ALTER SYSTEM file (postgresql.auto.conf, always read).

Both with ``max_connections = 120`` (an included file): a hot standby needs at least its
primary's. Then the endpoint as the CLI makes it: the standby, the logins' verifiers read from it
over its socket as the superuser, PgBouncer in front, an analyst login through it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.runtime import analyst_pooler, embedded_pg
from geo_pipeline_tests.fixtures.postgres import server_state_dir

PASSWORD = "replica-superuser-secret"
WAIT_S = 120  # a bound for a standby that never replays, not a speed


def _connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(url, row_factory=dict_row, autocommit=True, **kw)  # type: ignore[arg-type]


def _own(path: Path, who: embedded_pg.RunAs) -> None:
    if who.dropping:
        for p in [path, *path.rglob("*")]:
            os.chown(p, who.uid or 0, who.gid or 0)


@contextlib.contextmanager
def _replica(state: Path, layout: str) -> Iterator[tuple[str, int]]:
    """Start the replica; yields (its superuser's TCP URL of database geo, its port)."""
    who = embedded_pg.RunAs.for_current_user()
    binaries = embedded_pg.bin_dir()
    pgdata, etc = state / "pgdata", state / "etc"
    pgdata.mkdir()
    etc.mkdir()
    (etc / "pw").write_text(PASSWORD + "\n")
    _own(state, who)
    if who.dropping:
        embedded_pg._let_through(pgdata, who)
        embedded_pg._let_through(binaries, who)
    pgdata.chmod(0o700)
    embedded_pg._run(
        [str(binaries / "initdb"), "-D", str(pgdata), "-U", "postgres", "--encoding=utf8",
         f"--pwfile={etc / 'pw'}", "--auth-local=peer", "--auth-host=scram-sha-256"],
        who, pgdata, embedded_pg.START_TIMEOUT_S,
    )  # fmt: skip
    port = analyst_pooler.free_port()
    hba = (
        "local all all peer\n"
        "host all all 127.0.0.1/32 scram-sha-256\n"
        "host replication all 127.0.0.1/32 scram-sha-256\n"
    )
    settings = f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n"
    if layout == "outside":
        for name in ("postgresql.conf", "pg_hba.conf", "pg_ident.conf"):
            shutil.move(pgdata / name, etc / name)
        conf, conf_d = etc / "postgresql.conf", etc / "conf.d"
        settings += f"hba_file = '{etc / 'pg_hba.conf'}'\nident_file = '{etc / 'pg_ident.conf'}'\n"
        options = f"-c config_file={shlex.quote(str(conf))}"
    else:
        conf, conf_d = pgdata / "postgresql.conf", pgdata / "conf.d"
        options = ""
        # ALTER SYSTEM's file, read whatever config_file says; a library the wheel lacks
        (pgdata / "postgresql.auto.conf").write_text(
            "shared_preload_libraries = 'geo_no_such_library'\n"
        )
    (conf.parent / "pg_hba.conf").write_text(hba)
    conf_d.mkdir()
    (conf_d / "10-site.conf").write_text("max_connections = 120\n")
    with conf.open("a") as f:
        f.write(settings + "include_dir 'conf.d'\n")
    _own(state, who)
    if layout == "inside":
        # the replica itself runs without the missing library (its operator's server has it)
        options += " -c shared_preload_libraries=''"
    embedded_pg._run(
        [str(binaries / "pg_ctl"), "-D", str(pgdata), "-w", "-t", str(embedded_pg.START_TIMEOUT_S),
         "-l", str(state / "log"), "-o", options, "start"],
        who, pgdata, embedded_pg.START_TIMEOUT_S + 30,
    )  # fmt: skip
    try:
        yield f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/geo", port
    finally:
        embedded_pg._run(
            [str(binaries / "pg_ctl"), "-D", str(pgdata), "-m", "immediate", "-w", "stop"],
            who, pgdata, embedded_pg.START_TIMEOUT_S + 30,
        )  # fmt: skip


@pytest.mark.parametrize("layout", ["outside", "inside"])
def test_the_endpoint_runs_on_a_replica_whose_configuration_is_its_operators(
    tmp_path: Path, layout: str
):
    try:
        analyst_pooler.pgbouncer_binary()
    except analyst_pooler.PoolerUnavailable as exc:
        pytest.skip(str(exc))
    with (
        server_state_dir(tmp_path / "replica") as r_state,
        server_state_dir(tmp_path / "standby") as s_state,
    ):
        with _replica(r_state, layout) as (admin_geo, port):
            with _connect(admin_geo.replace("/geo", "/postgres")) as r:
                r.execute("CREATE DATABASE geo")
            with _connect(admin_geo) as r:
                r.execute("CREATE ROLE geo_analyst NOLOGIN")
                r.execute("CREATE ROLE ana_x LOGIN PASSWORD 'ana-secret' IN ROLE geo_analyst")
                r.execute("CREATE ROLE repl_x LOGIN REPLICATION PASSWORD 'repl-secret'")
            source = f"host=127.0.0.1 port={port} user=repl_x password=repl-secret dbname=geo"
            standby = embedded_pg.start_standby(s_state / "standby", source)
            pooler = None
            try:
                standby_url = (
                    f"postgresql://postgres@/geo?host={standby.socket_dir}&port={standby.port}"
                )
                with _connect(standby_url) as s:
                    deadline = time.monotonic() + WAIT_S
                    # (this replica has no project schema: the verifier from the catalogue)
                    verifiers: list[tuple[str, str]] = []
                    while not verifiers:
                        assert time.monotonic() < deadline, "the standby did not replay the login"
                        verifiers = [
                            (r["rolname"], r["rolpassword"])
                            for r in s.execute(
                                "SELECT rolname, rolpassword FROM pg_authid WHERE rolname = 'ana_x'"
                            )
                        ]
                        s.execute("SELECT pg_sleep(0.05)")
                    shown = {
                        name: s.execute(f"SHOW {name}").fetchone()[name]  # type: ignore[index]
                        for name in ("listen_addresses", "hba_file", "max_connections", "ssl")
                    }
                assert [login for login, _ in verifiers] == ["ana_x"]
                assert shown["listen_addresses"] == ""
                assert Path(shown["hba_file"]).parent == standby.pgdata
                assert int(shown["max_connections"]) >= 120
                config = analyst_pooler.PoolerConfig(
                    server_host=str(standby.socket_dir),
                    server_port=standby.port,
                    listen_port=analyst_pooler.free_port(),
                )
                pooler = analyst_pooler.start(config, tmp_path / "pooler", verifiers)
                with _connect(pooler.url("ana_x", "ana-secret")) as c:
                    row = c.execute("SELECT current_user AS u, pg_is_in_recovery() AS r").fetchone()
                assert row == {"u": "ana_x", "r": True}, pooler.log()[-3000:]
                # the socket admits analysts only with their password (SCRAM), not as trust
                with pytest.raises(psycopg.OperationalError, match="password"):
                    _connect(
                        f"postgresql://ana_x@/geo?host={standby.socket_dir}&port={standby.port}"
                    ).close()
                # a standby made before (or edited since) gets its configuration back at start
                standby.stop()
                (standby.pgdata / "pg_hba.conf").write_text("local all all peer\n")
                with (standby.pgdata / "postgresql.conf").open("a") as f:
                    f.write("include '/etc/geo-no-such-dir/postgresql.conf'\n")
                standby = embedded_pg.start_standby(s_state / "standby", source)
                with _connect(standby_url) as s:  # as the CLI reads the verifiers
                    assert s.execute("SHOW listen_addresses").fetchone() == {"listen_addresses": ""}
                with _connect(pooler.url("ana_x", "ana-secret")) as c:
                    assert c.execute("SELECT current_user AS u").fetchone() == {"u": "ana_x"}
            finally:
                if pooler is not None:
                    pooler.stop()
                standby.stop()
