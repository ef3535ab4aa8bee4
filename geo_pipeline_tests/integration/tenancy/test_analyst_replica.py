"""A tenant's analyst replica (issue #35), on two real servers started here: a primary with
``wal_level=logical`` (the embedded PostgreSQL as the project starts it) migrated with the
project's migrations, and tenant B's own replica server, made with
``geo-pipeline tenants analyst-replica create``.

What the shared primary cannot close (test_analyst_catalogue.py), B's replica does: with tenant
A present on the primary against A absent, B's analyst on B's replica gets identical planner
estimates for A's id, identical reltuples and pg_stat_user_tables counts, an identical role list
and no row of A. B's new rows arrive (waited for on the primary's slot, not on a clock), and
the analyst can neither write, make temp tables or large objects, nor lift its limits. The
replica's guard copies new runs' question texts; an analyst cancelled again and again by the
replica's statement_timeout leaves B's collection on the primary at its measured rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
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
import redis as redis_lib
from psycopg.rows import dict_row

from geo_pipeline.cli.main import main
from geo_pipeline.runtime import embedded_pg
from geo_pipeline.store import analyst_guard, analyst_replica, migrate, tenancy
from geo_pipeline_tests.fixtures.postgres import server_state_dir, with_database
from geo_pipeline_tests.integration.analysis.helpers import make_run
from geo_pipeline_tests.integration.execution.helpers import FakeConnector
from geo_pipeline_tests.integration.execution.helpers import make_run as exec_make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until
from geo_pipeline_tests.integration.tenancy.helpers import (
    analyst_role,
    analyst_session,
    login_role,
    plant_tenant,
    with_user,
)
from geo_pipeline_tests.processes import cpu_seconds

CHANNELS = [{"platform": "kimi", "device": "web"}, {"platform": "doubao", "device": "web"}]


@dataclass(frozen=True)
class Servers:
    primary_url: str  # superuser, database geo
    replica_url: str  # superuser, B's replica database
    publisher: str  # how B's replica server reaches the primary
    a: str
    b: str
    b_login: str
    b_url: str  # B's analyst on B's replica
    b_primary_url: str  # a session as B's (NOLOGIN) analyst role on the primary
    publication: str


def _connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(url, row_factory=dict_row, autocommit=True, **kw)  # type: ignore[arg-type]


def _start(state: Path) -> embedded_pg.EmbeddedPostgres:
    return embedded_pg.start(state / "pgdata")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Servers]:
    suffix = uuid.uuid4().hex[:8]
    ns = f"geo-test-replica-{suffix}"
    a, b = f"acme-{suffix}", f"globex-{suffix}"
    base = Path(tmp_path_factory.mktemp("analyst-replica"))
    with (
        server_state_dir(base / "primary") as p_state,
        server_state_dir(base / "replica") as r_state,
    ):
        primary = _start(p_state)
        replica = _start(r_state)
        sessions = contextlib.ExitStack()
        try:
            for server in (primary, replica):
                with _connect(server.url) as c:
                    c.execute("CREATE DATABASE geo")
            primary_url = with_database(primary.url, "geo")
            replica_url = with_database(replica.url, "geo")
            with psycopg.connect(primary_url) as conn:
                migrate.upgrade(conn)
                # the project's own primary runs with logical decoding (embedded_pg.WAL_LEVEL)
                assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
            # B's real data, every stage (worker, analysis, review, publication, billing), so
            # each analytics view has rows to compare; then B's analyst on the primary too.
            with login_role(primary_url, "geo_svc", tenancy.SERVICE_ROLE) as svc:
                plant_tenant(
                    with_user(primary_url, svc), primary_url, redis_url, ns, b, str(base / "ev")
                )
            # (NOLOGIN there since issue 35: reached by a login that is a member of it)
            b_on_primary = analyst_role(primary_url, b)
            b_primary_url = sessions.enter_context(analyst_session(primary_url, b_on_primary))
            publisher = f"host={primary.socket_dir} port={primary.port} user=postgres dbname=geo"
            env = {
                "GEO_DATABASE_URL": primary_url,
                "GEO_ANALYST_REPLICA_URL": replica_url,
                "GEO_ANALYST_PUBLISHER_URL": publisher,
            }
            out = _cli(env, "tenants", "analyst-replica", "create", b)
            printed = out.strip().splitlines()[-1]
            login = out.split("created analyst login ", 1)[1].split(";", 1)[0]
            assert printed.startswith(f"postgresql://{login}:"), out
            with _connect(primary_url) as p:
                publication = analyst_replica.publication_of(p, b)
            assert publication is not None
            yield Servers(
                primary_url=primary_url,
                replica_url=replica_url,
                publisher=publisher,
                a=a,
                b=b,
                b_login=login,
                b_url=with_user(replica_url, login),
                b_primary_url=b_primary_url,
                publication=publication,
            )
        finally:
            sessions.close()
            replica.stop()
            primary.stop()
            client = redis_lib.Redis.from_url(redis_url)
            try:
                keys = list(client.scan_iter(match=f"{ns}:*", count=1000))
                if keys:
                    client.delete(*keys)
            finally:
                client.close()


def _cli(env: dict[str, str], *args: str) -> str:
    """The CLI in this process, with ``env`` set for the call only (a session fixture such as
    pg_admin_url must not see these servers' URLs)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as mp,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        for key, value in env.items():
            mp.setenv(key, value)
        code = main(list(args))
    assert code == 0, f"exit {code}\nstdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
    return out.getvalue()


def _one(c: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = c.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def _analyze_and_settle(replica_url: str) -> None:
    """ANALYZE (the operator, as autovacuum would) and wait until the statistics system shows
    every replicated row (its counters are flushed asynchronously)."""
    with _connect(replica_url) as c:
        c.execute("ANALYZE")
        for _ in range(3000):
            row = c.execute(
                "SELECT n_live_tup AS live, (SELECT count(*) FROM geo.samples) AS n "
                "FROM pg_stat_user_tables WHERE relid = 'geo.samples'::regclass"
            ).fetchone()
            if row is not None and row["live"] == row["n"]:
                return
            c.execute("SELECT pg_sleep(0.05)")
        raise AssertionError(f"pg_stat_user_tables never showed the rows: {row}")


def _probe(url: str, tenant_a: str) -> dict[str, Any]:
    """Everything an analyst can ask the catalogue about A (as test_analyst_catalogue.py)."""
    with _connect(url) as c:
        plan = c.execute(
            "EXPLAIN (FORMAT JSON) SELECT * FROM geo.samples WHERE tenant_id = %s", (tenant_a,)
        ).fetchone()
        assert plan is not None
        return {
            "roles": sorted(r["rolname"] for r in c.execute("SELECT rolname FROM pg_roles")),
            "roles_by_oid": sorted(
                r["name"]
                for r in c.execute(
                    "SELECT o::regrole::text AS name FROM generate_series(1, 100000) o "
                    "WHERE o::regrole::text !~ '^[0-9]+$'"
                )
            ),
            "reltuples": {
                r["rel"]: r["reltuples"]
                for r in c.execute(
                    "SELECT c.oid::regclass::text AS rel, c.reltuples FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname IN ('geo', 'analytics')"
                )
            },
            "n_live_tup": {
                r["rel"]: (r["n_live_tup"], r["n_tup_ins"])
                for r in c.execute(
                    "SELECT relid::regclass::text AS rel, n_live_tup, n_tup_ins "
                    "FROM pg_stat_user_tables"
                )
            },
            "relation_size": _one(c, "SELECT pg_relation_size('geo.samples')"),
            "estimate": plan["QUERY PLAN"][0]["Plan"]["Plan Rows"],
            "rows_of_a": _one(
                c, "SELECT count(*) FROM geo.samples WHERE tenant_id = %s", (tenant_a,)
            ),
            "tenants": [r["tenant_id"] for r in c.execute("SELECT tenant_id FROM geo.tenants")],
            "databases": sorted(r["datname"] for r in c.execute("SELECT datname FROM pg_database")),
        }


def test_another_tenant_present_or_absent_gives_b_identical_answers(servers: Servers):
    _analyze_and_settle(servers.replica_url)
    without = _probe(servers.b_url, servers.a)

    # Tenant A arrives on the primary: a tenant, an analyst login, a run of 12 samples.
    with psycopg.connect(servers.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c: Any = conn
        tenancy.create_tenant(c, servers.a)
        c.commit()
        a_login = analyst_role(servers.primary_url, servers.a)  # NOLOGIN there (issue 35)
        make_run(c, f"a-{uuid.uuid4().hex[:6]}", questions=["哪家咖啡好？", "最好喝的拿铁？"],
                 channels=CHANNELS, repeats=3, tenant=servers.a)  # fmt: skip
        c.commit()
        c.autocommit = True
        c.execute("ANALYZE geo.samples")
        primary_a = _one(c, "SELECT count(*) FROM geo.samples WHERE tenant_id = %s", (servers.a,))
        analyst_replica.wait_caught_up(c, servers.publication)
    assert primary_a == 12  # A really is there, on the primary
    _analyze_and_settle(servers.replica_url)
    with_a = _probe(servers.b_url, servers.a)

    assert with_a == without
    assert with_a["rows_of_a"] == 0 and with_a["tenants"] == [servers.b]
    assert a_login not in with_a["roles"] and a_login not in with_a["roles_by_oid"]
    # the logins a replica holds: B's only (plus the operator and the schema's group roles)
    logins = [r for r in with_a["roles"] if r.startswith("ana_")]
    assert logins == [servers.b_login]
    with _connect(servers.primary_url) as p:
        b_samples = _one(p, "SELECT count(*) FROM geo.samples WHERE tenant_id = %s", (servers.b,))
    assert with_a["n_live_tup"]["geo.samples"][0] == b_samples  # B's samples, nobody else's


def test_the_nologin_migration_leaves_the_replicas_login_alone(servers: Servers):
    """Migration 0083 makes the analyst logins of the service's server NOLOGIN; a replica runs
    the same migrations (`create` again after migrating the primary), and there the login is the
    analyst's way in (through its standby): a database that subscribes is left alone."""
    [nologin] = [m for m in migrate.migrations() if m.version == 83]
    with _connect(servers.replica_url) as r:
        r.execute(nologin.sql)
        row = r.execute(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (servers.b_login,)
        ).fetchone()
    assert row is not None and row["rolcanlogin"] is True
    with _connect(servers.b_url) as c:
        assert _one(c, "SELECT geo.analyst_tenant()") == servers.b


def test_grant_analyst_on_the_replica_is_for_its_own_tenant_only(servers: Servers):
    """`grant-analyst --replica` makes logins on the tenant's replica; another tenant's login
    cannot be made there (its rows and tenant are not on that server)."""
    with psycopg.connect(servers.replica_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        with pytest.raises(tenancy.TenancyError, match="does not exist"):
            tenancy.grant_analyst(conn, servers.a)  # type: ignore[arg-type]


def test_analysts_lists_the_logins_of_the_replica_with_replica(servers: Servers):
    """`tenants analysts TENANT --replica` (docs/operations.md) lists the logins where they live;
    without it the command reads the service's server, where B has only a NOLOGIN role."""
    import json

    env = {"GEO_DATABASE_URL": servers.primary_url, "GEO_ANALYST_REPLICA_URL": servers.replica_url}
    on_replica = json.loads(_cli(env, "tenants", "analysts", servers.b, "--replica", "--json"))
    assert [r["login"] for r in on_replica] == [servers.b_login]
    on_primary = json.loads(_cli(env, "tenants", "analysts", servers.b, "--json"))
    assert servers.b_login not in [r["login"] for r in on_primary]


def test_rows_written_for_b_on_the_primary_arrive_and_others_do_not(servers: Servers):
    run_id = f"b2-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(servers.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c: Any = conn
        make_run(c, run_id, questions=["最好喝的拿铁？"], channels=CHANNELS, repeats=3,
                 tenant=servers.b)  # fmt: skip
        c.commit()
        c.autocommit = True
        on_primary = _one(c, "SELECT count(*) FROM geo.samples WHERE run_id = %s", (run_id,))
        # an UPDATE is published through the row filter (replica identity: migration 0058)
        c.execute("UPDATE geo.runs SET confirmed_at = now() WHERE run_id = %s", (run_id,))
        confirmed = _one(c, "SELECT confirmed_at FROM geo.runs WHERE run_id = %s", (run_id,))
        analyst_replica.wait_caught_up(c, servers.publication)
    with _connect(servers.b_url) as c:
        assert _one(c, "SELECT count(*) FROM geo.samples WHERE run_id = %s", (run_id,)) == 6
        assert (
            _one(c, "SELECT confirmed_at FROM geo.runs WHERE run_id = %s", (run_id,)) == confirmed
        )
        tenants = {r["tenant_id"] for r in c.execute("SELECT DISTINCT tenant_id FROM geo.samples")}
    assert on_primary == 6 and tenants == {servers.b}
    with _connect(servers.replica_url) as admin:  # the operator sees no more than B either
        assert _one(admin, "SELECT count(DISTINCT tenant_id) FROM geo.samples") == 1


def test_a_new_runs_question_texts_reach_the_replica_with_one_guard_pass(servers: Servers):
    """Question texts are shared by content (no row filter publishes them): the replica's guard
    pass copies the texts its tenant's new samples ask, so analytics.sample_facts has the run."""
    run_id = f"b3-{uuid.uuid4().hex[:6]}"
    asked = [f"{run_id} 哪家的燕麦拿铁最好？", f"{run_id} 冷萃咖啡推荐？"]
    with psycopg.connect(servers.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c: Any = conn
        make_run(c, run_id, questions=asked, channels=CHANNELS, repeats=1, tenant=servers.b)
        c.commit()
        c.autocommit = True
        analyst_replica.wait_caught_up(c, servers.publication)
    facts = "SELECT count(*) FROM analytics.sample_facts WHERE run_id = %s"
    texts_of = "SELECT question_text FROM analytics.sample_facts WHERE run_id = %s"
    with _connect(servers.b_primary_url) as c:
        on_primary = _one(c, facts, (run_id,))
        texts_on_primary = {r["question_text"] for r in c.execute(texts_of, (run_id,))}
    with _connect(servers.b_url) as c:
        assert _one(c, "SELECT count(*) FROM geo.samples WHERE run_id = %s", (run_id,)) == 4
    env = {"GEO_DATABASE_URL": servers.primary_url, "GEO_ANALYST_REPLICA_URL": servers.replica_url}
    out = _cli(env, "tenants", "guard-analysts", "--replica")
    with _connect(servers.b_url) as c:
        on_replica = _one(c, facts, (run_id,))
        texts = {r["question_text"] for r in c.execute(texts_of, (run_id,))}
    assert on_primary == 4
    assert on_replica == on_primary, out
    assert texts == texts_on_primary and len(texts) == len(asked)
    assert "question texts of new runs from the primary" in out  # with earlier tests' runs


def test_the_replica_guard_goes_on_when_the_primary_is_unreachable(
    servers: Servers, tmp_path: Path
):
    """Copying texts needs the primary; guarding the replica does not wait for it."""
    nowhere = f"postgresql://postgres@/geo?host={tmp_path}&port=1"  # no server listens there
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as mp,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        mp.setenv("GEO_DATABASE_URL", nowhere)
        mp.setenv("GEO_ANALYST_REPLICA_URL", servers.replica_url)
        code = main(["tenants", "guard-analysts", "--replica"])
    assert code == 0, f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
    assert "question texts not copied this pass: cannot connect" in err.getvalue()


def _view_rows(url: str) -> dict[str, int]:
    with _connect(url) as c:
        views = [
            r["v"]
            for r in c.execute(
                "SELECT c.oid::regclass::text AS v FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'analytics' AND c.relkind IN ('v', 'r') ORDER BY 1"
            )
        ]
        return {v: _one(c, f"SELECT count(*) FROM {v}") for v in views}  # type: ignore[arg-type]


def test_every_analytics_relation_answers_the_same_on_the_replica(servers: Servers):
    """The analyst's views are defined on the replica by its own migrations and read the
    replicated tables: B's analyst gets as many rows from each as on the primary."""
    with _connect(servers.primary_url) as p, _connect(servers.replica_url) as r:
        analyst_replica.wait_caught_up(p, servers.publication)
        # question texts are copied, not streamed: those of runs made after `create`
        analyst_replica.sync_question_texts(p, r)
    on_primary = _view_rows(servers.b_primary_url)
    on_replica = _view_rows(servers.b_url)
    assert on_replica == on_primary
    empty = sorted(v for v, n in on_primary.items() if n == 0)
    assert len(empty) <= len(on_primary) // 4, f"too few views hold rows to compare: {empty}"


WRITES = {
    "temp table": "CREATE TEMP TABLE scratch AS SELECT g FROM generate_series(1, 1000) g",
    "lo_from_bytea": "SELECT lo_from_bytea(0, '\\x00'::bytea)",
    "lo_create": "SELECT lo_create(0)",
    "table in public": "CREATE TABLE public.scratch (x int)",
    "insert": "INSERT INTO geo.tenants (tenant_id) VALUES ('x-replica')",
    "delete": "DELETE FROM geo.samples",
}


@pytest.mark.parametrize("what", sorted(WRITES))
def test_the_analyst_can_write_nothing_on_the_replica_even_read_write(servers: Servers, what: str):
    with _connect(servers.b_url) as c:
        c.execute("SET default_transaction_read_only = off")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("BEGIN READ WRITE")
            c.execute(WRITES[what])  # type: ignore[arg-type]


def test_the_replica_sets_the_limits_and_the_login_cannot_lift_them(servers: Servers):
    with _connect(servers.b_url) as c:
        shown = {
            r["name"]: r["setting"]
            for r in c.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('temp_file_limit', "
                "'statement_timeout', 'default_transaction_read_only')"
            )
        }
        assert shown == {
            "temp_file_limit": str(1024 * 1024),  # kB
            "statement_timeout": str(tenancy.ANALYST_STATEMENT_SECONDS * 1000),
            "default_transaction_read_only": "on",
        }
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SET temp_file_limit = -1")
        c.execute("SET default_transaction_read_only = off")  # allowed; privileges still hold
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("ALTER DATABASE geo RESET ALL")
        limit = _one(c, "SELECT datconnlimit FROM pg_database WHERE datname = 'geo'")
        assert limit == analyst_replica.REPLICA_CONNECTION_LIMIT
        # a login may ALTER ROLE itself (PostgreSQL allows it); the guard on the replica undoes it
        c.execute(f'ALTER ROLE "{servers.b_login}" SET statement_timeout = 0')
    with _connect(servers.replica_url) as admin:
        assert analyst_guard.enforce(admin).settings_restored == [servers.b_login]
    with _connect(servers.b_url) as c:
        ms = _one(c, "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'")
        assert int(ms) == tenancy.ANALYST_STATEMENT_SECONDS * 1000


def test_a_query_past_the_limit_on_the_replica_is_cancelled(servers: Servers):
    outcome: dict[str, Any] = {}

    def analyst() -> None:
        with _connect(servers.b_url) as conn:
            conn.execute("SET statement_timeout = 0")
            try:
                conn.execute("SELECT pg_sleep(600)")
                outcome["result"] = "finished"
            except psycopg.Error as exc:
                outcome["result"] = type(exc).__name__

    t = threading.Thread(target=analyst, daemon=True)
    t.start()
    with _connect(servers.replica_url) as admin:
        for _ in range(10_000):
            active = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE usename = %s AND state = 'active' "
                "AND query LIKE '%%pg_sleep(600)%%'",
                (servers.b_login,),
            ).fetchone()
            if active is not None:
                break
            admin.execute("SELECT pg_sleep(0.01)")
        assert active is not None
        report = analyst_guard.enforce(admin, statement_limit_seconds=0)
    t.join(timeout=120)
    assert report.cancelled == [(servers.b_login, active["pid"])]
    assert outcome == {"result": "QueryCanceled"}


def test_every_analyst_readable_tenant_table_is_replicated(servers: Servers):
    with _connect(servers.primary_url) as c:
        assert analyst_replica.tenant_tables_not_replicated(c) == ["geo.analyst_logins"]
        # every table an analyst reads through a row-security policy, tenant_id or not
        replicated = set(analyst_replica.replicated_tables(c))
        policed = {
            r["rel"]
            for r in c.execute(
                "SELECT c.oid::regclass::text AS rel FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'r' "
                "AND c.relrowsecurity AND has_table_privilege('geo_analyst', c.oid, 'SELECT')"
            )
        }
    # each replica binds its own login; question texts are shared by content (copied, not
    # published); the price lists and the transition rules are shared reference data (the
    # replica's own migrations seed them)
    assert sorted(policed - replicated) == [
        "geo.allowed_transitions",
        "geo.analyst_logins",
        "geo.price_versions",
        "geo.question_revisions",
    ]


@pytest.mark.parametrize("table", ["geo.quote_lines", "geo.run_fee_rules", "geo.upstream_requests"])
def test_rows_reached_through_a_quote_run_or_sample_arrive_on_the_replica(
    servers: Servers, table: str
):
    """Tables whose tenant is their quote's, run's or sample's (migration 0065)."""
    with _connect(servers.primary_url) as p:
        analyst_replica.wait_caught_up(p, servers.publication)
    with _connect(servers.b_primary_url) as c:
        on_primary = _one(c, f"SELECT count(*) FROM {table}")  # type: ignore[arg-type]
    with _connect(servers.b_url) as c:
        on_replica = _one(c, f"SELECT count(*) FROM {table}")  # type: ignore[arg-type]
    assert on_primary > 0
    assert on_replica == on_primary


HEAVY = (
    "SELECT count(*) FROM analytics.sample_facts f CROSS JOIN generate_series(1, 50000000) g "
    "WHERE g % 1000 = length(f.sample_id)"
)


class ReplicaAnalyst(threading.Thread):
    """B's analyst on B's replica: heavy statements back to back, each cancelled by the
    replica's own statement_timeout (the analyst sets none)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.first_cancel = threading.Event()
        self.timeout_seen = ""
        self.outcomes: Counter[str] = Counter()
        self.cancelled_spans: list[tuple[float, float]] = []  # (start, end), monotonic

    def run(self) -> None:
        with _connect(self.url) as conn:
            self.timeout_seen = str(_one(conn, "SHOW statement_timeout"))
            while not self.stop.is_set():
                began = time.monotonic()
                try:
                    conn.execute(HEAVY)
                    self.outcomes["finished"] += 1
                except psycopg.errors.QueryCanceled:
                    self.outcomes["QueryCanceled"] += 1
                    self.cancelled_spans.append((began, time.monotonic()))
                    self.first_cancel.set()
                except psycopg.Error as exc:  # anything else fails the test below
                    self.outcomes[type(exc).__name__] += 1
                    return


def _server_pids(url: str) -> tuple[int, list[int]]:
    """The server's postmaster and its live children (from /proc: the checkpointer's parent)."""
    with _connect(url) as c:
        child = _one(c, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
    postmaster = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
    return postmaster, children


def _pin(url: str, cpus: set[int]) -> None:
    """Run the server (postmaster, so every backend it forks later, and its live children) on
    ``cpus`` only."""
    postmaster, children = _server_pids(url)
    for pid in [postmaster, *children]:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(pid, cpus)


@dataclass(frozen=True)
class Collected:
    samples: int
    completed: int
    attempts: int
    seconds: float  # from the worker's start to the last sample settled
    walsender_cpu_s: float  # the primary's WAL sender for B's replica, until the replica confirmed
    apply_cpu_s: float  # the replica's apply worker, likewise
    lag_bytes_at_end: int  # WAL the replica had not confirmed when collection ended

    @property
    def rate(self) -> float:
        return self.samples / self.seconds


def _collect_b(
    servers: Servers, redis_url: str, run_id: str, walsender: int, apply: int
) -> Collected:
    """Collect a run of B on the primary with the project's worker (a fake connector, no
    network), counting samples settled per second and the WAL sender's CPU from /proc."""
    cpu_before, apply_before = cpu_seconds(walsender), cpu_seconds(apply)
    ids = exec_make_run(servers.primary_url, run_id, tenant=servers.b, questions=60, repeats=20)
    with _connect(servers.primary_url) as poll:

        def settled() -> bool:
            n = _one(
                poll,
                "SELECT count(*) FROM geo.samples WHERE run_id = %s "
                "AND collection_state IN ('completed', 'failed')",
                (run_id,),
            )
            return bool(n == len(ids))

        began = time.monotonic()
        asyncio.run(
            run_worker_until(
                servers.primary_url,
                redis_url,
                f"geo-test-rate-{uuid.uuid4().hex[:8]}",
                {"deepseek": FakeConnector("deepseek")},
                settled,
                timeout_s=900.0,  # a safety net on a loaded box; the loop ends when all settle
            )
        )
        seconds = time.monotonic() - began
        assert settled(), f"{run_id} did not settle in 900 s"
        lag = _one(
            poll,
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (servers.publication,),
        )
        analyst_replica.wait_caught_up(poll, servers.publication)
        cpu_after, apply_after = cpu_seconds(walsender), cpu_seconds(apply)
        completed = _one(
            poll,
            "SELECT count(*) FROM geo.samples WHERE run_id = %s AND collection_state = 'completed'",
            (run_id,),
        )
        attempts = _one(
            poll,
            "SELECT count(*) FROM geo.attempts a JOIN geo.samples s USING (sample_id) "
            "WHERE s.run_id = %s",
            (run_id,),
        )
    assert cpu_before is not None and cpu_after is not None, "the WAL sender restarted"
    assert apply_before is not None and apply_after is not None, "the apply worker restarted"
    return Collected(
        len(ids), completed, attempts, seconds, cpu_after - cpu_before,
        apply_after - apply_before, lag,
    )  # fmt: skip


def test_an_analyst_query_past_the_limit_is_cancelled_while_collection_keeps_its_rate(
    servers: Servers, redis_url: str
):
    """B's analyst hammers B's replica with statements its server's statement_timeout cancels,
    while B's collection runs on the primary: collection keeps its rate, measured in the same
    test without the analyst. Both servers run on this machine; each gets a CPU of its own
    (affinity), as each would have its own host (CPU sharing on one host is no question of
    the replica's). What couples them here is replication: the
    primary's WAL sender decodes B's changes and the replica applies them while the analyst's
    statements read the same tables; its CPU per sample is measured and printed."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to give the replica's server one of its own")
    mine = os.sched_getaffinity(0)
    primary_cpus, replica_cpus = set(cpus[:-1]), {cpus[-1]}
    _pin(servers.primary_url, primary_cpus)
    _pin(servers.replica_url, replica_cpus)
    os.sched_setaffinity(0, primary_cpus)  # the worker (this thread and those it starts)
    # B's submit cap (plant_tenant's) would set the rate by itself: lifted here, so collection
    # runs as fast as its CPU lets it and a slowdown shows.
    with psycopg.connect(servers.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        cap = tenancy.platform_limits(conn, ["deepseek"]).get((servers.b, "deepseek"))  # type: ignore[arg-type]
        tenancy.clear_platform_limit(conn, servers.b, "deepseek")  # type: ignore[arg-type]
    with _connect(servers.replica_url) as admin:  # a small limit, set by the operator
        admin.execute(
            f'ALTER ROLE "{servers.b_login}" IN DATABASE geo SET statement_timeout = 1000'
        )
    try:
        with _connect(servers.primary_url) as p:
            walsender = _one(
                p,
                "SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                (servers.publication,),
            )
        with _connect(servers.replica_url) as r:
            apply = _one(r, "SELECT pid FROM pg_stat_subscription WHERE relid IS NULL")
        suffix = uuid.uuid4().hex[:6]
        alone = _collect_b(servers, redis_url, f"rate-alone-{suffix}", walsender, apply)

        analyst = ReplicaAnalyst(servers.b_url)
        analyst.start()
        try:
            assert analyst.first_cancel.wait(timeout=600), analyst.outcomes
            started = time.monotonic()
            loaded = _collect_b(servers, redis_url, f"rate-loaded-{suffix}", walsender, apply)
            ended = time.monotonic()
        finally:
            analyst.stop.set()
            analyst.join(timeout=600)
        assert not analyst.is_alive()
    finally:
        os.sched_setaffinity(0, mine)
        with _connect(servers.replica_url) as admin:
            admin.execute(f'ALTER ROLE "{servers.b_login}" IN DATABASE geo RESET statement_timeout')
        if cap is not None:
            with psycopg.connect(servers.primary_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
                tenancy.set_platform_limit(
                    conn,  # type: ignore[arg-type]
                    servers.b,
                    "deepseek",
                    cap.submits_per_second,
                    cap.burst,
                )
    per_1000 = {
        phase: {
            "walsender_s": round(1000 * got.walsender_cpu_s / got.samples, 3),
            "apply_s": round(1000 * got.apply_cpu_s / got.samples, 3),
        }
        for phase, got in (("alone", alone), ("loaded", loaded))
    }
    print(
        f"\ncollection alone: {alone}, {alone.rate:.1f} samples/s"
        f"\ncollection with the analyst: {loaded}, {loaded.rate:.1f} samples/s "
        f"(ratio {loaded.rate / alone.rate:.2f})"
        f"\nCPU per 1,000 samples: {per_1000}; analyst: {dict(analyst.outcomes)}"
    )

    # The analyst set no limit: the server's cancelled every statement, none ran to the end,
    # and cancellations overlapped the whole collection.
    assert analyst.timeout_seen == "1s"
    assert set(analyst.outcomes) == {"QueryCanceled"}, analyst.outcomes
    assert any(s < ended and e > started for s, e in analyst.cancelled_spans)
    for got in (alone, loaded):
        assert got.completed == got.attempts == got.samples, got  # no failure, no retry
    # The bound comes from this test's baseline: at least half of it (a generous margin for
    # other work on a shared machine), and the WAL sender does no more than three times the work
    # for the same samples (its idle wake-ups grow with the phase's length; plus two clock
    # ticks of /proc's resolution).
    assert loaded.rate >= alone.rate / 2, (alone, loaded)
    tick = 2 / os.sysconf("SC_CLK_TCK")
    assert loaded.walsender_cpu_s <= 3 * alone.walsender_cpu_s + tick, (alone, loaded)


def test_drop_removes_the_subscription_the_slot_and_the_publication(servers: Servers):
    """Last in this module: it ends the replication the other tests use."""
    env = {"GEO_DATABASE_URL": servers.primary_url, "GEO_ANALYST_REPLICA_URL": servers.replica_url}
    out = _cli(env, "tenants", "analyst-replica", "drop", servers.b)
    assert out.strip() == f"dropped {servers.publication} (tenant {servers.b})"
    with _connect(servers.primary_url) as p:
        assert analyst_replica.publication_of(p, servers.b) is None
        assert _one(p, "SELECT count(*) FROM pg_replication_slots") == 0
    with _connect(servers.replica_url) as r:
        assert analyst_replica.subscription(r) is None
        assert _one(r, "SELECT count(*) FROM geo.samples") > 0  # the copy stays until removed
    assert "has no analyst replica" in _cli(env, "tenants", "analyst-replica", "drop", servers.b)
