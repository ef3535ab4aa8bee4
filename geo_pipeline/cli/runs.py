"""``geo-pipeline runs``: plan, create, list and show collection runs, and take a run from
collected to reconciled without Dagster (``wait``, ``analyse``, ``settle``) through the same
functions the brand_analysis and billing_reconciliation assets call."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from geo_pipeline.cli.output import POSITIVE, POSITIVE_SECONDS, emit_json, emit_table

if TYPE_CHECKING:
    from geo_pipeline.domain.plan import Plan
    from geo_pipeline.domain.precision import ChannelPlan, Prior
    from geo_pipeline.flows.create_run import PlanChecksFailed
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.db import Conn


def plan_from_file(path: Path, run_id: str | None, conn: Conn) -> Plan:
    """The plan and quote of a config file, through the one quote path (``quoted_plan``: the
    price versions in effect now, which `runs create`'s quote snapshot then freezes)."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config_loading import load_config_file
    from geo_pipeline.flows.create_run import quoted_plan

    return quoted_plan(conn, load_config_file(path), load_registry().capabilities(), run_id)


@click.group("runs")
def runs_group() -> None:
    """Collection runs."""


@runs_group.command("plan")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("--run-id", default=None, help="Plan for this run id (default: a new one).")
@click.option(
    "--target-half-width",
    type=click.FloatRange(0, 0.5, min_open=True, max_open=True),
    default=0.1,
    show_default=True,
    help="The repeats planner's goal: the 95 % half-width wanted for a brand's mention rate "
    "per channel (0.1 = plus or minus 10 points).",
)
@click.option(
    "--priors-from-monitor",
    "monitor",
    default=None,
    help="Estimate each channel's rate and question-to-question spread from this monitor's "
    "last runs (reads the database); without it a stated prior is used.",
)
@click.option("--json", "as_json", is_flag=True)
def plan_cmd(
    config: Path, run_id: str | None, target_half_width: float, monitor: str | None, as_json: bool
) -> None:
    """Validate CONFIG and show the plan, the quote and what its sample buys: the expected 95 %
    half-width of each channel's mention rate and the repeats a target needs. Quoted at the
    price versions in effect in the database, as `runs create` will freeze them. Writes
    nothing; without --run-id it names no run id (`runs create` assigns one)."""
    from geo_pipeline.analysis.precision import precision_display, precision_row
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config import normalise_and_validate
    from geo_pipeline.domain.config_loading import load_config_file
    from geo_pipeline.flows.create_run import quoted_plan
    from geo_pipeline.store import db as dbmod

    raw = load_config_file(config)
    normalise_and_validate(raw, load_registry().capabilities())  # every mistake, before any I/O
    with dbmod.connect() as conn:
        plan = quoted_plan(conn, raw, load_registry().capabilities(), run_id)
        conn.rollback()
    precision = precision_plans(plan, target_half_width, monitor)
    summary = plan.summary()
    if run_id is None:
        summary["run_id"] = None  # the placeholder the plan was expanded for is nobody's run
    if as_json:
        emit_json({**summary, "precision": [precision_row(p) for p in precision]})
        return
    _print_plan(summary)
    emit_table(
        [precision_display(precision_row(p)) for p in precision],
        title=f"precision of a brand's mention rate (repeats planner, target ±{target_half_width})",
    )


def precision_plans(plan: Plan, target: float, monitor: str | None) -> list[ChannelPlan]:
    """The repeats planner over this plan, with the monitor's earlier runs as priors if given."""
    from geo_pipeline.analysis.precision import channel_precision, planning_priors
    from geo_pipeline.store import db as dbmod

    priors: dict[str, Prior] = {}
    if monitor:
        with dbmod.connect() as conn:
            priors = planning_priors(conn, monitor)
    return channel_precision(plan, target, priors)


def _print_plan(summary: dict) -> None:
    from geo_pipeline.domain.words import money_with_minor

    rid = summary["run_id"] or "assigned by `geo-pipeline runs create`"
    click.echo(f"tenant {summary['tenant']}, run id: {rid}")
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
    click.echo(f"estimated max: {money_with_minor(q['estimated_max_minor'], q['currency'])}")


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
    """Persist snapshot, quote, run, batches and samples in one transaction; print the run id.

    Before it dispatches, the run's plan passes the same blocking checks as the sampling_plan
    asset (volume, identities, batches; per channel). A failing check leaves the run created but
    undispatched and exits 1 naming it; re-running the command after the fix re-checks the
    (confirmed, undispatched) run and dispatches it."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.cli.monitors import _actor
    from geo_pipeline.domain.config_loading import load_config_file
    from geo_pipeline.flows.create_run import PlanChecksFailed, create_run, dispatch_checked
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import runs as runstore

    refused: PlanChecksFailed | None = None
    with dbmod.connect() as conn:
        plan = plan_from_file(config, run_id, conn)
        try:
            rid, created = create_run(
                conn,
                plan,
                monitor_id=plan.config.monitor,
                confirm=not no_confirm,
                dispatch=not no_dispatch,
                # With `monitor:`, the config as written is the monitor's (editable by
                # `questions import`); another config than its saved one is a new revision.
                monitor_config=load_config_file(config) if plan.config.monitor else None,
                actor=_actor(None),
            )
            if not created and not no_dispatch and not no_confirm:
                dispatch_checked(conn, rid)  # a run left undispatched by a failed check
        except (runstore.RunConflict, ledger.BillingError) as exc:
            raise click.ClickException(str(exc)) from None
        except PlanChecksFailed as exc:
            refused = exc  # the run itself is kept: leave the block normally so it commits
    if refused is not None:
        raise click.ClickException(str(refused))
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
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import runs as runstore
    from geo_pipeline.store import status as statusmod

    with dbmod.connect() as conn:
        rows = runstore.list_runs(conn, tenant, limit)
        for r in rows:
            st = statusmod.run_status(conn, r["run_id"])
            r["status"] = st.overall
            r["analysing"] = st.analysing
            r["cancelled"] = st.cancelled
    if as_json:
        emit_json(rows)
    else:
        emit_table(
            [
                {**r, "status": f"{r['status']} (cancelled)" if r["cancelled"] else r["status"]}
                for r in rows
            ],
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
    """A run's status (with its reason) per layer and per channel, batches, quote, money and
    whether it is settled."""
    from geo_pipeline.domain.words import money_text, money_with_minor, status_text
    from geo_pipeline.flows.settle import run_money
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import runs as runstore
    from geo_pipeline.store import status as statusmod

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
        detail: dict[str, Any] = {
            "run": run,
            "status": st.as_dict(),
            "status_text": status_text(st.as_dict(), channels),
            "channels": channels,
            "batches": runstore.batches(conn, run_id),
            "quote_lines": runstore.quote_lines(conn, run["quote_id"]),
            "money": run_money(conn, run_id),
        }
    if as_json:
        emit_json(detail)
        return
    click.echo(
        f"run {run_id}  tenant {run['tenant_id']}"
        + (f"  (cancelled at {run['cancel_requested_at']})" if st.cancelled else "")
        + (f"  uncertain {st.uncertain}" if st.uncertain else "")
    )
    click.echo(f"status {detail['status_text']}")
    analysis = st.counts.analysis
    if any(analysis.values()):
        # Every analysis state, in the text too: review and failed need a person.
        from geo_pipeline.domain.words import ANALYSIS_WORDS

        # in the reports' words: an invalid answer is "invalid", never "failed" (issue #34)
        click.echo(
            "analysis: "
            + ", ".join(f"{ANALYSIS_WORDS.get(k, k)} {v}" for k, v in sorted(analysis.items()) if v)
            + ("  (answers for review: geo-pipeline review list)" if analysis.get("review") else "")
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
    emit_table(
        [
            {
                "batch": b.get("batch_no"),
                "size": b.get("size"),
                "platforms": b.get("platform_counts"),
            }
            for b in detail["batches"]
        ],
        title="batches",
    )
    m = detail["money"]
    cur = m["currency"]
    emit_table(
        [
            {
                "platform": q["platform"],
                "price version": q["price_version"],
                "item": q["item"],
                "mode": q["mode"],
                "unit price": money_text(int(q["unit_price_minor"]), cur),
                "quantity": q["quantity"],
                "amount": money_text(int(q["amount_minor"]), cur),
            }
            for q in detail["quote_lines"]
        ],
        title=f"quote (frozen at creation, {cur})",
    )
    click.echo(f"estimated max {money_with_minor(m['estimated_max_minor'], cur)}")
    click.echo(
        "money: "
        + ", ".join(
            f"{k} {money_text(m[f'{k}_minor'], cur)}"
            for k in ("reserved", "charged", "released", "refunded")
        )
    )
    if m["closed_at"] is not None:
        click.echo(f"settled: yes, closed at {m['closed_at']}")
        for line in m["reconciliation"]:
            click.echo(f"  {line}")
    else:
        click.echo(f"settled: no (settle with `geo-pipeline runs settle {run_id}`)")


# --------------------------------------------------------------------------- follow-up
def _known_run(conn: dbmod.Conn, run_id: str) -> dict[str, Any]:
    from geo_pipeline.store import runs as runstore

    try:
        return runstore.get_run(conn, run_id)
    except runstore.RunNotFound as exc:
        raise click.ClickException(str(exc)) from None


def _progress(st: Any) -> str:
    col = st.counts.collection
    done = col.get("completed", 0) + col.get("failed", 0)
    return f"{done} of {st.counts.total} samples terminal ({col.get('completed', 0)} completed)"


@runs_group.command("wait")
@click.argument("run_id")
@click.option(
    "--timeout",
    "timeout_s",
    type=POSITIVE_SECONDS,
    default=600.0,
    show_default=True,
    help="Give up (exit 1) after this many seconds.",
)
@click.option("--every", "every_s", type=POSITIVE_SECONDS, default=2.0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def wait_cmd(run_id: str, timeout_s: float, every_s: float, as_json: bool) -> None:
    """Wait until every sample of RUN_ID is terminal (completed or failed); exit 1 on timeout."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import status as statusmod

    deadline = time.monotonic() + timeout_s
    with dbmod.connect(autocommit=True) as conn:
        _known_run(conn, run_id)
        last = ""
        while True:
            st = statusmod.run_status(conn, run_id)
            if st.terminal or time.monotonic() >= deadline:
                break
            line = _progress(st)
            if line != last and not as_json:
                click.echo(f"run {run_id}: {line}", err=True)
                last = line
            time.sleep(min(every_s, max(0.0, deadline - time.monotonic())))
    if as_json:
        emit_json(st.as_dict())
    else:
        click.echo(f"run {run_id}: {st.overall}; {_progress(st)}")
    if not st.terminal:
        raise click.ClickException(
            f"run {run_id} is still collecting after {timeout_s:g} s; are the relay, a worker "
            "and the sweeper running against this database and Redis?"
        )


@runs_group.command("analyse")
@click.argument("run_id")
@click.option("--channel", default=None, help="Only this channel (platform__device).")
@click.option("--json", "as_json", is_flag=True)
def analyse_cmd(run_id: str, channel: str | None, as_json: bool) -> None:
    """Analyse RUN_ID's stored answers for brand mentions and refresh its analyst tables: what
    the brand_analysis and brand_visibility assets do, for runs Dagster does not watch.
    Idempotent; answers collected later are analysed by the next call."""
    from geo_pipeline.analysis import analyse_run
    from geo_pipeline.domain.words import analysis_text
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import status as statusmod

    with dbmod.connect() as conn:
        _known_run(conn, run_id)
        summary = analyse_run(conn, run_id, channel=channel)
        conn.commit()
        st = statusmod.run_status(conn, run_id)
    if as_json:
        emit_json({**summary.as_dict(), "status": st.as_dict()})
        return
    click.echo(f"run {run_id}: {analysis_text(summary.as_dict())}")
    waiting = summary.waiting_evidence + summary.waiting_answer
    if waiting:
        click.echo(
            f"  {waiting} samples have nothing to analyse yet ({summary.waiting_evidence} "
            f"evidence not ready, {summary.waiting_answer} without an answer): run it again "
            "when they are collected"
        )
    if summary.review:
        click.echo("  answers for review: geo-pipeline review list")


@runs_group.command("settle")
@click.argument("run_id")
@click.option(
    "--no-statements",
    is_flag=True,
    help="Do not fetch the platforms' fee statements; reconcile against those already imported.",
)
@click.option("--json", "as_json", is_flag=True)
def settle_cmd(run_id: str, no_statements: bool, as_json: bool) -> None:
    """Close RUN_ID (release the unused reservation), fetch the fee statements of the days its
    fees fall on and reconcile: what the billing_reconciliation asset does. Exits 1 while the
    run is still collecting (it is reconciled, not closed); settling again is safe."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.flows.settle import describe, settle_run
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import status as statusmod

    with dbmod.connect() as conn:
        run = _known_run(conn, run_id)
        settled = settle_run(conn, run_id, registry=None if no_statements else load_registry())
        conn.commit()
        st = statusmod.run_status(conn, run_id)
    if as_json:
        emit_json({**describe(settled), "status": st.as_dict()})
    else:
        _print_settlement(run_id, settled, run.get("currency"))
    if settled.closed is None:
        why = settled.close_refused or f"it is still collecting: {_progress(st)}"
        raise click.ClickException(
            f"run {run_id} is not closed: {why}. Wait (`geo-pipeline runs wait {run_id}`), "
            "then settle again."
        )


def _print_settlement(run_id: str, settled: Any, currency: str | None) -> None:
    from geo_pipeline.domain.money import Money
    from geo_pipeline.domain.words import money_exact_text, reconciliation_text

    if settled.closed is not None:
        rel = settled.closed.released
        state = "closed now" if settled.closed.closed_now else "was already closed"
        click.echo(
            f"run {run_id} {state}; released {rel.format()} ({rel.amount_minor} minor units)"
        )
    for imp in settled.imported:
        click.echo(
            f"statement {imp.platform} {imp.statement_date}: {imp.lines} lines"
            + ("" if imp.imported_now else " (already imported)")
        )
    for missing in settled.unavailable:
        click.echo(f"statement not available (its lines stay pending): {missing}")
    s = settled.summary
    cur = (s.currency or currency or "CNY").strip()

    def money(minor: int) -> str:
        return f"{Money(minor, cur).format()} ({minor} minor units)"

    counts = ", ".join(f"{k} {v}" for k, v in s.counts.items() if v) or "no fees"
    click.echo(f"reconciliation: {s.lines} upstream tasks: {counts}")
    theirs = money_exact_text(s.theirs_total_minor, s.theirs_total_exact_minor, cur)
    click.echo(
        f"  ours {money(s.ours_total_minor)}, theirs {theirs} ({s.theirs_total_minor} minor units)"
    )
    if s.counts.get("pending"):
        click.echo(
            f"  pending {money(s.pending_ours_minor)}: no statement for these yet; "
            f"`geo-pipeline runs settle {run_id}` later fetches it"
        )
    for line in reconciliation_text(
        s.unexplained_difference_minor,
        s.explained_difference_minor,
        0,
        cur,
        absolute_minor=s.unexplained_absolute_minor,
        unexplained_lines=s.unexplained_lines,
    ):
        click.echo(f"  {line}")
    if not s.clean:
        click.echo(f"  needs review: `geo-pipeline billing reconcile {run_id}` lists the lines")


def register(root: click.Group) -> None:
    root.add_command(runs_group)
