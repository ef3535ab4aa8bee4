"""Entry point of ``geo-pipeline``. Errors a person can act on are printed as messages with a
non-zero exit code, never as tracebacks (STYLE.md point 9)."""

from __future__ import annotations

import importlib
import logging
import sys

import click
import psycopg
import redis

from geo_pipeline.domain.catalogue import RegistryError
from geo_pipeline.domain.config import ConfigError
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


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, standalone_mode=False)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        return 2
    except DatabaseUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        return 3
    except psycopg.Error as exc:
        # A database error that no command turned into a friendlier message: say what and where.
        diag = getattr(exc, "diag", None)
        detail = f" ({diag.message_detail})" if diag is not None and diag.message_detail else ""
        click.echo(f"database error: {str(exc).splitlines()[0]}{detail}", err=True)
        return 4
    except SettingsError as exc:  # an environment variable of the wrong type
        click.echo(f"error: {exc}", err=True)
        return 2
    except RegistryError as exc:  # the connector registry file (GEO_CONNECTORS_FILE) or a platform
        click.echo(f"error: {exc}", err=True)
        return 2
    except redis.exceptions.ConnectionError as exc:
        click.echo(f"error: Redis is unreachable ({exc}); check GEO_REDIS_URL", err=True)
        return 3
    except OSError as exc:  # an output path that cannot be written, a port already taken, ...
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        click.echo(f"error: {exc.strerror or exc}{where}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
