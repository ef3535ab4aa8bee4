"""``geo-pipeline monitors``: a monitor's lifecycle without SQL (issue 37).

    monitors create CONFIG.yaml [--cron '0 7 * * 1-5' --timezone Europe/Berlin]
    monitors list [--tenant T] [--all]
    monitors show MONITOR
    monitors pause | resume | retire MONITOR --reason ...
    monitors update MONITOR [--config NEW.yaml] [--cron ... --timezone ... | --default-cadence]

A monitor is re-sampled by the schedule on its cadence (default: GEO_RESAMPLE_AT in
GEO_RESAMPLE_TZ, the ``daily_resampling`` schedule; its own cron: ``monitor_resampling``); an
update is used from the next run on, runs already made keep their frozen snapshot (R2). A day
whose re-sample made no run shows in ``monitors show`` with the reason.
"""

from __future__ import annotations

import getpass
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from geo_pipeline.cli.output import emit_json, emit_table
from geo_pipeline.domain.cadence import CadenceError, parse_cadence
from geo_pipeline.domain.question_tags import QuestionSheet, read_questions_csv, sheet_changes
from geo_pipeline.domain.vocabulary import TENANT_ALERT_KINDS

DEFAULT_TZ = "Asia/Shanghai"  # as defs/schedules.py: GEO_RESAMPLE_TZ unset


def default_tz() -> str:
    from geo_pipeline.settings import settings

    return settings().resample_tz or DEFAULT_TZ


def default_cron() -> str:
    from geo_pipeline.settings import settings

    hh, mm = (int(p) for p in settings().resample_at.split(":"))
    return f"{mm} {hh} * * *"


def _actor(actor: str | None) -> str:
    from geo_pipeline.settings import settings

    if actor:
        return actor
    try:
        return settings().actor or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


def next_run(monitor: dict[str, Any], now: datetime | None = None) -> str:
    """When the schedule next re-samples an active monitor (its own cadence or the default)."""
    if monitor["status"] != "active":
        return f"none ({monitor['status']})"
    cron = monitor["cron"] or default_cron()
    tz = monitor["timezone"] or default_tz()
    try:
        fire = parse_cadence(cron, tz).next_fire(now or datetime.now(UTC))
    except CadenceError as exc:
        return f"never: {exc}"
    return fire.isoformat() if fire else "none within a year"


def cadence_text(monitor: dict[str, Any]) -> str:
    if monitor["cron"]:
        return f"{monitor['cron']} ({monitor['timezone']})"
    return f"default: {default_cron()} ({default_tz()}, GEO_RESAMPLE_AT)"


ACTOR = click.option("--actor", default=None, help="Who (default: $GEO_ACTOR or the login).")
REASON = click.option("--reason", default="", help="Why: kept in the monitor's history.")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group("monitors")
def monitors_group() -> None:
    """Monitors: questions re-sampled on a cadence, each day a new run (R5)."""


@monitors_group.command("create")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("--cron", default=None, help="Its own cadence, e.g. '0 7 * * 1-5' (at most daily).")
@click.option("--timezone", default=None, help="The cadence's IANA zone (default GEO_RESAMPLE_TZ).")
@click.option(
    "--questions",
    "questions_csv",
    type=click.Path(path_type=Path),
    default=None,
    help="Take the questions and their tags from this CSV (question, topic, intent, persona, "
    "market) instead of the config's.",
)
@ACTOR
@REASON
@JSON
def create_cmd(
    config: Path,
    cron: str | None,
    timezone: str | None,
    questions_csv: Path | None,
    actor: str | None,
    reason: str,
    as_json: bool,
) -> None:
    """Create the monitor CONFIG names (`monitor: ID`); the schedule makes its runs."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config_loading import load_config_file
    from geo_pipeline.flows import monitors as flow
    from geo_pipeline.store import db as dbmod

    raw = dict(load_config_file(config))
    if questions_csv is not None:
        sheet = read_sheet(questions_csv)
        raw = {**raw, "questions": sheet.questions, "question_tags": sheet.tags}
    with dbmod.connect() as conn:
        try:
            change = flow.create_monitor(
                conn,
                raw,
                load_registry().capabilities(),
                cron=cron,
                timezone=timezone,
                default_tz=default_tz(),
                actor=_actor(actor),
                reason=reason,
            )
        except (flow.MonitorError, CadenceError) as exc:
            raise _fail(exc) from None
        monitor = flow.get_monitor(conn, change.monitor_id)
    if as_json:
        emit_json({**change.__dict__, "next_run": next_run(monitor)})
        return
    click.echo(
        f"monitor {change.monitor_id} created (tenant {change.tenant_id}, revision 1); "
        f"cadence {cadence_text(monitor)}; next run {next_run(monitor)}"
    )


@monitors_group.command("list")
@click.option("--tenant", default=None, help="Only this tenant's monitors.")
@click.option("--all", "show_all", is_flag=True, help="Include retired monitors.")
@JSON
def list_cmd(tenant: str | None, show_all: bool, as_json: bool) -> None:
    """Monitors with their status, cadence, last run day and open failed re-samples."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.queries import Q

    with dbmod.connect() as conn, conn.cursor() as cur:
        cur.execute(Q("monitors.list"), {"tenant_id": tenant, "all": show_all})
        rows = [dict(r) for r in cur.fetchall()]
    for r in rows:
        r["cadence"] = cadence_text(r)
        r["next_run"] = next_run(r)
    if as_json:
        emit_json(rows)
        return
    emit_table(
        rows,
        [
            "monitor_id",
            "tenant_id",
            "status",
            "revision",
            "cadence",
            "next_run",
            "last_day",
            "open_failures",
        ],
        title="monitors",
    )


@monitors_group.command("show")
@click.argument("monitor_id")
@click.option("--runs", "n_runs", type=click.IntRange(1, 1000), default=10, show_default=True)
@JSON
def show_cmd(monitor_id: str, n_runs: int, as_json: bool) -> None:
    """A monitor: status, cadence, its history, its last runs (each with its snapshot) and the
    days whose re-sample failed, with the reason."""
    from geo_pipeline.flows import monitors as flow
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.queries import Q

    with dbmod.connect() as conn:
        try:
            monitor = flow.get_monitor(conn, monitor_id)
        except flow.MonitorError as exc:
            raise _fail(exc) from None
        with conn.cursor() as cur:
            cur.execute(Q("monitors.events"), {"monitor_id": monitor_id})
            events = [dict(r) for r in cur.fetchall()]
            cur.execute(Q("monitors.runs"), {"monitor_id": monitor_id, "limit": n_runs})
            runs = [dict(r) for r in cur.fetchall()]
            cur.execute(Q("monitors.failures"), {"monitor_id": monitor_id, "limit": 30})
            failures = [dict(r) for r in cur.fetchall()]
    for f in failures:
        f["open"] = f["later_run_id"] is None
    out = {
        **{k: monitor[k] for k in ("monitor_id", "tenant_id", "status", "revision", "cron",
                                   "timezone", "created_at", "updated_at", "paused_at",
                                   "retired_at")},
        "cadence": cadence_text(monitor),
        "next_run": next_run(monitor),
        "history": events,
        "runs": runs,
        "failed_resamples": failures,
        "config": monitor["config"],
    }  # fmt: skip
    if as_json:
        emit_json(out)
        return
    click.echo(
        f"monitor {monitor_id} (tenant {monitor['tenant_id']}): {monitor['status']}, "
        f"revision {monitor['revision']}\ncadence: {out['cadence']}\nnext run: {out['next_run']}"
    )
    open_failures = [f for f in failures if f["open"]]
    if open_failures:
        click.echo(f"FAILED RE-SAMPLES: {len(open_failures)} day(s) without a run:")
        for f in open_failures:
            click.echo(f"  {f['day']}: {f['reason_kind']}: {f['reason']} (tries {f['tries']})")
    emit_table(
        events, ["event", "revision", "cron", "timezone", "actor", "reason", "created_at"],
        title="history",
    )  # fmt: skip
    emit_table(runs, ["run_id", "scheduled_for", "snapshot_id", "sample_count"], title="runs")
    if failures:
        emit_table(
            failures,
            ["day", "reason_kind", "reason", "tries", "last_failed_at", "later_run_id"],
            title="failed re-samples",
        )


def _state_cmd(name: str, event: str, verb: str) -> Any:
    @click.argument("monitor_id")
    @ACTOR
    @REASON
    @JSON
    def cmd(monitor_id: str, actor: str | None, reason: str, as_json: bool) -> None:
        from geo_pipeline.flows import monitors as flow
        from geo_pipeline.store import db as dbmod

        with dbmod.connect() as conn:
            try:
                change = flow.change_state(conn, monitor_id, event, _actor(actor), reason)
            except flow.MonitorError as exc:
                raise _fail(exc) from None
        if as_json:
            emit_json(change.__dict__)
        else:
            click.echo(f"monitor {monitor_id} {event}")

    cmd.__doc__ = f"{verb} MONITOR_ID (recorded in its history with who and why)."
    return monitors_group.command(name)(cmd)


pause_cmd = _state_cmd("pause", "paused", "Pause: the schedules stop re-sampling")
resume_cmd = _state_cmd(
    "resume", "resumed", "Resume a paused monitor: re-sampled again on its cadence"
)
retire_cmd = _state_cmd(
    "retire", "retired", "Retire for good: never re-sampled again, its runs stay"
)


@monitors_group.command("update")
@click.argument("monitor_id")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="A new collection config (same tenant and monitor id).",
)
@click.option("--cron", default=None, help="A new cadence of its own.")
@click.option("--timezone", default=None, help="The cadence's IANA zone.")
@click.option("--default-cadence", is_flag=True, help="Back to GEO_RESAMPLE_AT / _TZ.")
@ACTOR
@REASON
@JSON
def update_cmd(
    monitor_id: str,
    config_path: Path | None,
    cron: str | None,
    timezone: str | None,
    default_cadence: bool,
    actor: str | None,
    reason: str,
    as_json: bool,
) -> None:
    """A new revision of MONITOR_ID, used from its next run on (runs made keep their snapshot)."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config_loading import load_config_file
    from geo_pipeline.flows import monitors as flow
    from geo_pipeline.store import db as dbmod

    if config_path is None and cron is None and timezone is None and not default_cadence:
        raise click.UsageError(
            "nothing to change: give --config, --cron/--timezone or --default-cadence"
        )
    if default_cadence and (cron or timezone):
        raise click.UsageError("--default-cadence and --cron/--timezone exclude each other")
    raw = load_config_file(config_path) if config_path is not None else None
    with dbmod.connect() as conn:
        try:
            change = flow.update_monitor(
                conn,
                monitor_id,
                load_registry().capabilities(),
                raw=raw,
                cron=cron,
                timezone=timezone,
                default_cadence=default_cadence,
                default_tz=default_tz(),
                actor=_actor(actor),
                reason=reason,
            )
        except (flow.MonitorError, CadenceError) as exc:
            raise _fail(exc) from None
        monitor = flow.get_monitor(conn, monitor_id)
    if as_json:
        emit_json({**change.__dict__, "next_run": next_run(monitor)})
        return
    click.echo(
        f"monitor {monitor_id} updated to revision {change.revision}, used from its next run "
        f"({next_run(monitor)}); cadence {cadence_text(monitor)}"
    )


# ----------------------------------------------------------------------- alert recipients
@monitors_group.group("recipients")
def recipients_group() -> None:
    """Who hears about a tenant's alerts (mention changes, failed re-samples, reconciliation)."""


WEBHOOK_ENV = re.compile(r"^GEO_ALERT_WEBHOOK_[A-Z0-9_]{1,64}$")
EMAIL = re.compile(r"^[^@\s,<>]{1,64}@[^@\s,<>]{1,255}$")


@recipients_group.command("add")
@click.option("--tenant", required=True)
@click.option("--monitor", default=None, help="Only this monitor's alerts (default: the tenant's).")
@click.option(
    "--webhook-env",
    default=None,
    help="The environment variable holding the webhook's URL, GEO_ALERT_WEBHOOK_<NAME> (the URL "
    "is a secret: it is never stored).",
)
@click.option("--email", default=None, help="An e-mail address (sent via GEO_ALERT_SMTP_HOST).")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(TENANT_ALERT_KINDS),
    help="Alert kinds to receive (repeatable; default all).",
)
@JSON
def recipients_add_cmd(
    tenant: str,
    monitor: str | None,
    webhook_env: str | None,
    email: str | None,
    kinds: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add a recipient of TENANT's alerts (or of one of its monitors)."""
    from geo_pipeline.flows import monitors as flow
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.queries import Q

    if bool(webhook_env) == bool(email):
        raise click.UsageError("give exactly one of --webhook-env NAME or --email ADDRESS")
    if webhook_env and not WEBHOOK_ENV.match(webhook_env):
        raise click.BadParameter(
            f"{webhook_env!r}: use a variable named GEO_ALERT_WEBHOOK_<NAME> (A-Z, 0-9, _)",
            param_hint="--webhook-env",
        )
    if email and not EMAIL.match(email):
        raise click.BadParameter(f"{email!r} is not an e-mail address", param_hint="--email")
    with dbmod.connect() as conn:
        if monitor is not None:
            try:
                owner = flow.get_monitor(conn, monitor)["tenant_id"]
            except flow.MonitorError as exc:
                raise _fail(exc) from None
            if owner != tenant:
                raise click.ClickException(
                    f"monitor {monitor!r} is not a monitor of tenant {tenant!r}"
                )
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(Q("tenant_alerts.tenant_exists"), {"tenant_id": tenant})
            if cur.fetchone() is None:
                raise click.ClickException(
                    f"no tenant {tenant!r} (see `geo-pipeline tenants list`)"
                )
            cur.execute(
                Q("tenant_alerts.add_recipient"),
                {
                    "tenant_id": tenant,
                    "monitor_id": monitor,
                    "channel": "webhook" if webhook_env else "email",
                    "target": webhook_env or email,
                    "kinds": list(kinds or TENANT_ALERT_KINDS),
                },
            )
            row = cur.fetchone()
            assert row is not None  # an upsert always returns its row
            rid = row["recipient_id"]
    if as_json:
        emit_json({"recipient_id": rid})
    else:
        click.echo(
            f"recipient {rid} of tenant {tenant}" + (f", monitor {monitor}" if monitor else "")
        )


@recipients_group.command("list")
@click.option("--tenant", default=None)
@JSON
def recipients_list_cmd(tenant: str | None, as_json: bool) -> None:
    """Recipients (a webhook shows the variable that holds its URL, never the URL)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.queries import Q

    with dbmod.connect() as conn, conn.cursor() as cur:
        cur.execute(Q("tenant_alerts.recipients"), {"tenant_id": tenant})
        rows = [dict(r) for r in cur.fetchall()]
    if as_json:
        emit_json(rows)
    else:
        emit_table(rows, ["recipient_id", "tenant_id", "monitor_id", "channel", "target", "kinds"])


@recipients_group.command("remove")
@click.argument("recipient_id", type=int)
@click.option("--tenant", required=True, help="The recipient's tenant (a check, not a filter).")
def recipients_remove_cmd(recipient_id: int, tenant: str) -> None:
    """Remove a recipient of TENANT."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.queries import Q

    with dbmod.connect() as conn, conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("tenant_alerts.remove_recipient"), {"recipient_id": recipient_id, "tenant_id": tenant}
        )
        if cur.fetchone() is None:
            raise click.ClickException(f"no recipient {recipient_id} of tenant {tenant!r}")
    click.echo(f"recipient {recipient_id} removed")


# ----------------------------------------------------------------------- tagged questions
@click.group("questions")
def questions_group() -> None:
    """A monitor's questions and their tags (topic, intent, persona, market)."""


def read_sheet(path: Path) -> QuestionSheet:
    """A CSV of questions, or a ClickException listing every problem with its line."""
    sheet = read_questions_csv(path.read_text(encoding="utf-8-sig"), path.name)
    if sheet.problems:
        lines = "\n".join(f"  - {where}: {what}" for where, what in sheet.problems[:50])
        raise click.ClickException(f"{path.name}: {len(sheet.problems)} problem(s):\n{lines}")
    if not sheet.questions:
        raise click.ClickException(f"{path.name}: no question rows")
    return sheet


@questions_group.command("import")
@click.argument("csv_file", type=click.Path(path_type=Path))
@click.option("--monitor", "monitor_id", required=True, help="The monitor whose questions to set.")
@click.option("--dry-run", is_flag=True, help="Validate and show what changes; write nothing.")
@ACTOR
@REASON
@JSON
def import_cmd(
    csv_file: Path,
    monitor_id: str,
    dry_run: bool,
    actor: str | None,
    reason: str,
    as_json: bool,
) -> None:
    """Set MONITOR's questions and tags from CSV_FILE (columns: question, topic, intent, persona,
    market): a new revision used from its next run on. --dry-run shows the changes only."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config_text import normalise_text
    from geo_pipeline.flows import monitors as flow
    from geo_pipeline.store import db as dbmod

    sheet = read_sheet(csv_file)
    with dbmod.connect() as conn:
        try:
            current = flow.get_monitor(conn, monitor_id)
        except flow.MonitorError as exc:
            raise _fail(exc) from None
        saved = dict(current["config"])
        if "targets" in saved:  # a canonical snapshot saved by `runs create`: no raw questions
            raise click.ClickException(
                f"monitor {monitor_id!r} holds a frozen snapshot, not an editable config; "
                "give it one with `monitors update --config`"
            )
        changes = sheet_changes(
            list(saved.get("questions", [])), dict(saved.get("question_tags") or {}), sheet,
            normalise_text,
        )  # fmt: skip
        new_raw = {**saved, "questions": sheet.questions, "question_tags": sheet.tags}
        caps = load_registry().capabilities()
        try:
            if dry_run:
                flow.validated(conn, new_raw, caps)
                change = None
            else:
                change = flow.update_monitor(
                    conn, monitor_id, caps, raw=new_raw, cron=None, timezone=None,
                    default_cadence=False, default_tz=default_tz(), actor=_actor(actor),
                    reason=reason or f"questions import {csv_file.name}",
                )  # fmt: skip
        except flow.MonitorError as exc:
            raise _fail(exc) from None
    out = {
        "monitor_id": monitor_id,
        "dry_run": dry_run,
        "questions": len(sheet.questions),
        "tagged": len(sheet.tags),
        "changes": changes,
        "revision": change.revision if change else None,
    }
    if as_json:
        emit_json(out)
        return
    for r in changes:
        r["tags"] = ", ".join(f"{k}={v}" for k, v in r["tags"].items())
        r["before"] = ", ".join(f"{k}={v}" for k, v in (r.get("before") or {}).items())
    emit_table(changes, ["change", "question", "tags", "before"], title=f"{csv_file.name}")
    if dry_run:
        click.echo(f"dry run: {len(changes)} change(s), valid; nothing written")
    else:
        click.echo(
            f"monitor {monitor_id}: {len(changes)} change(s), revision "
            f"{out['revision']}, used from its next run on"
        )


def register(root: click.Group) -> None:
    """Add ``monitors`` and ``questions`` to the root group."""
    root.add_command(monitors_group)
    root.add_command(questions_group)
