"""``geo-pipeline dagster setup``: what a Dagster instance needs beside dagster.yaml.

Dagster keeps two things of ours in its own storage, where no configuration file reaches:
the per-pool step limits (defs/pools.py: the database limits that hold for every launch path,
UI clicks included) and the dynamic partitions of every collection run. ``setup`` writes both,
idempotently: run it once per instance after deploying (``geo-pipeline dev`` does), and again
after an upgrade that changes partitions — it adds each run's ``run|channel`` keys and records a
partition already materialised under the old run x channel key as materialised under its new
key, so nothing is recomputed and nothing shows as missing (docs/operations.md, "Upgrading
partitions").
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import click

from geo_pipeline.cli.output import emit_json

if TYPE_CHECKING:
    from geo_pipeline.store import db as dbmod


def runs_with_channels(conn: dbmod.Conn) -> list[tuple[str, list[str]]]:
    """Every run PostgreSQL has, with the channels of its frozen snapshot."""
    from geo_pipeline.store.queries import Q

    with conn.cursor() as cur:
        cur.execute("SELECT run_id FROM geo.runs ORDER BY run_id")
        run_ids = [str(r["run_id"]) for r in cur.fetchall()]
        cur.execute(Q("dagster.run_channels"), {"run_ids": run_ids})
        return [(str(r["run_id"]), list(r["channels"])) for r in cur.fetchall()]


@click.group("dagster")
def dagster_group() -> None:
    """The Dagster instance (DAGSTER_HOME): pool limits and run partitions."""


@dagster_group.command("setup")
@click.option("--json", "as_json", is_flag=True)
def setup(as_json: bool) -> None:
    """Set the pool limits and make every run's partitions exist (idempotent)."""
    # Dagster (and defs/, built on it) is imported by the command that opens its instance, not
    # with the CLI: importing it costs about 1 s of CPU, which every other command would pay.
    import dagster as dg

    from geo_pipeline.defs import names
    from geo_pipeline.defs.partitions import migrate_partitions
    from geo_pipeline.defs.pools import POOL_LIMITS, apply_pool_limits
    from geo_pipeline.store import db as dbmod

    # The run|channel-partitioned assets whose old materialisations carry over.
    migrated_assets = (names.SAMPLING_PLAN, *names.PARTITION_DOWNSTREAM)
    try:
        instance = dg.DagsterInstance.get()
    except dg.DagsterError as exc:
        # No DAGSTER_HOME, or its dagster.yaml names variables (DAGSTER_PG_*) that are not set.
        unset = sorted(set(re.findall(r'variable "?\$?(\w+)"? (?:which )?is not set', str(exc))))
        first = (
            f"unset environment variable(s) {', '.join(unset)}"
            if unset
            else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        )
        raise click.ClickException(
            f"cannot open the Dagster instance: {first} (set DAGSTER_HOME to the instance's "
            "directory and the variables its dagster.yaml reads, e.g. the DAGSTER_PG_* from "
            "`geo-pipeline dev`'s export line)"
        ) from None
    try:
        changed = apply_pool_limits(instance)
        with dbmod.connect() as conn:
            runs = runs_with_channels(conn)
        migration = migrate_partitions(instance, runs, migrated_assets)
    finally:
        instance.dispose()
    result = {
        "pools": POOL_LIMITS,
        "pools_changed": changed,
        "runs": len(runs),
        "partition_keys_added": migration.keys_added,
        "materialisations_carried_over": migration.materialisations_recorded,
    }
    if as_json:
        emit_json(result)
        return
    limits = ", ".join(f"{p}={n}" for p, n in POOL_LIMITS.items())
    click.echo(f"pools: {limits} ({len(changed)} changed)")
    click.echo(
        f"partitions: {len(runs)} runs, {migration.keys_added} keys added, "
        f"{migration.materialisations_recorded} materialisations carried over"
    )


@dagster_group.command("charts")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=3001, show_default=True)
def charts(host: str, port: int) -> None:
    """Serve the charts brand_visibility stored in the evidence archive (GEO_EVIDENCE_URL) at
    /charts/<sha256>.svg, so the Dagster UI shows them in place; set GEO_CHART_URL for the code
    server to this address as the UI's browser reaches it. Runs until stopped."""
    import time

    from geo_pipeline.evidence.backend import archive_from_url
    from geo_pipeline.ops.chart_server import serve

    server = serve(archive_from_url(), host, port)
    click.echo(f"serving charts on http://{host}:{server.server_port}", nl=True)
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


def register(root: click.Group) -> None:
    root.add_command(dagster_group)
