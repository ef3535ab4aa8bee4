"""``geo-pipeline accounts``: the browser lane's consumer-app accounts (issue #32).

``add`` registers one (state ``needs_login``), ``login --storage-state FILE`` imports a login a
person exported from their browser (Playwright storage-state JSON) into the account's persistent
browser profile and marks it ready, ``list`` shows states, pacing and leases, ``suspend`` and
``resume`` move it. Cookies go only into the profile directory: never into the database, the
output or the logs (D2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from geo_pipeline.cli.output import emit_json, emit_table

COLUMNS = [
    "platform",
    "account_id",
    "state",
    "state_reason",
    "sends_today",
    "daily_budget",
    "min_gap_s",
    "jitter_s",
    "last_used_at",
    "next_send_at",
    "lease_owner",
    "fencing_token",
]
_COOKIE_FIELDS = ("name", "value")


@click.group("accounts")
def accounts_group() -> None:
    """Browser-lane accounts: one logged-in browser profile each, leased one at a time."""


def read_storage_state(path: Path) -> list[dict[str, Any]]:
    """The cookies of a Playwright storage-state file, checked field by field. A problem names
    its field path; a cookie's value is never shown."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    cookies = data.get("cookies") if isinstance(data, dict) else None
    if not isinstance(cookies, list) or not cookies:
        raise click.ClickException(
            f"{path}: cookies: a non-empty list is required (a Playwright storage-state file: "
            '{"cookies": [{"name", "value", "domain", "path", ...}], "origins": [...]})'
        )
    for i, cookie in enumerate(cookies):
        where = f"{path}: cookies[{i}]"
        if not isinstance(cookie, dict):
            raise click.ClickException(f"{where}: an object is required")
        for name in _COOKIE_FIELDS:
            if not isinstance(cookie.get(name), str):
                raise click.ClickException(f"{where}.{name}: a string is required")
        if not isinstance(cookie.get("domain"), str) and not isinstance(cookie.get("url"), str):
            raise click.ClickException(f"{where}: 'domain' (with 'path') or 'url' is required")
    return cookies


@accounts_group.command("add")
@click.argument("platform")
@click.argument("account_id")
@click.option(
    "--daily-budget", type=int, default=50, show_default=True, help="Questions per UTC day at most."
)
@click.option(
    "--min-gap-s",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between two questions of this account at least.",
)
@click.option(
    "--jitter-s",
    type=float,
    default=5.0,
    show_default=True,
    help="Plus up to this many random seconds.",
)
def add_cmd(
    platform: str, account_id: str, daily_budget: int, min_gap_s: float, jitter_s: float
) -> None:
    """Register ACCOUNT_ID of PLATFORM (needs a login before it is used)."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.accounts import AccountError, Pacing, add_account

    try:
        with dbmod.connect() as conn:
            created = add_account(
                conn, platform, account_id, Pacing(daily_budget, min_gap_s, jitter_s)
            )
            conn.commit()
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"{platform}/{account_id}: "
        + (
            "added (needs_login: run `geo-pipeline accounts login`)"
            if created
            else "already registered, unchanged"
        )
    )


@accounts_group.command("list")
@click.option("--platform", default=None, help="Only this platform.")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(platform: str | None, as_json: bool) -> None:
    """Every account with its state, today's sends, pacing and lease."""
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.accounts import list_accounts

    with dbmod.connect() as conn:
        rows = list_accounts(conn, platform)
    if as_json:
        emit_json({"accounts": rows})
        return
    emit_table(rows, COLUMNS, title="browser-lane accounts")


def _move(platform: str, account_id: str, state: str, reason: str) -> None:
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.accounts import AccountError, set_state, wake_waiting

    woken = 0
    try:
        with dbmod.connect() as conn:
            set_state(conn, platform, account_id, state, reason)
            if state == "ready":  # the samples that waited for an account go now
                woken = wake_waiting(conn, platform)
            conn.commit()
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"{platform}/{account_id}: {state}"
        + (f" ({woken} waiting sample(s) of {platform} due now)" if woken else "")
    )


@accounts_group.command("suspend")
@click.argument("platform")
@click.argument("account_id")
@click.option("--reason", default="suspended by an operator", show_default=True)
def suspend_cmd(platform: str, account_id: str, reason: str) -> None:
    """Take an account out of use (no lease is given to it until it is resumed)."""
    _move(platform, account_id, "suspended", reason)


@accounts_group.command("resume")
@click.argument("platform")
@click.argument("account_id")
def resume_cmd(platform: str, account_id: str) -> None:
    """Put an account back in use (after a person solved its captcha, for example)."""
    _move(platform, account_id, "ready", "resumed by an operator")


@accounts_group.command("login")
@click.argument("platform")
@click.argument("account_id")
@click.option(
    "--storage-state",
    "state_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A Playwright storage-state JSON exported from a person's logged-in browser.",
)
@click.option(
    "--profiles-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Root of the browser profiles (default: GEO_BROWSER_PROFILES).",
)
def login_cmd(platform: str, account_id: str, state_file: Path, profiles_dir: Path | None) -> None:
    """Import a person's login into the account's browser profile and mark it ready. The cookies
    go only into the profile directory (never the database, output or logs)."""
    import asyncio

    from geo_pipeline.connectors.browser.accounts import profile_dir
    from geo_pipeline.connectors.browser.connector import (
        chromium_path,
        import_storage_state,
        profiles_root,
    )
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.accounts import AccountError, list_accounts

    cookies = read_storage_state(state_file)
    try:
        target = profile_dir(profiles_dir or profiles_root(), platform, account_id)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        with dbmod.connect() as conn:
            if not any(r["account_id"] == account_id for r in list_accounts(conn, platform)):
                raise AccountError(
                    f"no account {account_id!r} of platform {platform!r}; add it first with "
                    f"`geo-pipeline accounts add {platform} {account_id}`"
                )
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    count = asyncio.run(import_storage_state(chromium_path(), target, cookies))
    _move(platform, account_id, "ready", f"login imported ({count} cookies)")


def register(root: click.Group) -> None:
    root.add_command(accounts_group)
