"""Entry point of ``geo-pipeline``. Errors a person can act on are printed as messages with a
non-zero exit code, never as tracebacks (STYLE.md point 9).

Start-up is kept cheap (issue 30): this module and the command modules import only click and the
standard library at the top; psycopg, redis, pydantic, httpx... are imported by the command that
runs, so ``--help`` and argument errors cost no heavy import. The errors below are recognised by
the module that defines them, looked up in ``sys.modules``: an exception of a module that was never
imported cannot have been raised (geo_pipeline_tests/unit/foundation/test_cli_imports.py)."""

from __future__ import annotations

import functools
import importlib
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

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
    "stance",  # after "runs": adds `runs restance`
)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log debug details to stderr.")
def cli(verbose: bool) -> None:
    """geo_pipeline: sample AI answer engines, keep evidence, analyse mentions, bill exactly."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _configured(callback: Callable[..., Any]) -> Callable[..., Any]:
    """A command's callback that first hands the domain the deployment's values. Done here, when
    a command runs, not in the group's callback: click runs that one before a subcommand parses
    its ``--help``, and reading the settings imports pydantic."""

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from geo_pipeline.settings import configure_domain

        configure_domain()
        return callback(*args, **kwargs)

    return run


def _configure_commands(group: click.Group) -> None:
    for cmd in group.commands.values():
        if isinstance(cmd, click.Group):
            _configure_commands(cmd)
        elif cmd.callback is not None:
            cmd.callback = _configured(cmd.callback)


for _name in COMMAND_MODULES:
    importlib.import_module(f"geo_pipeline.cli.{_name}").register(cli)
_configure_commands(cli)


def _raised(exc: BaseException, module: str, *names: str) -> bool:
    """``exc`` is one of ``module``'s exception classes ``names``; False, without importing it,
    when the module was never imported (then none of its exceptions can have been raised)."""
    mod = sys.modules.get(module)
    if mod is None:
        return False
    for name in names:
        cls: Any = mod
        for part in name.split("."):
            cls = getattr(cls, part)
        if isinstance(exc, cls):
            return True
    return False


def _schema_missing(exc: BaseException) -> bool:
    """An object of our schema is missing: the database was never migrated, or is behind."""
    return _raised(
        exc,
        "psycopg",
        "errors.UndefinedTable",
        "errors.UndefinedColumn",
        "errors.UndefinedFunction",
        "errors.InvalidSchemaName",
    )


def _error(exc: BaseException) -> tuple[str, int] | None:
    """The message a person can act on, and the exit code, for an error no command handled;
    None for any other error (a bug: its traceback is shown)."""
    if _raised(exc, "geo_pipeline.domain.config_problems", "ConfigError"):
        return str(exc), 2
    # A GEO_* variable of the wrong type; the connector registry file or a platform.
    if _raised(exc, "geo_pipeline.settings", "SettingsError") or _raised(
        exc, "geo_pipeline.domain.catalogue", "RegistryError"
    ):
        return f"error: {exc}", 2
    if _raised(exc, "geo_pipeline.store.db", "DatabaseUnavailable") or _raised(
        exc, "geo_pipeline.runtime.preflight", "PreflightError"
    ):
        return f"error: {exc}", 3
    if _raised(exc, "psycopg", "Error"):
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
    if _raised(exc, "redis.exceptions", "ConnectionError"):
        return f"error: Redis is unreachable ({exc}); check GEO_REDIS_URL", 3
    if isinstance(exc, OSError):  # an output path that cannot be written, a port taken, ...
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return f"error: {exc.strerror or exc}{where}", 2
    if isinstance(exc, click.exceptions.Abort):
        return "aborted", 130
    if isinstance(exc, click.ClickException):
        return f"Error: {exc.format_message()}", exc.exit_code
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=args, standalone_mode=False)
    except Exception as exc:
        handled = _error(exc)
        if handled is None:
            raise
        message, code = handled
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
