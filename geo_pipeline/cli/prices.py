"""``geo-pipeline prices``: versioned price lists (R4, R23). ``import FILE`` stores price lists
with the dates they take effect (validated as a whole, every problem with its field path);
``list`` shows every version with the one in effect now. A run is quoted with the version in
effect when it is created and keeps it: its charges never follow a later list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from geo_pipeline.cli.output import emit_json, emit_table
from geo_pipeline.domain.catalogue import PRICE_FIELDS

COLUMNS = [*PRICE_FIELDS[:3], "in_effect", *PRICE_FIELDS[3:]]


@click.group("prices")
def prices_group() -> None:
    """Price lists per platform, with the dates they take effect (integer minor units)."""


def read_price_file(path: Path) -> Any:
    """A price file's content: JSON by its suffix, YAML otherwise (YAML reads JSON too)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise click.ClickException(
            f"{path} is not valid {path.suffix[1:] or 'YAML'}: {exc}"
        ) from None


@prices_group.command("import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "as_json", is_flag=True)
def import_cmd(file: Path, as_json: bool) -> None:
    """Store the price lists of FILE (YAML or JSON), all or none. Re-importing the same lists
    is a no-op; a published version never changes (import a new version instead)."""
    from geo_pipeline.billing import ledger, prices
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.catalogue import PriceFileError, parse_price_versions
    from geo_pipeline.store import db as dbmod

    caps = load_registry().capabilities()
    try:
        versions = parse_price_versions(read_price_file(file), caps)
    except PriceFileError as exc:
        click.echo(f"error: {file}: {exc}", err=True)
        raise SystemExit(2) from None
    with dbmod.connect() as conn:
        try:
            done = prices.import_price_versions(conn, versions, caps)
        except ledger.BillingError as exc:
            raise click.ClickException(str(exc)) from None
        conn.commit()
    if as_json:
        emit_json({"imported": [d.as_dict() for d in done]})
        return
    emit_table([d.as_dict() for d in done], title=f"price lists of {file}")


@prices_group.command("list")
@click.option("--platform", default=None, help="Only this platform.")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(platform: str | None, as_json: bool) -> None:
    """Every price version: the registry's fallback list, then the imported ones in order of
    taking effect; ``in_effect`` marks what a run created now is quoted with."""
    from geo_pipeline.billing import prices
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.store import db as dbmod

    caps = load_registry().capabilities()
    if platform is not None and platform not in caps:
        raise click.ClickException(
            f"platform {platform!r} is not registered; known: {', '.join(sorted(caps))}"
        )
    with dbmod.connect() as conn:
        rows = prices.price_listing(conn, caps, platform)
    if as_json:
        emit_json({"prices": rows})
        return
    emit_table(
        [{**r, "base": json.dumps(r["base"], sort_keys=True)} for r in rows],
        COLUMNS,
        title="price versions (minor units)",
    )


def register(root: click.Group) -> None:
    root.add_command(prices_group)
