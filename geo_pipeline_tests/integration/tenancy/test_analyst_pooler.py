"""The analyst endpoint (issue #35): PgBouncer (runtime/analyst_pooler.py) in front of a hot
standby of tenant B's analyst replica (embedded_pg.start_standby), on real servers started here:
the primary and B's logical replica of test_analyst_replica.py, the standby, and PgBouncer.

What the login cannot undo there, whatever it SETs or ALTERs: the pooler's query timeout
(`SET statement_timeout = 0` included; the standby's backend stops too), its client connection
limit, the reset after every transaction, and the server's read-only state (`ALTER ROLE` of
itself, `BEGIN READ WRITE`, temp tables and large objects are refused by the standby). The
bounds are the pooler's configured limit (LIMIT_S), never a measured speed.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.runtime import analyst_pooler, embedded_pg
from geo_pipeline.store import analyst_guard, tenancy
from geo_pipeline_tests.fixtures.postgres import server_state_dir
from geo_pipeline_tests.integration.tenancy.helpers import with_user
from geo_pipeline_tests.integration.tenancy.test_analyst_replica import (  # noqa: F401 (fixture)
    HEAVY,
    Servers,
    _collect_b,
    _pin,
    servers,
)

LIMIT_S = 3  # the pooler's query_timeout here (the product's is analyst_pooler.QUERY_TIMEOUT_S)
WAIT_S = 120  # a bound for a server that never gets there, not a speed


@dataclass(frozen=True)
class Endpoint:
    servers: Servers
    standby_url: str  # superuser, the standby's geo database
    pooler: analyst_pooler.Pooler
    login: str
    password: str

    @property
    def url(self) -> str:
        return self.pooler.url(self.login, self.password)


def _connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(url, row_factory=dict_row, autocommit=True, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def endpoint(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:  # noqa: F811
    try:
        analyst_pooler.pgbouncer_binary()
    except analyst_pooler.PoolerUnavailable as exc:
        pytest.skip(str(exc))
    # B's login gets a password we know (the replica stores its SCRAM verifier only)
    with _connect(servers.replica_url) as r:
        grant = tenancy.grant_analyst(r, servers.b, servers.b_login, rotate=True)  # type: ignore[arg-type]
        verifier = r.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (servers.b_login,)
        ).fetchone()["rolpassword"]  # type: ignore[index]
    base = Path(tmp_path_factory.mktemp("analyst-endpoint"))
    with server_state_dir(base / "standby") as state:
        standby = embedded_pg.start_standby(state / "pgdata", servers.replica_url)
        pooler = None
        try:
            standby_url = (
                f"postgresql://postgres@/geo?host={standby.socket_dir}&port={standby.port}"
            )
            with _connect(standby_url) as s:
                deadline = time.monotonic() + WAIT_S
                while analyst_pooler.analyst_verifiers(s) != [(servers.b_login, verifier)]:  # type: ignore[arg-type]
                    assert time.monotonic() < deadline, "the standby did not replay the password"
                    s.execute("SELECT pg_sleep(0.05)")
                verifiers = analyst_pooler.analyst_verifiers(s)  # type: ignore[arg-type]
            config = analyst_pooler.PoolerConfig(
                server_host=str(standby.socket_dir),
                server_port=standby.port,
                listen_port=analyst_pooler.free_port(),
                query_timeout_s=LIMIT_S,
            )
            pooler = analyst_pooler.start(config, base / "pooler", verifiers)
            yield Endpoint(servers, standby_url, pooler, servers.b_login, grant.password)
        finally:
            if pooler is not None:
                pooler.stop()
            standby.stop()


def _analyst_backends(ep: Endpoint) -> list[dict[str, Any]]:
    with _connect(ep.standby_url) as s:
        return s.execute(
            "SELECT pid, state, query FROM pg_stat_activity WHERE usename = %s AND pid <> "
            "pg_backend_pid() ORDER BY pid",
            (ep.login,),
        ).fetchall()


def _wait_no_active(ep: Endpoint, marker: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(b["state"] == "active" and marker in b["query"] for b in _analyst_backends(ep)):
        assert time.monotonic() < deadline, _analyst_backends(ep)
        time.sleep(0.1)


def test_a_query_past_the_limit_is_cancelled_whatever_the_session_set(endpoint: Endpoint):
    """`SET statement_timeout = 0` in the same transaction: the pooler ends the query at its
    limit (the client gets PgBouncer's "query timeout"), and the standby's backend stops too
    (client_connection_check_interval), so nothing keeps running behind the pooler."""
    sleep = 3 * LIMIT_S  # ends by itself at 3x the limit where nothing enforces the limit
    outcome = ""
    with _connect(endpoint.url) as c:
        try:
            c.execute(f"SET statement_timeout = 0; SELECT pg_sleep({sleep}) AS slept")
            outcome = "finished"
        except psycopg.Error as exc:
            outcome = f"{type(exc).__name__}: {exc}"
    assert outcome == "ProtocolViolation: query timeout"
    _wait_no_active(endpoint, f"pg_sleep({sleep})")


def test_a_login_that_lifts_the_servers_check_too_is_cancelled_by_the_guard(endpoint: Endpoint):
    """The standby's client check is a session setting too; a login that lifts it keeps a
    backend running after the pooler closed its connection, until the guard (run against the
    standby, where it only cancels) ends it."""
    marker = "pg_sleep(600)"
    with _connect(endpoint.url) as c:
        with pytest.raises(psycopg.errors.ProtocolViolation, match="query timeout"):
            c.execute(
                "SET client_connection_check_interval = 0; SET statement_timeout = 0; "
                f"SELECT {marker}"
            )
    with _connect(endpoint.standby_url) as s:
        running = [b for b in _analyst_backends(endpoint) if marker in b["query"]]
        assert [b["state"] for b in running] == ["active"]
        report = analyst_guard.enforce(s, statement_limit_seconds=LIMIT_S)  # type: ignore[arg-type]
    assert report.cancelled == [(endpoint.login, running[0]["pid"])]
    assert report.settings_restored == []  # nothing can change on a standby
    _wait_no_active(endpoint, marker)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("statement_timeout", "0"), ("default_transaction_read_only", "off"), ("work_mem", "1GB")],
)
def test_a_session_set_does_not_outlive_its_transaction(
    endpoint: Endpoint, setting: str, value: str
):
    with _connect(endpoint.url) as c:
        before = c.execute(f"SHOW {setting}").fetchone()[setting]  # type: ignore[index]
        c.execute(f"SET {setting} = '{value}'")
        after = c.execute(f"SHOW {setting}").fetchone()[setting]  # type: ignore[index]
    assert before != value
    assert after == before


def test_the_login_cannot_alter_its_own_role(endpoint: Endpoint):
    with _connect(endpoint.url) as c:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction, match="ALTER ROLE"):
            c.execute(f'ALTER ROLE "{endpoint.login}" SET statement_timeout = 0')
        c.autocommit = False
        c.execute("SET LOCAL default_transaction_read_only = off")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="during recovery"):
            c.execute("SET TRANSACTION READ WRITE")
    with _connect(endpoint.servers.replica_url) as r:  # and nothing reached the role
        settings = r.execute(
            "SELECT coalesce(array_agg(x ORDER BY x), '{}') AS s FROM pg_db_role_setting d "
            "CROSS JOIN unnest(d.setconfig) x WHERE d.setrole = %s::regrole",
            (endpoint.login,),
        ).fetchone()["s"]  # type: ignore[index]
    assert sorted(settings) == analyst_guard.operator_settings()


WRITES = {
    "temp table": "CREATE TEMP TABLE scratch AS SELECT 1 AS x",
    "lo_create": "SELECT lo_create(0)",
    "lo_from_bytea": "SELECT lo_from_bytea(0, '\\x00'::bytea)",
}


@pytest.mark.parametrize("what", sorted(WRITES))
def test_the_standby_refuses_every_write(endpoint: Endpoint, what: str):
    """Refused as read-only by the standby, or before that by privileges (migration 0031)."""
    refused = (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InsufficientPrivilege)
    with _connect(endpoint.url) as c, pytest.raises(refused):
        c.execute(WRITES[what])  # type: ignore[arg-type]


def test_the_connection_over_the_limit_is_refused_by_the_pooler(endpoint: Endpoint):
    limit = endpoint.pooler.config.max_client_conn
    held = [_connect(endpoint.url) for _ in range(limit)]
    try:
        with pytest.raises(psycopg.OperationalError, match=r"no more connections allowed"):
            _connect(endpoint.url).close()
        # however many clients, at most the pooler's server connections reach the standby:
        # every client runs a statement at once; the others wait for a server connection
        threads = [threading.Thread(target=c.execute, args=("SELECT pg_sleep(0.5)",)) for c in held]
        seen = 0
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            seen = max(seen, len(_analyst_backends(endpoint)))
            time.sleep(0.02)
        assert 0 < seen <= endpoint.pooler.config.max_server_connections
    finally:
        for c in held:
            c.close()
        _until_the_pooler_accepts(endpoint)


def _until_the_pooler_accepts(endpoint: Endpoint) -> None:
    """The pooler counts a closed client until its event loop has seen the close: the module's
    next test found it still full (`no more connections allowed` in a CI run). Wait on that
    progress, bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            _connect(endpoint.url).close()
            return
        except psycopg.OperationalError as e:
            if "no more connections allowed" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _startup(port: int, params: dict[str, str]) -> bytes:
    """Send a protocol-3 StartupMessage with ``params``; the first message type answered."""
    body = struct.pack("!I", 196608)
    for k, v in params.items():
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        s.sendall(struct.pack("!I", len(body) + 4) + body)
        head = s.recv(1)
        rest = s.recv(4096)
    return head + rest


def test_bi_tools_start_up_parameters_are_accepted_and_options_are_not(endpoint: Endpoint):
    """JDBC and Grafana send extra_float_digits at start-up: ignored, so the login proceeds to
    authentication ('R'). `options` (e.g. -c statement_timeout=0) is refused ('E')."""
    port, user = endpoint.pooler.port, endpoint.login
    bi = _startup(port, {"user": user, "database": "geo", "extra_float_digits": "3"})
    assert bi[:1] == b"R", bi
    opts = _startup(port, {"user": user, "database": "geo", "options": "-c statement_timeout=0"})
    assert opts[:1] == b"E" and b"unsupported startup parameter: options" in opts, opts


def test_psycopg_without_automatic_prepared_statements_works_through_the_pooler(
    endpoint: Endpoint,
):
    """Transaction pooling in PgBouncer 1.18 does not carry named prepared statements across
    transactions; psycopg prepares after 5 executions unless prepare_threshold=None
    (docs/analysts.md)."""
    with _connect(endpoint.url, prepare_threshold=None) as c:
        got = [c.execute("SELECT %s::int AS i", (i,)).fetchone()["i"] for i in range(10)]  # type: ignore[index]
    assert got == list(range(10))


def test_session_pooling_keeps_sets_and_prepared_statements_and_still_holds_the_limits(
    endpoint: Endpoint, tmp_path: Path
):
    """The measurement behind pool_mode = transaction (docs/analysts.md), pinned: in session
    pooling a SET lasts for the connection and psycopg's automatic prepared statements work
    (both end with the transaction in transaction pooling, above); the pooler's timeout and
    the standby's refusals hold in both."""
    config = analyst_pooler.PoolerConfig(
        server_host=endpoint.pooler.config.server_host,
        server_port=endpoint.pooler.config.server_port,
        listen_port=analyst_pooler.free_port(),
        query_timeout_s=LIMIT_S,
        pool_mode="session",
    )
    with _connect(endpoint.standby_url) as s:
        verifiers = analyst_pooler.analyst_verifiers(s)  # type: ignore[arg-type]
    pooler = analyst_pooler.start(config, tmp_path / "session-pooler", verifiers)
    try:
        with _connect(pooler.url(endpoint.login, endpoint.password)) as c:
            c.execute("SET statement_timeout = 0")
            assert c.execute("SHOW statement_timeout").fetchone()["statement_timeout"] == "0"  # type: ignore[index]
            got = [c.execute("SELECT %s::int AS i", (i,)).fetchone()["i"] for i in range(8)]  # type: ignore[index]
            assert got == list(range(8))
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction, match="ALTER ROLE"):
                c.execute(f'ALTER ROLE "{endpoint.login}" SET statement_timeout = 0')
            with pytest.raises(psycopg.errors.ProtocolViolation, match="query timeout"):
                c.execute(f"SELECT pg_sleep({3 * LIMIT_S}) AS session_mode")
    finally:
        pooler.stop()
    _wait_no_active(endpoint, "session_mode")


def test_the_endpoint_login_is_not_a_login_of_the_primary_and_the_standby_has_no_tcp(
    endpoint: Endpoint,
):
    primary_as_b = with_user(endpoint.servers.primary_url, endpoint.login, endpoint.password)
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        _connect(primary_as_b).close()
    with _connect(endpoint.standby_url) as s:
        assert s.execute("SHOW listen_addresses").fetchone()["listen_addresses"] == ""  # type: ignore[index]
        assert s.execute("SELECT pg_is_in_recovery() AS r").fetchone()["r"] is True  # type: ignore[index]


def test_the_cli_starts_the_endpoint_and_stops_it_on_sigterm(endpoint: Endpoint, tmp_path: Path):
    """`geo-pipeline tenants analyst-replica endpoint`: standby + pooler + guard, as a service
    runs it; a second standby of the same replica, its own state directory."""
    port = analyst_pooler.free_port()
    env = {
        **os.environ,
        "GEO_DATABASE_URL": endpoint.servers.primary_url,
        "GEO_ANALYST_REPLICA_URL": endpoint.servers.replica_url,
    }
    with server_state_dir(tmp_path / "svc") as state:
        proc = subprocess.Popen(
            [sys.executable, "-m", "geo_pipeline.cli.main", "tenants", "analyst-replica",
             "endpoint", "--state", str(state), "--listen", f"127.0.0.1:{port}", "--every", "1"],
            env=env, stdout=subprocess.PIPE, stderr=(tmp_path / "stderr").open("w"), text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()  # the line it prints once both listen
            assert first.startswith(
                f"analyst endpoint on 127.0.0.1:{port} (database geo, 1 logins)"
            )
            url = f"postgresql://{endpoint.login}@127.0.0.1:{port}/geo"
            with _connect(url, password=endpoint.password) as c:
                assert c.execute("SELECT pg_is_in_recovery() AS r").fetchone()["r"] is True  # type: ignore[index]
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, (out, (tmp_path / "stderr").read_text())
        assert not (state / "standby" / "postmaster.pid").exists(), out
        # The test replica's pg_hba (initdb's: host all all 127.0.0.1/32 trust) admits B's login
        # to the replica itself: the command says so, naming the line.
        err = (tmp_path / "stderr").read_text()
        assert "pg_hba.conf lets analyst logins connect to it directly" in err, err
        assert "127.0.0.1/255.255.255.255 trust" in err, err
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_the_replicas_pg_hba_is_checked_for_lines_that_admit_analysts(endpoint: Endpoint):
    """An analyst must reach the replica through the endpoint only: its login exists on the
    replica's own server, where no pooler holds its time and ALTER ROLE is not refused. The
    endpoint command reads the replica's pg_hba.conf (the file as it is: no reload is made here,
    the server's behaviour does not change) and warns of each line that admits analysts."""
    with _connect(endpoint.servers.replica_url) as r:
        hba = Path(r.execute("SHOW hba_file").fetchone()["hba_file"])  # type: ignore[index]
        admitting = analyst_pooler.replica_admits_analysts(r)  # type: ignore[arg-type]
        assert [x["auth_method"] for x in admitting] and all(
            x["type"].startswith("host") for x in admitting
        ), admitting
        assert analyst_pooler.hba_warning(admitting) is not None
        before = hba.read_text()
        try:
            hba.write_text(
                "host all +geo_analyst all reject\nhostssl all +geo_analyst all reject\n" + before
            )
            assert analyst_pooler.replica_admits_analysts(r) == []  # type: ignore[arg-type]
            hba.write_text(f"host all {endpoint.login} 0.0.0.0/0 scram-sha-256\n" + before)
            [first, *_] = analyst_pooler.replica_admits_analysts(r)  # type: ignore[arg-type]
            assert (first["line_number"], first["user_name"]) == (1, endpoint.login)
        finally:
            hba.write_text(before)


class PooledAnalyst(threading.Thread):
    """B's analyst through the endpoint: heavy statements back to back, each ended by the
    pooler's query_timeout (which closes the connection: the analyst connects again)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.first_timeout = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.spans: list[tuple[float, float]] = []  # (start, end) of timed-out statements

    def run(self) -> None:
        while not self.stop.is_set():
            with _connect(self.url) as conn:
                began = time.monotonic()
                try:
                    conn.execute("SET statement_timeout = 0; " + HEAVY)
                    self.outcomes["finished"] += 1
                except psycopg.errors.ProtocolViolation as exc:
                    self.outcomes[str(exc)] += 1
                    self.spans.append((began, time.monotonic()))
                    self.first_timeout.set()
                except psycopg.Error as exc:  # anything else fails the test below
                    self.outcomes[f"{type(exc).__name__}: {exc}"] += 1
                    return


def test_collection_keeps_its_rate_while_the_pooler_times_out_an_analyst(
    endpoint: Endpoint, redis_url: str
):
    """test_analyst_replica's rate test, through the endpoint: B's analyst lifts its
    statement_timeout and runs heavy statements on the standby through the pooler, which ends
    each at its limit, while B's collection runs on the primary; collection keeps at least half
    the rate it had alone in this test (each server on a CPU of its own, as on its own host)."""
    srv = endpoint.servers
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to give the analyst's servers one of their own")
    mine = os.sched_getaffinity(0)
    primary_cpus, analyst_cpus = set(cpus[:-1]), {cpus[-1]}
    _pin(srv.primary_url, primary_cpus)
    _pin(srv.replica_url, analyst_cpus)
    _pin(endpoint.standby_url, analyst_cpus)
    os.sched_setaffinity(endpoint.pooler.process.pid, analyst_cpus)
    os.sched_setaffinity(0, primary_cpus)
    with psycopg.connect(srv.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        cap = tenancy.platform_limits(conn, ["deepseek"]).get((srv.b, "deepseek"))  # type: ignore[arg-type]
        tenancy.clear_platform_limit(conn, srv.b, "deepseek")  # type: ignore[arg-type]
    try:
        with _connect(srv.primary_url) as p:
            walsender = p.execute(
                "SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                (srv.publication,),
            ).fetchone()["pid"]  # type: ignore[index]
        with _connect(srv.replica_url) as r:
            apply = r.execute(
                "SELECT pid FROM pg_stat_subscription WHERE relid IS NULL"
            ).fetchone()["pid"]  # type: ignore[index]
        suffix = uuid.uuid4().hex[:6]
        alone = _collect_b(srv, redis_url, f"pool-alone-{suffix}", walsender, apply)
        analyst = PooledAnalyst(endpoint.url)
        analyst.start()
        try:
            assert analyst.first_timeout.wait(timeout=WAIT_S * 5), analyst.outcomes
            started = time.monotonic()
            loaded = _collect_b(srv, redis_url, f"pool-loaded-{suffix}", walsender, apply)
            ended = time.monotonic()
        finally:
            analyst.stop.set()
            analyst.join(timeout=WAIT_S * 5)
        assert not analyst.is_alive()
    finally:
        os.sched_setaffinity(0, mine)
        if cap is not None:
            with psycopg.connect(srv.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
                tenancy.set_platform_limit(
                    conn,  # type: ignore[arg-type]
                    srv.b,
                    "deepseek",
                    cap.submits_per_second,
                    cap.burst,
                )
    print(
        f"\ncollection alone: {alone.rate:.1f} samples/s; with the analyst through the pooler: "
        f"{loaded.rate:.1f} samples/s (ratio {loaded.rate / alone.rate:.2f}); "
        f"analyst: {dict(analyst.outcomes)}"
    )
    assert set(analyst.outcomes) == {"query timeout"}, analyst.outcomes
    assert any(s < ended and e > started for s, e in analyst.spans)
    for got in (alone, loaded):
        assert got.completed == got.attempts == got.samples, got
    assert loaded.rate >= alone.rate / 2, (alone, loaded)
    _wait_no_active(endpoint, "generate_series")  # nothing ran on behind the pooler
