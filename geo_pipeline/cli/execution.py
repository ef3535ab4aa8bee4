"""``geo-pipeline worker | relay | sweeper`` (separate processes, each scaled and killed on its
own) and the operator commands ``runs cancel``, ``samples uncertain``, ``samples resolve``.

Long-running commands check PostgreSQL (migrated) and Redis before anything else, log a
start-up line saying where they are connected (passwords redacted), which streams they serve and
where their metrics are, take ``--metrics-port`` (Prometheus /metrics), stop cleanly on SIGTERM
and print what they held / did as JSON on stdout when they exit.
"""

from __future__ import annotations

import getpass
import logging
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

from geo_pipeline.cli.output import PORT, POSITIVE, POSITIVE_SECONDS, SECONDS, emit_json, emit_table
from geo_pipeline.domain.vocabulary import BULK_POLICIES

if TYPE_CHECKING:
    from geo_pipeline.runtime import preflight

log = logging.getLogger("geo_pipeline.process")

METRICS_PORT_HELP = "Serve /metrics here (0: a free port, named on the start-up line)."


def _metrics(port: int | None) -> str:
    """Serve /metrics on ``port``; returns where, for the start-up line. Port 0 takes one the
    kernel picks and the line names it: a port chosen free by a caller and bound later by this
    process can be taken in between (tests running in parallel did)."""
    from geo_pipeline.settings import settings as app_settings

    if port is None:
        return "off (--metrics-port PORT to serve /metrics)"
    from geo_pipeline.observability.metrics import serve

    bound = serve(port)
    return f"http://{app_settings().metrics_addr}:{bound}/metrics"


def _log_level() -> int:
    """GEO_LOG_LEVEL (settings.log_level) as a logging level."""
    from geo_pipeline.settings import settings as app_settings

    return int(getattr(logging, app_settings().log_level.upper()))


def _preflight() -> preflight.Services:
    """PostgreSQL migrated and Redis answering, before the first side effect; else exit 3
    with what to do (geo_pipeline.cli.main turns PreflightError into that message)."""
    from geo_pipeline.runtime import preflight
    from geo_pipeline.streams.keys import namespace, redis_url

    return preflight.check(redis_url=redis_url(), namespace=namespace())


def _started(
    process: str, services: preflight.Services, streams: list[str], metrics: str, **extra: Any
) -> None:
    """One start-up line, written at once (not when the log buffer fills)."""
    from geo_pipeline.observability import logs

    logs.event(
        log,
        f"{process}.starting",
        instance=f"{process}:{socket.gethostname()}:{os.getpid()}",
        **services.as_fields(),
        streams=streams,
        metrics=metrics,
        **extra,
    )
    logs.flush()


def _redis_sync() -> Any:
    import redis as redis_lib

    from geo_pipeline.streams.keys import redis_url

    return redis_lib.Redis.from_url(redis_url(), decode_responses=True)


def _registry() -> Any:
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.catalogue import RegistryError

    try:
        return load_registry()
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc


def _build_connectors(
    registry: Any, platforms: list[str], *, db_url: str | None = None, owner: str = "cli"
) -> tuple[dict[str, Any], Any]:
    """One connector per platform from the registry, all sharing one pooled HTTP client whose
    transport is the fast one (connectors.http.new_client; about half httpx's own CPU cost).
    Browser platforms lease their accounts from ``geo.accounts`` as ``owner`` (issue #32)."""
    from geo_pipeline.connectors.http import new_client
    from geo_pipeline.worker.browser import build_connectors

    client = new_client()
    return build_connectors(registry, platforms, client, db_url=db_url, owner=owner), client


def _actor(actor: str | None) -> str:
    if actor:
        return actor if actor.startswith("operator:") else f"operator:{actor}"
    try:
        return f"operator:{getpass.getuser()}"
    except Exception:
        return "operator:unknown"


def _resolve_run(
    sample_id: str | None,
    run_id: str | None,
    policy: str | None,
    note: str | None,
    actor: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    """``samples resolve --run RUN --policy P [--dry-run]`` (issue 37)."""
    if sample_id is not None or run_id is None or policy is None:
        raise click.UsageError("bulk resolution takes --run RUN and --policy POLICY, no SAMPLE_ID")
    if not dry_run and not note:
        raise click.UsageError("--note is required: say why (kept with every sample's decision)")
    from geo_pipeline.store import bulk_resolution as bulk
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        result = bulk.resolve_run(
            conn, run_id, policy, note=note or "", actor=actor, dry_run=dry_run
        )
    if as_json:
        emit_json(result.as_dict())
        return
    emit_table(
        result.samples, ["sample_id", "platform", "attempt_no", "sent_at", "lookups"],
        title=f"uncertain samples of {run_id}",
    )  # fmt: skip
    if dry_run:
        click.echo(
            f"dry run: {len(result.samples)} uncertain sample(s) of {run_id} would be resolved "
            f"with {policy}; nothing written"
        )
    else:
        click.echo(
            f"{len(result.resolved)} sample(s) of {run_id} resolved with {policy} by {actor}"
        )


def register(root: click.Group) -> None:
    """Add this module's commands to the root group."""
    root.add_command(worker_cmd)
    root.add_command(relay_cmd)
    root.add_command(sweeper_cmd)
    runs = root.commands.get("runs")
    if isinstance(runs, click.Group):
        runs.add_command(cancel_cmd)
    samples = root.commands.get("samples")
    if not isinstance(samples, click.Group):
        samples = click.Group("samples", help="Individual samples: acceptance verdicts.")
        root.add_command(samples)
    samples.add_command(uncertain_cmd)
    samples.add_command(resolve_cmd)


# --------------------------------------------------------------------------- worker
@click.command("worker")
@click.option("--platform", "platforms", multiple=True, help="Platforms to serve (default: all).")
@click.option(
    "--lease-s", type=POSITIVE_SECONDS, default=30.0, envvar="GEO_LEASE_S", show_default=True
)
@click.option("--claim-batch", type=POSITIVE, default=200, show_default=True)
@click.option(
    "--max-in-flight", type=POSITIVE, default=5000, show_default=True, help="Per platform."
)
@click.option("--reclaim-idle-ms", type=POSITIVE, default=30000, envvar="GEO_RECLAIM_IDLE_MS")
@click.option("--reclaim-every-s", type=POSITIVE_SECONDS, default=5.0, envvar="GEO_RECLAIM_EVERY_S")
@click.option("--max-deliveries", type=POSITIVE, default=5, show_default=True)
@click.option("--drain-timeout-s", type=SECONDS, default=10.0, show_default=True)
@click.option("--idle-claim-s", type=POSITIVE_SECONDS, default=1.0, show_default=True)
@click.option(
    "--accept-defer-s",
    type=SECONDS,
    default=1.0,
    envvar="GEO_ACCEPT_DEFER_S",
    show_default=True,
    help="Platforms with lookup: write an acceptance with the attempt's end if it comes within "
    "this time (one write instead of two); a crash inside it means a lookup, never a re-send.",
)
@click.option(
    "--submit-horizon-s",
    type=POSITIVE_SECONDS,
    default=0.5,
    envvar="GEO_SUBMIT_HORIZON_S",
    show_default=True,
    help="Claim no more new submissions than the platform's submit rate admits in this time.",
)
@click.option(
    "--platform-wait-s",
    type=SECONDS,
    default=30.0,
    envvar="GEO_PLATFORM_WAIT_S",
    show_default=True,
    help="A platform that does not answer at start-up (e.g. a simulator still starting): its "
    "lane waits this long before claiming, saying where it waits; 0: claim at once.",
)
@click.option(
    "--callback-poll-s",
    type=POSITIVE_SECONDS,
    default=60.0,
    envvar="GEO_CALLBACK_POLL_S",
    show_default=True,
    help="Platforms whose service calls back on completion (a receiver URL is configured) "
    "are polled only this often, as a safety net; the callback wakes the fetch.",
)
@click.option("--no-evidence", is_flag=True, help="Do not archive evidence (benchmarks only).")
@click.option("--metrics-port", type=PORT, default=None, help=METRICS_PORT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the exit report as JSON (default).")
def worker_cmd(
    platforms: tuple[str, ...],
    lease_s: float,
    claim_batch: int,
    max_in_flight: int,
    reclaim_idle_ms: int,
    reclaim_every_s: float,
    max_deliveries: int,
    drain_timeout_s: float,
    idle_claim_s: float,
    accept_defer_s: float,
    submit_horizon_s: float,
    platform_wait_s: float,
    callback_poll_s: float,
    no_evidence: bool,
    metrics_port: int | None,
    as_json: bool,
) -> None:
    """Run a worker: claim, submit, poll, archive and complete samples (SIGTERM: finish or hand
    back what it holds, report, exit 0)."""
    import asyncio

    from geo_pipeline.observability import logs
    from geo_pipeline.store import db as dbmod

    del as_json
    import redis.asyncio as aioredis

    from geo_pipeline.streams.keys import (
        collect_stream,
        namespace,
        redis_url,
        screenshot_stream,
        stream_key,
    )
    from geo_pipeline.worker.runner import Worker, WorkerSettings, quiet_collector

    logs.configure(_log_level())
    # One line per HTTP request would drown the events that matter (D6).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    registry = _registry()
    chosen = list(platforms) or sorted(registry.entries)
    for p in chosen:
        registry.entry(p)  # a clear error for an unknown platform
    services = _preflight()
    db_url = dbmod.database_url()
    archive = None
    if not no_evidence:
        from geo_pipeline.evidence import archive_from_url

        archive = archive_from_url()
    metrics = _metrics(metrics_port)
    caps = registry.capabilities()
    streams = [stream_key(namespace(), collect_stream(p)) for p in chosen]
    if archive is not None:
        streams += [
            stream_key(namespace(), screenshot_stream(p)) for p in chosen if caps[p].screenshot
        ]
    settings = WorkerSettings(
        platforms=chosen,
        worker_id=f"worker:{socket.gethostname()}:{os.getpid()}",
        lease_s=lease_s,
        claim_batch=claim_batch,
        max_in_flight=max_in_flight,
        reclaim_idle_ms=reclaim_idle_ms,
        reclaim_every_s=reclaim_every_s,
        max_deliveries=max_deliveries,
        drain_timeout_s=drain_timeout_s,
        idle_claim_s=idle_claim_s,
        accept_defer_s=accept_defer_s,
        submit_horizon_s=submit_horizon_s,
        platform_urls={p: registry.entry(p).base_url for p in chosen},
        platform_wait_s=platform_wait_s,
        callback_poll_s=callback_poll_s,
    )

    _started(
        "worker",
        services,
        streams,
        metrics,
        worker=settings.worker_id,
        evidence=getattr(archive, "location", None) if archive is not None else "off",
    )

    async def main() -> dict[str, int]:
        connectors, client = _build_connectors(
            registry, chosen, db_url=db_url, owner=settings.worker_id
        )
        redis = aioredis.Redis.from_url(redis_url(), decode_responses=True, max_connections=50)
        worker = Worker(
            settings,
            db_url=db_url,
            redis=redis,
            ns=namespace(),
            capabilities=registry.capabilities(),
            connectors=connectors,
            archive=archive,
            on_started=quiet_collector,  # this process is the worker's: its collector too
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        try:
            return await worker.run()
        finally:
            for c in connectors.values():
                aclose = getattr(c, "aclose", None)
                if aclose is not None:
                    await aclose()
            await client.aclose()
            await redis.aclose()

    report = asyncio.run(main())
    emit_json({"worker": settings.worker_id, **report})
    sys.stdout.flush()


# --------------------------------------------------------------------------- relay, sweeper
def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        del signum, frame
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@click.command("relay")
@click.option("--batch", type=POSITIVE, default=1000, show_default=True)
@click.option("--idle-s", type=POSITIVE_SECONDS, default=0.05, show_default=True)
@click.option("--metrics-port", type=PORT, default=None, help=METRICS_PORT_HELP)
@click.option("--json", "as_json", is_flag=True)
def relay_cmd(batch: int, idle_s: float, metrics_port: int | None, as_json: bool) -> None:
    """Publish outbox rows to Redis Streams and mark them published."""
    from geo_pipeline.observability import logs
    from geo_pipeline.store import db as dbmod

    del as_json
    from geo_pipeline.streams.keys import namespace, stream_key
    from geo_pipeline.streams.relay import run_relay

    logs.configure(_log_level())
    services = _preflight()
    metrics = _metrics(metrics_port)
    stop = _stop_on_signals()
    redis = _redis_sync()
    _started("relay", services, [stream_key(namespace(), "*")], metrics, source="geo.outbox")
    with dbmod.connect(autocommit=True) as conn:
        total = run_relay(conn, redis, namespace(), stop=stop, batch=batch, idle_s=idle_s)
    emit_json({"relay": f"relay:{socket.gethostname()}:{os.getpid()}", "published": total})


@click.command("sweeper")
@click.option("--interval-s", type=POSITIVE_SECONDS, default=5.0, envvar="GEO_SWEEP_INTERVAL_S")
@click.option("--grace-s", type=SECONDS, default=2.0, envvar="GEO_SWEEP_GRACE_S")
@click.option("--hint-ttl-s", type=POSITIVE_SECONDS, default=30.0, envvar="GEO_SWEEP_HINT_TTL_S")
@click.option(
    "--stream-keep-s",
    type=POSITIVE_SECONDS,
    default=86400.0,
    envvar="GEO_STREAM_KEEP_S",
    show_default=True,
    help="The completion and dead-letter streams keep this long; the work streams are trimmed "
    "to what their consumer groups still need.",
)
@click.option(
    "--gauge-every-s",
    type=POSITIVE_SECONDS,
    default=15.0,
    envvar="GEO_GAUGE_EVERY_S",
    show_default=True,
    help="Refresh the database-wide gauges (backlog, evidence missing, reconciliation) this often.",
)
@click.option("--metrics-port", type=PORT, default=None, help=METRICS_PORT_HELP)
@click.option("--json", "as_json", is_flag=True)
def sweeper_cmd(
    interval_s: float,
    grace_s: float,
    hint_ttl_s: float,
    stream_keep_s: float,
    gauge_every_s: float,
    metrics_port: int | None,
    as_json: bool,
) -> None:
    """Re-derive due and orphaned work from PostgreSQL (expired leases, lost hints, lookups),
    trim the streams, and export the database-wide gauges on --metrics-port."""
    from geo_pipeline.observability import logs
    from geo_pipeline.store import db as dbmod

    del as_json
    from geo_pipeline.streams.keys import (
        COMPLETIONS,
        DEAD,
        collect_stream,
        namespace,
        screenshot_stream,
        stream_key,
    )
    from geo_pipeline.worker.sweeper import SweepSettings, run_sweeper

    logs.configure(_log_level())
    registry = _registry()
    services = _preflight()
    metrics = _metrics(metrics_port)
    stop = _stop_on_signals()
    ns = namespace()
    lookup = [p for p, c in registry.capabilities().items() if c.recoverable]
    keys = [stream_key(ns, collect_stream(p)) for p in registry.entries]
    keys += [stream_key(ns, screenshot_stream(p)) for p in registry.entries]
    windowed = [stream_key(ns, COMPLETIONS), stream_key(ns, DEAD)]
    _started("sweeper", services, keys + windowed, metrics, interval_s=interval_s)
    with dbmod.connect(autocommit=True) as conn:
        totals = run_sweeper(
            conn,
            actor=f"sweeper:{socket.gethostname()}:{os.getpid()}",
            settings=SweepSettings(
                interval_s=interval_s,
                grace_s=grace_s,
                hint_ttl_s=hint_ttl_s,
                windowed_keep_s=stream_keep_s,
                gauge_every_s=gauge_every_s,
            ),
            lookup_platforms=lookup,
            stop=stop,
            redis=_redis_sync(),
            stream_keys=keys,
            windowed_keys=windowed,
            platforms=list(registry.entries),
        )
    emit_json({"sweeper": f"sweeper:{socket.gethostname()}:{os.getpid()}", **totals})


# --------------------------------------------------------------------------- operators
@click.command("cancel")
@click.argument("run_id")
@click.option("--actor", default=None, help="Who cancels (default: the OS user).")
@click.option("--json", "as_json", is_flag=True)
def cancel_cmd(run_id: str, actor: str | None, as_json: bool) -> None:
    """Cancel RUN_ID: record the intent, stop new submissions, ask upstream to stop accepted
    tasks where the platform supports it. Never refunds (billing decides, R24)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import execution as ex

    with dbmod.connect(autocommit=True) as conn:
        try:
            out = ex.cancel_run(conn, run_id, actor=_actor(actor))
        except ex.NotFoundError as exc:
            raise click.ClickException(str(exc)) from exc
    out["upstream"] = _cancel_upstream(out["accepted_open"])
    if as_json:
        emit_json(out)
        return
    click.echo(
        f"run {run_id}: cancel recorded at {out['cancel_requested_at']}; "
        f"{out['cancelled_locally']} samples not yet submitted were cancelled"
    )
    if out["upstream"]:
        emit_table(out["upstream"], ["sample_id", "platform", "upstream_id", "result"])
    if out["submitting"]:
        # Cannot be cancelled from here: whether upstream has the request is not known yet.
        click.echo(
            f"{len(out['submitting'])} samples in flight, their request sent or about to be: "
            "each ends CANCELLED if upstream did not take it, or is followed to its end and "
            "charged like an accepted task if it did"
        )
        emit_table(out["submitting"], ["sample_id", "platform", "attempt_no", "lease_owner"])


def _cancel_upstream(accepted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import asyncio

    if not accepted:
        return []
    registry = _registry()
    results: list[dict[str, Any]] = []

    async def go() -> None:
        platforms = sorted({a["platform"] for a in accepted})
        try:
            connectors, client = _build_connectors(registry, platforms)
        except click.ClickException as exc:
            for a in accepted:
                results.append({**a, "result": f"not asked: {exc.message}"})
            return
        try:
            for a in accepted:
                caps = registry.entry(a["platform"]).capabilities
                if not caps.cancellable:
                    results.append({**a, "result": "platform cannot cancel"})
                    continue
                try:
                    r = await connectors[a["platform"]].cancel(a["upstream_id"])
                    results.append(
                        {**a, "result": "cancelled" if r.upstream_cancelled else r.detail}
                    )
                except Exception as exc:
                    results.append({**a, "result": f"error: {type(exc).__name__}: {exc}"})
        finally:
            await client.aclose()

    asyncio.run(go())
    return results


@click.command("uncertain")
@click.option("--run-id", default=None)
@click.option("--limit", type=POSITIVE, default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def uncertain_cmd(run_id: str | None, limit: int, as_json: bool) -> None:
    """Samples whose upstream acceptance is unknown, with what was tried (R12)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import execution as ex

    with dbmod.connect(autocommit=True) as conn:
        rows = ex.list_uncertain(conn, run_id, limit)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no uncertain samples")
        return
    emit_table(
        rows,
        [
            "sample_id",
            "run_id",
            "platform",
            "attempt_no",
            "idempotency_key",
            "sent_at",
            "lookups",
            "last_lookup_at",
            "submission_reason",
        ],
        title="uncertain samples",
    )


@click.command("resolve")
@click.argument("sample_id", required=False)
@click.option("--accepted-upstream-id", default=None, help="Upstream accepted it with this id.")
@click.option("--not-accepted", is_flag=True, help="Upstream never took it.")
@click.option("--note", default=None, help="Why (kept in the log and the review decisions).")
@click.option("--actor", default=None, help="Who decides (default: the OS user).")
@click.option(
    "--run", "run_id", default=None, help="Every uncertain sample of RUN (needs --policy)."
)
@click.option(
    "--policy",
    type=click.Choice(sorted(BULK_POLICIES)),
    default=None,
    help="With --run: accept-possible-second-charge (a new attempt, new key: upstream may charge "
    "twice) or give-up (the samples end failed, nothing re-sent).",
)
@click.option("--dry-run", is_flag=True, help="With --run: list what would be resolved only.")
@click.option("--json", "as_json", is_flag=True)
def resolve_cmd(
    sample_id: str | None,
    accepted_upstream_id: str | None,
    not_accepted: bool,
    note: str | None,
    actor: str | None,
    run_id: str | None,
    policy: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Record an operator's verdict on an uncertain sample as a guarded transition; or, with
    --run RUN --policy P, on every uncertain sample of a run (each recorded with who and why)."""
    if run_id is not None or policy is not None:
        _resolve_run(sample_id, run_id, policy, note, _actor(actor), dry_run, as_json)
        return
    if sample_id is None:
        raise click.UsageError("give SAMPLE_ID, or --run RUN --policy POLICY")

    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store import execution as ex

    if bool(accepted_upstream_id) == bool(not_accepted):
        raise click.ClickException(
            "give exactly one of --accepted-upstream-id ID or --not-accepted"
        )
    if not_accepted and not note:
        raise click.ClickException("--not-accepted needs --note saying how you verified it")
    with dbmod.connect(autocommit=True) as conn:
        try:
            verdict = ex.resolve_uncertain(
                conn,
                sample_id,
                accepted_upstream_id=accepted_upstream_id,
                note=note,
                actor=_actor(actor),
            )
        except ex.NotUncertain as exc:
            raise click.ClickException(str(exc)) from exc
    out = {"sample_id": sample_id, "verdict": verdict}
    if as_json:
        emit_json(out)
    else:
        click.echo(f"sample {sample_id}: recorded verdict {verdict}")
