"""Entry point of ``geo-pipeline``. Errors a person can act on are printed as messages with a
non-zero exit code, never as tracebacks (STYLE.md point 9)."""

from __future__ import annotations

import importlib
import json
import logging
import sys

import click
import psycopg
import redis

from geo_pipeline.domain.catalogue import RegistryError
from geo_pipeline.domain.config import ConfigError
from geo_pipeline.runtime.preflight import PreflightError
from geo_pipeline.settings import SettingsError, configure_domain
from geo_pipeline.store.db import DatabaseUnavailable

# Each module defines ``register(root: click.Group)``; one module per part of the data path.
COMMAND_MODULES = (
    "db",
    "tenants",
    "runs",
    "execution",
    "simulator",
    "evidence",
    "review",
    "billing",
    "ops",
    "prices",
    "connectors_check",
    "dagster_instance",
    "accounts",
    "monitors",
    "deploy",
    "webhooks",
)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log debug details to stderr.")
def cli(verbose: bool) -> None:
    """geo_pipeline: sample AI answer engines, keep evidence, analyse mentions, bill exactly."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    configure_domain()


for _name in COMMAND_MODULES:
    importlib.import_module(f"geo_pipeline.cli.{_name}").register(cli)


def _schema_missing(exc: psycopg.Error) -> bool:
    """An object of our schema is missing: the database was never migrated, or is behind."""
    return isinstance(
        exc,
        psycopg.errors.UndefinedTable
        | psycopg.errors.UndefinedColumn
        | psycopg.errors.UndefinedFunction
        | psycopg.errors.InvalidSchemaName,
    )


def _error(exc: BaseException) -> tuple[str, int]:
    """The message a person can act on, and the exit code, for an error no command handled."""
    if isinstance(exc, ConfigError):
        return str(exc), 2
    # A GEO_* variable of the wrong type; the connector registry file or a platform.
    if isinstance(exc, SettingsError | RegistryError):
        return f"error: {exc}", 2
    if isinstance(exc, DatabaseUnavailable | PreflightError):
        return f"error: {exc}", 3
    if isinstance(exc, psycopg.Error):
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if _schema_missing(exc):
            return (
                f"error: the database is not migrated for this version ({first}): "
                "run `geo-pipeline db upgrade`",
                3,
            )
        # A database error that no command turned into a friendlier message: say what.
        diag = getattr(exc, "diag", None)
        detail = f" ({diag.message_detail})" if diag is not None and diag.message_detail else ""
        return f"database error: {first}{detail}", 4
    if isinstance(exc, redis.exceptions.ConnectionError):
        return f"error: Redis is unreachable ({exc}); check GEO_REDIS_URL", 3
    if isinstance(exc, OSError):  # an output path that cannot be written, a port taken, ...
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return f"error: {exc.strerror or exc}{where}", 2
    if isinstance(exc, click.exceptions.Abort):
        return "aborted", 130
    assert isinstance(exc, click.ClickException)
    return f"Error: {exc.format_message()}", exc.exit_code


HANDLED = (
    ConfigError,
    SettingsError,
    DatabaseUnavailable,
    PreflightError,
    psycopg.Error,
    RegistryError,
    redis.exceptions.ConnectionError,
    OSError,
    click.exceptions.Abort,
    click.ClickException,
)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=args, standalone_mode=False)
    except HANDLED as exc:
        message, code = _error(exc)
        if "--json" in args:
            # Machines asked for JSON: errors are JSON too, on stdout, with the exit code.
            click.echo(
                json.dumps(
                    {"error": message.removeprefix("error: ").removeprefix("Error: "),
                     "kind": type(exc).__name__, "exit_code": code},
                    ensure_ascii=False,
                )
            )  # fmt: skip
        elif isinstance(exc, click.UsageError):
            exc.show()
        else:
            click.echo(message, err=True)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
