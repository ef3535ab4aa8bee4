"""``geo-pipeline runs restance``: stance per mention re-computed with the current stance detector
version (issue 37 item 5, docs/stance.md) over runs already analysed -- history re-computed
without re-detecting mentions; older versions' rows stay. The same function as analysis uses
(``analysis.stance.restance_run``)."""

from __future__ import annotations

import click

from geo_pipeline.cli.output import emit_json, emit_table


@click.command("restance")
@click.argument("run_ids", nargs=-1)
@click.option("--monitor", "monitor_id", default=None, help="Every run of this monitor.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def restance_cmd(run_ids: tuple[str, ...], monitor_id: str | None, as_json: bool) -> None:
    """Compute the current stance version for RUN_IDS (or every run of --monitor) where their
    current analyses have none yet. Idempotent: a second call writes nothing."""
    from geo_pipeline.analysis.stance import restance_run
    from geo_pipeline.domain.stance import BASELINE
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import runs as runstore
    from geo_pipeline.store.queries import Q

    if bool(run_ids) == bool(monitor_id):
        raise click.UsageError("give RUN_ID(s) or --monitor MONITOR (one of them)")
    out = []
    with dbmod.connect() as conn:
        ids = list(run_ids)
        if monitor_id:
            with conn.cursor() as cur:
                cur.execute(Q("monitors.runs"), {"monitor_id": monitor_id, "limit": 100_000})
                ids = [str(r["run_id"]) for r in cur.fetchall()]
            conn.commit()
            if not ids:
                raise click.ClickException(f"monitor {monitor_id!r} has no run")
        for run_id in ids:
            try:
                s = restance_run(conn, run_id, BASELINE)
            except runstore.RunNotFound as exc:
                raise click.ClickException(str(exc)) from None
            out.append(s.__dict__)
    if as_json:
        emit_json(out)
        return
    emit_table(out, ["run_id", "stance_version", "answers", "stances"], title="restance")


def register(root: click.Group) -> None:
    """``restance`` under ``runs`` (beside ``runs analyse``)."""
    runs = root.commands["runs"]
    assert isinstance(runs, click.Group), "cli/runs.py registers the runs group first"
    runs.add_command(restance_cmd)
