"""``geo-pipeline db``: schema migrations."""

from __future__ import annotations

import click

from geo_pipeline.cli.output import emit_json


@click.group("db")
def db_group() -> None:
    """Database schema."""


@db_group.command("upgrade")
@click.option("--json", "as_json", is_flag=True)
def upgrade(as_json: bool) -> None:
    """Apply pending migrations from sql/migrations (idempotent)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import migrate

    with dbmod.connect() as conn:
        done = migrate.upgrade(conn)
        have = migrate.applied(conn)
    if as_json:
        emit_json({"applied_now": [m.path.name for m in done], "version": max(have, default=0)})
    elif done:
        for m in done:
            click.echo(f"applied {m.path.name}")
    else:
        click.echo(f"schema is up to date (version {max(have, default=0)})")


def register(root: click.Group) -> None:
    root.add_command(db_group)
