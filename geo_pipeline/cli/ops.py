"""``geo-pipeline demo``, ``geo-pipeline dev`` and ``geo-pipeline runs export`` (issue 9).

``demo`` is the README's "run the main job": services from the environment or embedded ones,
the simulator, relay, workers and sweeper as supervised subprocesses, one run of the bundled
example config, progress bars, and the run's report. ``dev`` adds the Dagster webserver and
daemon on the same PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import click

from geo_pipeline.cli.output import emit_json
from geo_pipeline.ops import export as exportmod
from geo_pipeline.ops import report as reportmod
from geo_pipeline.store import db as dbmod
from geo_pipeline.store import runs as runstore


@click.command("export")
@click.argument("run_id")
@click.option(
    "--format", "fmt", type=click.Choice(exportmod.FORMATS), default="json", show_default=True
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of standard output.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary of what was written.")
def export_cmd(run_id: str, fmt: str, out: Path | None, as_json: bool) -> None:
    """Export RUN_ID's report (status, evidence, mention rates, money) as JSON, CSV or HTML."""
    with dbmod.connect() as conn:
        try:
            report = reportmod.build_report(conn, run_id, link_for=_local_link_for())
        except runstore.RunNotFound as exc:
            raise click.ClickException(str(exc)) from None
    text = exportmod.render(report, fmt)
    if out is None:
        if as_json and fmt != "json":
            raise click.ClickException("--json without --out would mix two outputs; add --out")
        click.echo(text, nl=not text.endswith("\n"))
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    summary = {
        "run_id": run_id,
        "format": fmt,
        "path": str(out),
        "samples": len(report.samples),
        "bytes": len(text.encode("utf-8")),
    }
    if as_json:
        emit_json(summary)
    else:
        click.echo(f"wrote {fmt} report of run {run_id} ({len(report.samples)} samples) to {out}")


def _local_link_for() -> reportmod.LinkFor | None:
    """With a local evidence directory (the demo's default) the report can link files directly;
    with object storage it shows keys and the authorised download command instead (R20)."""
    return reportmod.local_link_for()


def register(root: click.Group) -> None:
    """Add ``demo`` and ``dev``; add ``export`` to the ``runs`` group registered before us."""
    runs = root.commands.get("runs")
    if not isinstance(runs, click.Group):
        raise RuntimeError("geo_pipeline.cli.ops must be registered after geo_pipeline.cli.runs")
    runs.add_command(export_cmd)
