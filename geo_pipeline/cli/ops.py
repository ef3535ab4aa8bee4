"""``geo-pipeline demo``, ``geo-pipeline dev`` and ``geo-pipeline runs export``.

``demo`` is the README's "run the main job": services from the environment or embedded ones,
the simulator, relay, workers and sweeper as supervised subprocesses, one run of the bundled
example config, progress bars, and the run's report. ``dev`` adds the Dagster webserver and
daemon on the same PostgreSQL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from geo_pipeline.cli.output import PORT, POSITIVE, console, emit_json, emit_table
from geo_pipeline.domain.vocabulary import EXPORT_FORMATS

if TYPE_CHECKING:
    from geo_pipeline.ops import report as reportmod


@click.command("export")
@click.argument("run_id")
@click.option(
    "--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="json", show_default=True
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
    from geo_pipeline.ops import export as exportmod
    from geo_pipeline.ops import report as reportmod
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import runs as runstore

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


# The label of the progress total: the main run's channels, not the runs beside it (sixth read:
# "all channels 50/50" sat above bars totalling 60).
MAIN_RUN_TOTAL = "main run, all channels"


def _local_link_for() -> reportmod.LinkFor | None:
    """With a local evidence directory (the demo's default) the report can link files directly;
    with object storage it shows keys and the authorised download command instead (R20)."""
    from geo_pipeline.ops import report as reportmod

    return reportmod.local_link_for()


def _demo_options(f: Any) -> Any:
    opts = [
        click.option(
            "--state-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path(".geo_state"),
            show_default=True,
            help="Where the demo keeps its data; a second run reuses it.",
        ),
        click.option(
            "--reset",
            is_flag=True,
            help="Remove the state directory (and the demo's "
            "own database and Redis prefix on local servers) first.",
        ),
        click.option(
            "--embedded",
            is_flag=True,
            help="Always start embedded PostgreSQL and "
            "Redis, even when the environment or local ports offer some "
            "(same as GEO_FORCE_EMBEDDED=1).",
        ),
        click.option(
            "--workers", default=2, type=POSITIVE, show_default=True, help="Worker processes."
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@click.command("demo")
@_demo_options
@click.option(
    "--timeout",
    "timeout_s",
    default=300.0,
    show_default=True,
    help="Seconds without progress (no sample changing state) before the demo stops waiting "
    "for a run and reports what there is.",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Collection config (default: the bundled example).",
)
@click.option(
    "--simulator-profile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Simulator profile (default: the bundled one, with faults).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="No progress bars; print the report as JSON at the end."
)
@click.option(
    "--scraped/--no-scraped",
    default=True,
    show_default=True,
    help="Also run the scraped channel (chatgpt_cloro through the simulator's cloro profile).",
)
@click.option(
    "--browser/--no-browser",
    default=True,
    show_default=True,
    help="Also run the browser channel (deepseek_web, desktop and mobile) where Chromium is.",
)
def demo_cmd(
    state_dir: Path,
    reset: bool,
    embedded: bool,
    workers: int,
    timeout_s: float,
    config: Path | None,
    simulator_profile: Path | None,
    as_json: bool,
    scraped: bool,
    browser: bool,
) -> None:
    """Run the main job end to end on embedded defaults and print the run's report."""
    from geo_pipeline.ops import demo

    opts = demo.DemoOptions(
        state_dir=state_dir,
        reset=reset,
        embedded=embedded,
        workers=workers,
        timeout_s=timeout_s,
        config=config,
        simulator_profile=simulator_profile,
        scraped=scraped,
        browser=browser,
    )
    ui = _Ui(quiet=as_json)
    try:
        result = _run_demo(opts, ui)
    except demo.DemoError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(result)
    unfinished = [
        r["run_id"]
        for r in (result, result.get("scraped") or result, result.get("browser") or result)
        if not r["status"]["terminal"]
    ]
    if unfinished:
        raise click.ClickException(
            f"run {unfinished[0]} did not finish within {timeout_s:.0f}s; the report above "
            "shows where it stands (logs in " + str(state_dir / "logs") + ")"
        )


@click.command("dev")
@_demo_options
@click.option("--port", default=3000, type=PORT, show_default=True, help="Dagster webserver port.")
def dev_cmd(state_dir: Path, reset: bool, embedded: bool, workers: int, port: int) -> None:
    """The demo's services plus the Dagster webserver and daemon on the same PostgreSQL; runs
    until Ctrl-C."""
    from geo_pipeline.ops import demo, dev
    from geo_pipeline.ops.supervisor import ProcessFailed, Supervisor, sigterm_as_keyboard_interrupt
    from geo_pipeline.store import db as dbmod

    opts = demo.DemoOptions(
        state_dir=state_dir,
        reset=reset,
        embedded=embedded,
        workers=workers,
        dagster=True,
        dagster_port=port,
    )
    ui = _Ui(quiet=False)
    try:
        with (
            sigterm_as_keyboard_interrupt(),
            demo.services(opts, ui.say) as stack,
            Supervisor(stack.state_dir / "logs", stack.env, say=ui.say) as sup,
        ):
            # Start-up overlaps what does not depend on each other (issue 36: the UI in <= 20
            # s): Dagster's setup runs while the pipeline's processes start; the chart server
            # comes up while the webserver loads the code.
            setup = dev.begin_setup(stack)
            demo.start_pipeline(sup, stack, opts, restart=dev.RESTART)
            dev.start_analyst_guard(sup, stack, restart=dev.RESTART)
            dev.start_chart_server(sup, stack, restart=dev.RESTART, wait=False)
            url = dev.start_dagster(sup, stack, port, restart=dev.RESTART, setup=setup)
            dev.wait_for_chart_server(sup)
            ui.say(
                f"Dagster UI: {url}; {_fund_launchpad(stack.database_url)}  (logs in "
                f"{stack.state_dir / 'logs'}; Ctrl-C stops all)"
            )
            # One unwrapped line a person can paste into another shell (passwords masked, D2:
            # a URL that had one came from the environment, which the person already has).
            click.echo(
                f"export GEO_DATABASE_URL='{dbmod.redact(stack.database_url)}' "
                f"GEO_REDIS_URL='{dbmod.redact(stack.redis_url)}' "
                f"GEO_EVIDENCE_URL='{stack.evidence_url}' "
                f"GEO_REDIS_PREFIX='{stack.env['GEO_REDIS_PREFIX']}' "
                f"GEO_SIMULATOR_URL='{stack.simulator_url}' "
                f"GEO_CHART_URL='{stack.env.get('GEO_CHART_URL', '')}' "
                # The instance's own variables (the repo's dagster.yaml reads DAGSTER_PG_*).
                + " ".join(f"{k}='{v}'" for k, v in dev.export_env(stack.env).items())
            )
            sys.stdout.flush()
            dev.supervise(sup, stack)
    except KeyboardInterrupt:
        ui.say("stopped")
    except (demo.DemoError, ProcessFailed) as exc:
        raise click.ClickException(str(exc)) from None


def _fund_launchpad(database_url: str) -> str:
    """dev's deposit for the launchpad's pre-filled example (idempotent), as one phrase of its
    start-up line; a refusal (e.g. the tenant is billed in another currency) is said, not fatal:
    the launchpad then shows the same refusal with what to do."""
    from geo_pipeline.billing.errors import BillingError
    from geo_pipeline.defs.launchpad import fund_launchpad_example
    from geo_pipeline.store import db as dbmod

    try:
        with dbmod.connect(database_url) as conn:
            return fund_launchpad_example(conn).line()
    except BillingError as exc:
        return f"the launchpad's example tenant was not funded: {exc}"


class _Ui:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.console = console(stderr=quiet)

    def say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, highlight=False, markup=False)


def _run_demo(opts: Any, ui: _Ui) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from geo_pipeline.ops import demo
    from geo_pipeline.ops.supervisor import ProcessFailed, Supervisor, sigterm_as_keyboard_interrupt

    t0 = time.monotonic()
    try:
        with (
            sigterm_as_keyboard_interrupt(),
            demo.services(opts, ui.say) as stack,
            Supervisor(stack.state_dir / "logs", stack.env) as sup,
        ):
            demo.start_pipeline(sup, stack, opts)
            ui.say(
                f"simulator at {stack.simulator_url}; relay, sweeper and {opts.workers} "
                f"workers started (logs in {stack.state_dir / 'logs'})"
            )
            run_id, n = demo.create_demo_run(stack, opts)
            ui.say(f"created run {run_id}: {n} samples (deposit covers its quote)")
            beside = demo.create_extra_runs(stack, opts, run_id, ui.say)
            progress = Progress(
                TextColumn("{task.description:<24}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[extra]}"),
                TimeElapsedColumn(),
                console=ui.console,
                disable=ui.quiet,
                transient=False,
            )
            tasks: dict[str, Any] = {}

            def on_progress(
                st: dict[str, Any], channels: dict[str, dict[str, Any]], main: bool = True
            ) -> None:
                # The total is the main run's (named so: the bars below it include the runs
                # beside it, each showing its own channels).
                rows = sorted(channels.items())
                for ch, c in [(MAIN_RUN_TOTAL, st), *rows] if main else rows:
                    done = c["collection"].get("completed", 0) + c["collection"].get("failed", 0)
                    extra = f"failed {c['collection'].get('failed', 0)}"
                    if c["uncertain"]:
                        extra += f", uncertain {c['uncertain']}"
                    if ch not in tasks:
                        tasks[ch] = progress.add_task(ch, total=c["total"], extra=extra)
                    progress.update(tasks[ch], completed=done, extra=extra)

            def on_beside_progress(st: dict[str, Any], channels: dict[str, dict[str, Any]]) -> None:
                on_progress(st, channels, main=False)

            waited: list[tuple[str, str, dict[str, Any]]] = []
            with progress:
                st = demo.wait_for_run(stack, sup, run_id, opts.timeout_s, on_progress)
                for kind, rid in beside:
                    waited.append(
                        (
                            kind,
                            rid,
                            demo.wait_for_run(stack, sup, rid, opts.timeout_s, on_beside_progress),
                        )
                    )
            followups: dict[str, dict[str, Any]] = {}
            for rid, s in [(run_id, st), *((r, s) for _, r, s in waited)]:
                if s["terminal"]:
                    followups[rid] = demo.finish_run(stack, rid, ui.say)
                else:
                    followups[rid] = {"skipped": "run not finished"}
            faults = demo.read_fault_counts(stack)  # before the simulator stops
            codes = sup.stop_all()
            ui.say(
                "stopped simulator, relay, sweeper and workers: "
                + ", ".join(f"{k}={v}" for k, v in codes.items())
            )
            rep, paths = demo.write_reports(stack, run_id)
            extra_reps = [(kind, *demo.write_reports(stack, rid)) for kind, rid, _ in waited]
    except KeyboardInterrupt:
        raise click.ClickException(
            "interrupted: every process the demo started was stopped"
        ) from None
    except ProcessFailed as exc:
        raise click.ClickException(str(exc)) from None
    if not ui.quiet:
        _print_report(rep, paths, ui)
        for _, xrep, xpaths in extra_reps:
            _print_report(xrep, xpaths, ui)
        if stack.browser_skipped:
            ui.say(f"browser channel skipped: {stack.browser_skipped}")
        for line in demo.faults_text(faults) if faults is not None else []:
            ui.say(line)
        ui.say(f"demo took {time.monotonic() - t0:.1f}s")
    out = _run_result(rep, paths, followups[rep.run["run_id"]])
    for kind, xrep, xpaths in extra_reps:
        out[kind] = _run_result(xrep, xpaths, followups[xrep.run["run_id"]])
    if stack.browser_skipped:
        out["browser_skipped"] = stack.browser_skipped
    out["faults_injected"] = faults
    out.update(
        sources=stack.sources,
        database_url=stack.database_url,
        seconds=round(time.monotonic() - t0, 1),
    )
    return out


def _run_result(rep: Any, paths: dict[str, Path], followup: dict[str, Any]) -> dict[str, Any]:
    """One run of the demo, as its JSON output shows it."""
    return {
        "run_id": rep.run["run_id"],
        "status": rep.status,
        "channels": rep.channels,
        "mention_rates": rep.mention_rates,
        **rep.ui_api,  # fan-out, citation gap, UI-vs-API agreement (issue 31)
        "money": rep.money,
        "followup": followup,
        "reports": {k: str(v) for k, v in paths.items()},
    }


def _rate(r: dict[str, Any]) -> str:
    from geo_pipeline.domain.words import rate_text

    return rate_text(r["mention_rate"], r["mention_rate_lower"], r["mention_rate_upper"], r["n"])


def _print_report(rep: Any, paths: dict[str, Path], ui: _Ui) -> None:
    from geo_pipeline.domain import words

    st = rep.status
    c = ui.console
    from rich.rule import Rule

    # a rule as wide as a terminal, but never 4096 characters into a pipe or a file
    c.print(Rule(f"report of run {rep.run['run_id']}"), width=min(c.width, words.RULE_MAX))
    c.print(f"status: {st.get('text') or st['overall']}", markup=False)
    c.print(
        f"samples {st['total']}, completed {st['collection'].get('completed', 0)}, "
        f"failed {st['collection'].get('failed', 0)}, uncertain {st['uncertain']}"
    )
    if st.get("invalid_answers"):
        c.print(
            "invalid answers (in no rate): "
            + words.invalid_answers_text(st["invalid_answers"], st.get("invalid_in_review", 0)),
            markup=False,
        )
    ev = st["evidence"]
    emit_table(
        [{k: ev.get(k, 0) for k in ("stored", "partial", "failed", "pending")}],
        title="evidence completeness",
    )
    for line in words.evidence_words_text(ev):
        c.print(line, markup=False)
    if st["evidence_reasons"]:
        c.print(
            "why evidence is partial or failed: "
            + "; ".join(
                words.evidence_reason_text(k, v) for k, v in st["evidence_reasons"].items()
            ),
            markup=False,
        )
    if ev.get("pending"):
        c.print(words.PENDING_SCREENSHOT_NOTE, markup=False)
    if st["failure_reasons"]:
        c.print(
            "failed samples: " + ", ".join(f"{k} x{v}" for k, v in st["failure_reasons"].items()),
            markup=False,
        )
    emit_table(
        [
            {
                "channel": ch,
                "access": d.get("access", words.ACCESS_UNKNOWN),
                "status": d["overall"],
                "samples": d["total"],
                "completed": d["collection"].get("completed", 0),
                "failed": d["collection"].get("failed", 0),
                "evidence stored": d["evidence"].get("stored", 0),
            }
            for ch, d in rep.channels.items()
        ],
        title="per channel",
    )
    # each channel's status with its reason (the table's status column is the bare word)
    for ch, d in rep.channels.items():
        if words.channel_status_said(d):
            c.print(f"channel status: {words.channel_status_text(ch, d)}", markup=False)
    shown = [str(st["overall"])] + [str(d["overall"]) for d in rep.channels.values()]
    for line in words.status_words_text(shown):
        c.print(line, markup=False)
    c.print(words.access_text(), markup=False)
    for ch, d in rep.channels.items():
        label = words.channel_label(ch, str(d.get("access", words.ACCESS_UNKNOWN)))
        c.print(f"channel: {label}", markup=False)
    if rep.channels_without_screenshots:
        c.print(words.no_screenshots_text(rep.channels_without_screenshots), markup=False)
    if rep.mention_rates:
        emit_table(
            [
                {
                    "channel": r["channel"],
                    "access": r.get("access", words.ACCESS_UNKNOWN),
                    "brand": r["brand"] + (" *" if r["is_target"] else ""),
                    "samples": r["samples"],
                    "n": r["n"],
                    "mentions": r["mentions"],
                    "rate (95 % interval, n)": _rate(r),
                    "interval": r.get("mention_rate_interval") or "",
                    "effective n": r.get("n_effective"),
                    "invalid": r["invalid_samples"],
                    "analysing": r["analysing_samples"],
                    "review": r["review_samples"],
                    "failed": r.get("failed_samples", 0),
                }
                for r in rep.mention_rates
            ],
            title=f"mention rates (* = monitored brand; from {rep.mention_rates_source})",
        )
        # only the columns this table shows (average rank and citation rate are in the HTML/JSON)
        for line in words.definitions_text(words.TERMINAL_DEFINED):
            c.print(line, markup=False)
        from geo_pipeline.ops.report import channel_modes

        for line in words.modes_text(channel_modes(rep.samples)):
            c.print(f"modes pooled per channel: {line}", markup=False)
    else:
        c.print("mention rates: not available yet (analysing, not 'not mentioned')")
    if rep.trend_note:
        c.print(rep.trend_note, markup=False)
    _print_ui_api(rep, ui)
    m = rep.money
    d = m["display"]
    emit_table(
        [
            {
                "quoted max": d["quoted_max"],
                "reserved": d["reserved"],
                "charged": d["charged"],
                "released": d["released"],
                "refunded": d["refunded"],
            }
        ],
        title=f"money ({m['currency']})",
    )
    c.print(m["quote_note"], markup=False)
    for line in m["reconciliation_words"]:
        c.print(f"reconciliation: {line}", markup=False)
    if m["reconciliation"]:
        emit_table(
            words.reconciliation_rows(m["reconciliation"], str(m["currency"]).strip()),
            words.RECONCILIATION_COLUMNS,
            title="reconciliation lines by classification (`geo-pipeline billing reconcile "
            "RUN_ID` lists each line that differs; the JSON report has the minor units)",
        )
    c.print(f"reports: {paths['html']}  {paths['csv']}  {paths['json']}", markup=False)


def _print_ui_api(rep: Any, ui: _Ui) -> None:
    """Scraped vs API apart (issue 31): the fan-out, the citation gap and UI-vs-API agreement,
    in the words the HTML page and the Dagster metadata use (analysis/ui_api.py)."""
    from geo_pipeline.analysis import ui_api

    shown = ui_api.display_rows(rep.ui_api) if rep.ui_api else {}
    for name, title in ui_api.SECTION_TITLES.items():
        rows = shown.get(name) or []
        if rows:
            emit_table(rows, title=title.lower())
        else:
            ui.console.print(f"{title.lower()}: none in this run", markup=False)
        ui.console.print(f"{title.lower()}: {ui_api.SECTION_NOTES[name]}", markup=False)


@click.command("retention")
@click.option(
    "--apply",
    "apply_",
    is_flag=True,
    help="Delete for real (default: a dry run that only lists what would go).",
)
@click.option(
    "--limit",
    default=500,
    type=POSITIVE,
    show_default=True,
    help="At most this many runs per pass.",
)
@click.option("--json", "as_json", is_flag=True)
def retention_cmd(apply_: bool, limit: int, as_json: bool) -> None:
    """Remove raw evidence, raw answer text and the execution log of runs past their tenant's
    retention windows (D9), published outbox rows and settled dead letters; aggregates, analysis
    and the ledger stay. Dry run unless --apply."""
    from geo_pipeline.evidence.backend import archive_from_url
    from geo_pipeline.flows import retention
    from geo_pipeline.settings import settings
    from geo_pipeline.store import db as dbmod

    try:
        archive = archive_from_url()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    # Expiring raw text and the transition log needs the owner; the service role's URL still
    # runs the rest of the pass and the report says what it was refused.
    with dbmod.connect(settings().retention_database_url) as conn:
        rep = retention.apply_retention(
            conn, archive, retention.database_now(conn), dry_run=not apply_, limit=limit
        )
    if as_json:
        emit_json(rep.as_dict())
        return
    emit_table(
        [{k: v for k, v in r.as_dict().items() if k != "object_keys"} for r in rep.runs],
        [
            "run_id",
            "tenant_id",
            "retention_days",
            "objects",
            "bytes",
            "answers",
            "attempts",
            "transitions",
        ],
        title="removed" if apply_ else "would remove (dry run; --apply to delete)",
    )
    click.echo(
        f"{len(rep.runs)} runs, {rep.objects} objects ({rep.bytes} bytes), {rep.answers} raw "
        f"answer texts, {rep.attempts} attempts, {rep.transitions} transitions; "
        f"{rep.outbox} published outbox rows, {rep.dead_letters} dead letters"
    )
    for note in rep.refused:
        click.echo(f"refused: {note}", err=True)


def register(root: click.Group) -> None:
    """Add ``demo`` and ``dev``; add ``export`` to the ``runs`` group registered before us."""
    runs = root.commands.get("runs")
    if not isinstance(runs, click.Group):
        raise RuntimeError("geo_pipeline.cli.ops must be registered after geo_pipeline.cli.runs")
    runs.add_command(export_cmd)
    root.add_command(demo_cmd)
    root.add_command(dev_cmd)
    root.add_command(retention_cmd)
