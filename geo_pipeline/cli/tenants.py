"""``geo-pipeline tenants``: tenants, their analyst logins and their per-platform submit caps.

Login management needs a connection with CREATEROLE (the database administrator); everything
else works as the owner or the service role. Run as an analyst login, ``tenants list`` shows the
analyst's own tenant only: the database, not this tool, decides what a login sees.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from geo_pipeline.cli.output import emit_json, emit_table

if TYPE_CHECKING:
    from geo_pipeline.store import tenancy
    from geo_pipeline.store.db import Conn


@click.group("tenants")
def tenants_group() -> None:
    """Tenants, analyst logins and submit caps."""


def _fail(exc: tenancy.TenancyError) -> click.ClickException:
    return click.ClickException(str(exc))


@tenants_group.command("create")
@click.argument("tenant")
@click.option("--name", default=None, help="Display name (default: the tenant id).")
@click.option("--currency", default="CNY", show_default=True, help="Ledger currency (ISO 4217).")
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1, max=1_000_000),
    default=500,
    show_default=True,
    help="Samples of this tenant running at once, across all workers.",
)
def create_cmd(tenant: str, name: str | None, currency: str, max_in_flight: int) -> None:
    """Create TENANT (a no-op if it exists)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    with dbmod.connect() as conn:
        try:
            created = tenancy.create_tenant(
                conn, tenant, name=name, currency=currency, max_in_flight=max_in_flight
            )
        except tenancy.TenancyError as exc:
            raise _fail(exc) from exc
        conn.commit()
    click.echo(f"tenant {tenant} {'created' if created else 'already exists (unchanged)'}")


@tenants_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> None:
    """Tenants with the number of analyst roles bound on this server (on the service's server
    only NOLOGIN roles an older version made; the logins: `analysts TENANT --replica`)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    with dbmod.connect() as conn:
        rows = tenancy.list_tenants(conn)
    if as_json:
        emit_json(rows)
    else:
        emit_table(rows, title="tenants")


def _endpoint_option(fn: Any) -> Any:
    return click.option(
        "--endpoint",
        default=None,
        metavar="HOST:PORT",
        help="Where analysts reach the analyst endpoint, for the printed connection string "
        f"(default: the replica's host, port {DEFAULT_ENDPOINT_PORT}; {DEFAULT_ENDPOINT_HOST} "
        "when the replica is reached by a Unix socket, the endpoint's default --listen).",
    )(fn)


DEFAULT_ENDPOINT_PORT = 6432
DEFAULT_ENDPOINT_HOST = "127.0.0.1"  # `analyst-replica endpoint`'s default --listen


def _print_grant(grant: tenancy.AnalystGrant, endpoint: str | None, verb: str) -> None:
    """The login's connection string, at the analyst endpoint: the replica's own server is the
    operator's (its pg_hba refuses analysts), the service's server has no analyst login."""
    if endpoint:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise click.BadParameter("HOST:PORT, e.g. acme-analytics.example.com:6432",
                                     param_hint="--endpoint")  # fmt: skip
        at = grant.at(host, int(port))
    elif grant.host and not grant.host.startswith("/"):
        at = grant.at(grant.host, DEFAULT_ENDPOINT_PORT)
    else:  # a socket directory is the replica's own server: the endpoint listens on TCP
        at = grant.at(DEFAULT_ENDPOINT_HOST, DEFAULT_ENDPOINT_PORT)
    click.echo(
        f"{verb} {grant.login}; tenant {grant.tenant_id}, on its analyst replica: analysts "
        "connect through the analyst endpoint (`tenants analyst-replica endpoint`), never to "
        "the replica itself. Shown once, store it now:"
    )
    click.echo(at.connection_string())


@tenants_group.command("grant-analyst")
@click.argument("tenant")
@click.option(
    "--login",
    default=None,
    help="The new login's name (lower case, digits, '_'; must not name the tenant). "
    "Default: an opaque generated name.",
)
@click.option("--rotate", is_flag=True, help="Give an existing login of TENANT a new password.")
@click.option(
    "--replica",
    is_flag=True,
    help="Act on the tenant's analyst replica (GEO_ANALYST_REPLICA_URL), where logins live. "
    "Without it the command refuses: the service's own server (GEO_DATABASE_URL) has none.",
)
@_endpoint_option
def grant_cmd(
    tenant: str, login: str | None, rotate: bool, replica: bool, endpoint: str | None
) -> None:
    """Create an analyst login of TENANT on its analyst replica (or, with --rotate, give one a
    new password); prints its connection string at the analyst endpoint, once.

    No analyst logs in to the service's server (issue 35): without --replica this refuses and
    names the commands that make the replica (`analyst-replica create TENANT`, which also makes
    the first login) and the endpoint (`analyst-replica endpoint`). The password is generated,
    shown here and nowhere else; PostgreSQL keeps only its SCRAM verifier.
    """
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    url = _replica_urls()[1] if replica else None
    with dbmod.connect(url) as conn:
        try:
            grant = tenancy.grant_analyst(conn, tenant, login, rotate=rotate)
        except tenancy.TenancyError as exc:
            raise _fail(exc) from exc
    _print_grant(grant, endpoint, "new password for" if grant.rotated else "created analyst login")


@tenants_group.command("revoke")
@click.argument("tenant")
@click.option("--login", required=True, help="The analyst login to remove.")
@click.option(
    "--replica",
    is_flag=True,
    help="On the tenant's analyst replica (GEO_ANALYST_REPLICA_URL), where logins live; "
    "without it, removes a NOLOGIN role left on the service's server by an older version.",
)
def revoke_cmd(tenant: str, login: str, replica: bool) -> None:
    """Remove an analyst login of TENANT: its binding, its role and its open sessions."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    url = _replica_urls()[1] if replica else None
    with dbmod.connect(url) as conn:
        try:
            ended = tenancy.revoke_analyst(conn, tenant, login)
        except tenancy.TenancyError as exc:
            raise _fail(exc) from exc
    click.echo(f"revoked {login} (tenant {tenant}); open sessions ended: {ended}")


@tenants_group.command("guard-analysts")
@click.option(
    "--every",
    type=click.FloatRange(min=0.5, max=3600.0),
    default=None,
    help="Run a pass every this many seconds until stopped (default: one pass). A statement "
    "runs at most the limit plus this interval.",
)
@click.option(
    "--replica",
    is_flag=True,
    help="Guard the analyst replica's database (GEO_ANALYST_REPLICA_URL) instead of the primary, "
    "and copy the question texts of its new runs from the primary (GEO_DATABASE_URL).",
)
def guard_cmd(every: float | None, replica: bool) -> None:
    """Hold analyst logins to their limits: cancel statements past the limit, end transactions
    left open past it, undo role defaults a login set for itself, refuse temp tables.

    Run as the administrator (CREATEROLE and pg_signal_backend, or a superuser). Analyst logins
    live on tenants' replicas (--replica); PostgreSQL lets every login change its own timeout,
    so on a replica this is what enforces it (at the endpoint, the pooler and the standby do).
    Without --replica it acts on the service's server, where no analyst can log in (migration
    0083).
    """
    from geo_pipeline.store import analyst_guard
    from geo_pipeline.store import db as dbmod

    primary_url, url = _replica_urls()[:2] if replica else (None, None)
    with dbmod.connect(url) as conn:
        while True:
            report = analyst_guard.enforce(conn)
            conn.commit()
            if primary_url is not None:
                _sync_replica_texts(primary_url, conn)
            for login, pid in report.cancelled:
                click.echo(f"cancelled a statement of {login} (pid {pid}) past the limit")
            for login, pid in report.terminated:
                click.echo(f"ended {login}'s session (pid {pid}): transaction open past the limit")
            for login in report.settings_restored:
                click.echo(f"restored the operator's role defaults of {login}")
            if every is None:
                return
            time.sleep(every)


def _sync_replica_texts(primary_url: str, replica: Conn) -> None:
    """The question texts of the replica's new runs (shared by tenants, so not replicated)."""
    import psycopg

    from geo_pipeline.store import analyst_replica
    from geo_pipeline.store import db as dbmod

    try:
        with dbmod.connect(primary_url, autocommit=True) as primary:
            copied = analyst_replica.sync_question_texts(primary, replica)
        replica.commit()
    except (psycopg.Error, dbmod.DatabaseUnavailable) as exc:  # the guard itself goes on
        replica.rollback()
        click.echo(f"question texts not copied this pass: {exc}", err=True)
        return
    if copied:
        click.echo(f"copied {copied} question texts of new runs from the primary")


@tenants_group.command("analysts")
@click.argument("tenant", required=False)
@click.option(
    "--replica",
    is_flag=True,
    help="On the tenant's analyst replica (GEO_ANALYST_REPLICA_URL), where logins live; "
    "without it, the NOLOGIN roles an older version left on the service's server.",
)
@click.option("--json", "as_json", is_flag=True)
def analysts_cmd(tenant: str | None, replica: bool, as_json: bool) -> None:
    """Analyst logins (of TENANT, or of every tenant)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    url = _replica_urls()[1] if replica else None
    with dbmod.connect(url) as conn:
        rows = tenancy.analyst_logins(conn, tenant)
    if as_json:
        emit_json(rows)
    else:
        emit_table(rows, ["login", "tenant_id", "granted_at", "granted_by"], title="analysts")


@tenants_group.command("limit")
@click.argument("tenant")
@click.option("--platform", required=True, help="Platform id, e.g. deepseek.")
@click.option(
    "--submits-per-second",
    type=click.FloatRange(min=0.0, max=100_000.0, min_open=True),
    default=None,
    help="TENANT's submit rate on PLATFORM, shared by all workers.",
)
@click.option("--burst", type=click.IntRange(min=1, max=1_000_000), default=None)
@click.option("--clear", is_flag=True, help="Remove the cap (only the platform's limit applies).")
def limit_cmd(
    tenant: str, platform: str, submits_per_second: float | None, burst: int | None, clear: bool
) -> None:
    """Cap TENANT's submit rate on PLATFORM (R10); workers pick it up within seconds."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    known = set(load_registry().capabilities())
    if platform not in known:
        raise click.BadParameter(
            f"unknown platform {platform!r}; known: {', '.join(sorted(known))}",
            param_hint="--platform",
        )
    if clear == (submits_per_second is not None):
        raise click.UsageError("give either --submits-per-second or --clear")
    with dbmod.connect() as conn:
        try:
            if clear:
                gone = tenancy.clear_platform_limit(conn, tenant, platform)
                click.echo(f"cap of {tenant} on {platform} {'removed' if gone else 'was not set'}")
                return
            assert submits_per_second is not None
            lim = tenancy.set_platform_limit(conn, tenant, platform, submits_per_second, burst)
        except tenancy.TenancyError as exc:
            raise _fail(exc) from exc
    click.echo(
        f"{tenant} on {platform}: at most {lim.submits_per_second:g} submits/s, burst {lim.burst}"
    )


@tenants_group.group("analyst-replica")
def replica_group() -> None:
    """A tenant's analyst server: a PostgreSQL of its own fed by logical replication with row
    filters, so its analyst learns nothing of other tenants (issue #35).

    GEO_DATABASE_URL is the primary (wal_level=logical, as a superuser), GEO_ANALYST_REPLICA_URL
    the replica's database (a superuser; one server per tenant), GEO_ANALYST_PUBLISHER_URL how
    the replica's server reaches the primary (default: GEO_DATABASE_URL).
    """


def _replica_urls(need_replica: bool = True) -> tuple[str, str | None, str]:
    from geo_pipeline.settings import settings
    from geo_pipeline.store import db as dbmod

    env = settings()
    primary = dbmod.database_url()
    replica = dbmod.to_psycopg_url(env.analyst_replica_url) if env.analyst_replica_url else None
    if need_replica and replica is None:
        raise click.UsageError("set GEO_ANALYST_REPLICA_URL to the replica's database (superuser)")
    publisher = dbmod.to_psycopg_url(env.analyst_publisher_url or primary)
    return primary, replica, publisher


@replica_group.command("create")
@click.argument("tenant")
@click.option("--login", default=None, help="The analyst login's name (default: opaque).")
@_endpoint_option
def replica_create_cmd(tenant: str, login: str | None, endpoint: str | None) -> None:
    """Publish TENANT's rows, subscribe the replica, wait for the copy, set its limits and create
    its analyst login there (printed once). Run again after migrating the primary."""
    from geo_pipeline.store import analyst_replica, tenancy
    from geo_pipeline.store import db as dbmod

    primary_url, replica_url, publisher = _replica_urls()
    with (
        dbmod.connect(primary_url, autocommit=True) as primary,
        dbmod.connect(replica_url, autocommit=True) as replica,
    ):
        try:
            made = analyst_replica.create(primary, replica, tenant, publisher, login=login)
        except (analyst_replica.ReplicaError, tenancy.TenancyError) as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(
        f"analyst replica of {tenant}: publication/subscription {made.publication}, "
        f"{len(made.tables)} tables, copied"
    )
    if made.grant is None:
        click.echo(
            "its analyst login exists on the replica (unchanged; rotate with "
            f"`tenants grant-analyst {tenant} --replica --login LOGIN --rotate`)"
        )
    else:
        _print_grant(made.grant, endpoint, "created analyst login")


@replica_group.command("status")
@click.argument("tenant")
@click.option("--json", "as_json", is_flag=True)
def replica_status_cmd(tenant: str, as_json: bool) -> None:
    """TENANT's publication, its slot's lag on the primary, and the replica's subscription."""
    from geo_pipeline.store import analyst_replica
    from geo_pipeline.store import db as dbmod

    primary_url, replica_url, _ = _replica_urls(need_replica=False)
    with dbmod.connect(primary_url, autocommit=True) as primary:
        if replica_url is None:
            info = analyst_replica.status(primary, None, tenant)
        else:
            with dbmod.connect(replica_url, autocommit=True) as replica:
                info = analyst_replica.status(primary, replica, tenant)
    if as_json:
        emit_json(info)
    else:
        emit_table([{k: v for k, v in info.items() if k != "subscription"}], title="publication")
        if info.get("subscription"):
            emit_table([info["subscription"]], title="subscription")


@replica_group.command("drop")
@click.argument("tenant")
def replica_drop_cmd(tenant: str) -> None:
    """Stop feeding TENANT's replica: drop its subscription, slot and publication (the
    replica's database and login stay until you remove the server)."""
    from geo_pipeline.store import analyst_replica
    from geo_pipeline.store import db as dbmod

    primary_url, replica_url, _ = _replica_urls(need_replica=False)
    with dbmod.connect(primary_url, autocommit=True) as primary:
        try:
            if replica_url is None:
                gone = analyst_replica.drop(primary, None, tenant)
            else:
                with dbmod.connect(replica_url, autocommit=True) as replica:
                    gone = analyst_replica.drop(primary, replica, tenant)
        except analyst_replica.ReplicaError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"dropped {gone} (tenant {tenant})" if gone else f"{tenant} has no analyst replica")


@replica_group.command("endpoint")
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the standby's data and the pooler's files (kept between starts).",
)
@click.option(
    "--listen",
    default=f"{DEFAULT_ENDPOINT_HOST}:{DEFAULT_ENDPOINT_PORT}",
    show_default=True,
    help="HOST:PORT for analysts.",
)
@click.option(
    "--every",
    type=click.FloatRange(min=0.5, max=3600.0),
    default=10.0,
    show_default=True,
    help="Seconds between the guard's passes on the standby and re-reads of the logins.",
)
@click.option(
    "--pool-mode",
    type=click.Choice(["transaction", "session"]),
    default="transaction",
    show_default=True,
    help="session: for BI drivers that need named prepared statements across transactions; "
    "a SET then lasts for the client's connection (docs/analysts.md).",
)
def replica_endpoint_cmd(state_dir: Path, listen: str, every: float, pool_mode: str) -> None:
    """The analyst endpoint of the replica (GEO_ANALYST_REPLICA_URL): a hot standby of it
    (read-only by the server: no ALTER ROLE, no writes) on a Unix socket only, and PgBouncer on
    --listen in front of it (query timeout, connection caps, reset after every transaction).
    Runs until stopped; every --every seconds the guard cancels what outlived the pooler and new
    or rotated logins are loaded."""
    import signal
    import sys

    from geo_pipeline.runtime import analyst_pooler, embedded_pg
    from geo_pipeline.store import analyst_guard
    from geo_pipeline.store import db as dbmod

    _, replica_url, _ = _replica_urls()
    assert replica_url is not None
    # stopped by a supervisor: SIGTERM ends the loop like ^C, so the pooler and standby stop too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("HOST:PORT, e.g. 0.0.0.0:6432", param_hint="--listen")
    # An analyst must not reach the replica's own server (its login exists there): warn when its
    # pg_hba admits them over TCP. Cheap, and only the replica's operator can fix it.
    import psycopg

    with dbmod.connect(replica_url, autocommit=True) as replica:
        try:
            admits = analyst_pooler.replica_admits_analysts(replica)
        except psycopg.Error as exc:  # pg_hba_file_rules is the superuser's
            admits = []
            click.echo(f"warning: the replica's pg_hba.conf was not checked: {exc}", err=True)
    warning = analyst_pooler.hba_warning(admits)
    if warning:
        click.echo(warning, err=True)
    try:
        standby = embedded_pg.start_standby(state_dir / "standby", replica_url)
        standby_url = f"postgresql://postgres@/geo?host={standby.socket_dir}&port={standby.port}"
        with dbmod.connect(standby_url, autocommit=True) as conn:
            verifiers = analyst_pooler.analyst_verifiers(conn)
            config = analyst_pooler.PoolerConfig(
                server_host=str(standby.socket_dir),
                server_port=standby.port,
                listen_addr=host,
                listen_port=int(port),
                pool_mode=pool_mode,
            )
            pooler = analyst_pooler.start(config, state_dir / "pooler", verifiers)
            click.echo(
                f"analyst endpoint on {host}:{port} (database geo, {len(verifiers)} logins); "
                f"standby of the replica in {standby.pgdata}"
            )
            try:
                while True:
                    time.sleep(every)
                    report = analyst_guard.enforce(conn)
                    for login, pid in report.cancelled + report.terminated:
                        click.echo(f"ended a statement of {login} (pid {pid}) past the limit")
                    now = analyst_pooler.analyst_verifiers(conn)
                    if now != verifiers:
                        pooler.reload_users(now)
                        verifiers = now
                        click.echo(f"logins reloaded: {len(now)}")
            finally:
                pooler.stop()
                standby.stop()
    except (analyst_pooler.PoolerUnavailable, embedded_pg.EmbeddedPostgresError) as exc:
        raise click.ClickException(str(exc)) from exc


def register(root: click.Group) -> None:
    root.add_command(tenants_group)
