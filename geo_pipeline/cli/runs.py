"""``geo-pipeline runs``: plan, create, list and show collection runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from geo_pipeline.billing import ledger
from geo_pipeline.cli.output import POSITIVE, emit_json, emit_table
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import load_config_file
from geo_pipeline.domain.plan import Plan
from geo_pipeline.flows.create_run import create_run, plan_run
from geo_pipeline.store import db as dbmod
from geo_pipeline.store import runs as runstore
from geo_pipeline.store import status as statusmod


def plan_from_file(path: Path, run_id: str | None) -> Plan:
    return plan_run(load_config_file(path), load_registry().capabilities(), run_id)


@click.group("runs")
def runs_group() -> None:
    """Collection runs."""


@runs_group.command("plan")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("--run-id", default=None, help="Plan for this run id (default: a new one).")
@click.option("--json", "as_json", is_flag=True)
def plan_cmd(config: Path, run_id: str | None, as_json: bool) -> None:
    """Validate CONFIG and show the plan and quote. Writes nothing."""
    plan = plan_from_file(config, run_id)
    summary = plan.summary()
    if as_json:
        emit_json(summary)
        return
    _print_plan(summary)


def _print_plan(summary: dict) -> None:
    click.echo(f"run {summary['run_id']} for tenant {summary['tenant']}")
    click.echo(f"samples: {summary['formula']} (Q x T x R)")
    for dup in summary["duplicates_removed"]:
        click.echo(f"  note: {dup}")
    emit_table(
        [{"channel": k, "samples": v} for k, v in summary["channels"].items()],
        title="samples per channel",
    )
    emit_table(
        [
            {"batch": b["batch_no"], "size": b["size"], "platforms": b["platform_counts"]}
            for b in summary["batches"]
        ],
        title=f"batches (cap {summary['submit_cap']})",
    )
    q = summary["quote"]
    emit_table(
        q["lines"],
        [
            "platform",
            "price_version",
            "item",
            "mode",
            "unit_price_minor",
            "quantity",
            "amount_minor",
        ],
        title="quote (minor units)",
    )
    click.echo(f"estimated max: {q['estimated_max_minor']} {q['currency']} (minor units)")


@runs_group.command("create")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("--run-id", default=None, help="Use this run id; re-creating it is a no-op.")
@click.option(
    "--no-confirm",
    is_flag=True,
    help="Record the plan and its estimate only: reserve no money and queue no work "
    "(confirm later with `geo-pipeline billing confirm RUN_ID`).",
)
@click.option("--no-dispatch", is_flag=True, help="Persist the plan without queuing work.")
@click.option("--json", "as_json", is_flag=True)
def create_cmd(
    config: Path, run_id: str | None, no_confirm: bool, no_dispatch: bool, as_json: bool
) -> None:
    """Persist snapshot, quote, run, batches and samples in one transaction; print the run id."""
    plan = plan_from_file(config, run_id)
    with dbmod.connect() as conn:
        try:
            rid, created = create_run(
                conn,
                plan,
                monitor_id=plan.config.monitor,
                confirm=not no_confirm,
                dispatch=not no_dispatch,
            )
        except (runstore.RunConflict, ledger.BillingError) as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(
            {
                "run_id": rid,
                "created": created,
                "samples": len(plan.samples),
                "batches": len(plan.batches),
            }
        )
    else:
        click.echo(rid if created else f"{rid} (already existed with this config; nothing written)")


@runs_group.command("list")
@click.option("--tenant", default=None)
@click.option("--limit", default=50, type=POSITIVE, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def list_cmd(tenant: str | None, limit: int, as_json: bool) -> None:
    """Recent runs with their aggregate status."""
    with dbmod.connect() as conn:
        rows = runstore.list_runs(conn, tenant, limit)
        for r in rows:
            st = statusmod.run_status(conn, r["run_id"])
            r["status"] = st.overall
            r["analysing"] = st.analysing
    if as_json:
        emit_json(rows)
    else:
        emit_table(
            rows,
            [
                "run_id",
                "tenant_id",
                "sample_count",
                "status",
                "created_at",
                "estimated_max_minor",
                "currency",
            ],
            title="runs",
        )


@runs_group.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
def show_cmd(run_id: str, as_json: bool) -> None:
    """A run's status per layer and per channel, batches and quote."""
    with dbmod.connect() as conn:
        try:
            run = runstore.get_run(conn, run_id)
        except runstore.RunNotFound as exc:
            raise click.ClickException(str(exc)) from None
        st = statusmod.run_status(conn, run_id)
        channels: dict[str, dict[str, Any]] = {
            ch: statusmod.partition_status(conn, run_id, ch).as_dict()
            for ch in statusmod.channels_of_run(conn, run_id)
        }
        detail = {
            "run": run,
            "status": st.as_dict(),
            "channels": channels,
            "batches": runstore.batches(conn, run_id),
            "quote_lines": runstore.quote_lines(conn, run["quote_id"]),
        }
    if as_json:
        emit_json(detail)
        return
    click.echo(
        f"run {run_id}  tenant {run['tenant_id']}  status {st.overall}"
        + ("  (analysing)" if st.analysing else "")
        + (f"  uncertain {st.uncertain}" if st.uncertain else "")
    )
    rows = [
        {
            "channel": ch,
            "overall": d["overall"],
            "total": d["total"],
            **{f"col.{k}": v for k, v in d["collection"].items()},
            **{f"ev.{k}": v for k, v in d["evidence"].items()},
        }
        for ch, d in channels.items()
    ]
    cols = sorted({k for r in rows for k in r}, key=lambda k: (k != "channel", k))
    emit_table(rows, cols, title="per channel")
    if st.counts.evidence_reasons:
        click.echo(
            "missing evidence: "
            + ", ".join(f"{k} x{v}" for k, v in st.counts.evidence_reasons.items())
        )
    if st.counts.failure_reasons:
        click.echo(
            "failures: " + ", ".join(f"{k} x{v}" for k, v in st.counts.failure_reasons.items())
        )


def register(root: click.Group) -> None:
    root.add_command(runs_group)
