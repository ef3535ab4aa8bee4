"""``geo-pipeline tenants``: tenants, their analyst logins and their per-platform submit caps.

Login management needs a connection with CREATEROLE (the database administrator); everything
else works as the owner or the service role. Run as an analyst login, ``tenants list`` shows the
analyst's own tenant only: the database, not this tool, decides what a login sees.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from geo_pipeline.cli.output import emit_json, emit_table

if TYPE_CHECKING:
    from geo_pipeline.store import tenancy


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
    """Tenants with their number of analyst logins."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    with dbmod.connect() as conn:
        rows = tenancy.list_tenants(conn)
    if as_json:
        emit_json(rows)
    else:
        emit_table(rows, title="tenants")


@tenants_group.command("grant-analyst")
@click.argument("tenant")
@click.option(
    "--login",
    default=None,
    help="The new login's name (lower case, digits, '_'; must not name the tenant). "
    "Default: an opaque generated name.",
)
@click.option("--rotate", is_flag=True, help="Give an existing login of TENANT a new password.")
def grant_cmd(tenant: str, login: str | None, rotate: bool) -> None:
    """Create an analyst login that reads TENANT's rows only; prints its connection string once.

    The password is generated, shown here and nowhere else; PostgreSQL keeps only its SCRAM
    verifier. Lost it? Run again with --rotate.
    """
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    with dbmod.connect() as conn:
        try:
            grant = tenancy.grant_analyst(conn, tenant, login, rotate=rotate)
        except tenancy.TenancyError as exc:
            raise _fail(exc) from exc
    verb = "new password for" if grant.rotated else "created analyst login"
    click.echo(f"{verb} {grant.login} (tenant {grant.tenant_id}); shown once, store it now:")
    click.echo(grant.connection_string())


@tenants_group.command("revoke")
@click.argument("tenant")
@click.option("--login", required=True, help="The analyst login to remove.")
def revoke_cmd(tenant: str, login: str) -> None:
    """Remove an analyst login of TENANT: its binding, its role and its open sessions."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    with dbmod.connect() as conn:
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
def guard_cmd(every: float | None) -> None:
    """Hold analyst logins to their limits: cancel statements past the limit, end transactions
    left open past it, undo role defaults a login set for itself, refuse temp tables.

    Run as the administrator (CREATEROLE and pg_signal_backend, or a superuser), next to the
    service; PostgreSQL lets every login change its own timeout, so this is what enforces it.
    """
    from geo_pipeline.store import analyst_guard
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        while True:
            report = analyst_guard.enforce(conn)
            conn.commit()
            for login, pid in report.cancelled:
                click.echo(f"cancelled a statement of {login} (pid {pid}) past the limit")
            for login, pid in report.terminated:
                click.echo(f"ended {login}'s session (pid {pid}): transaction open past the limit")
            for login in report.settings_restored:
                click.echo(f"restored the operator's role defaults of {login}")
            if every is None:
                return
            time.sleep(every)


@tenants_group.command("analysts")
@click.argument("tenant", required=False)
@click.option("--json", "as_json", is_flag=True)
def analysts_cmd(tenant: str | None, as_json: bool) -> None:
    """Analyst logins (of TENANT, or of every tenant)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import tenancy

    with dbmod.connect() as conn:
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


def register(root: click.Group) -> None:
    root.add_command(tenants_group)
