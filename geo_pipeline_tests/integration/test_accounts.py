"""Browser-lane accounts in real PostgreSQL (geo.accounts, migration 0029): the operator CLI
(add, list, suspend, resume, login's storage-state checks) and the lease with its fencing token:
two workers never hold one account at once, a stale token writes nothing, pacing makes the next
send wait, a login wall or captcha takes the account out of the pool."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from geo_pipeline.cli.accounts import accounts_group
from geo_pipeline.connectors.browser.spec import NoAccountReady
from geo_pipeline.store import db as dbmod
from geo_pipeline.store.accounts import PgAccounts


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> Result:
        result = runner.invoke(accounts_group, list(args))
        assert (result.exit_code == 0) == ok, result.output
        return result

    return invoke


def _rows(db_url: str) -> dict[str, dict[str, Any]]:
    with dbmod.connect(db_url) as conn:
        rows = conn.execute("SELECT * FROM geo.accounts").fetchall()
    return {r["account_id"]: r for r in rows}


def test_cli_add_list_suspend_resume_and_bad_input(
    cli: Callable[..., Result], db_url: str, tmp_path: Path
) -> None:
    assert "added" in cli("add", "doubao", "a1", "--min-gap-s", "8").output
    assert "already registered" in cli("add", "doubao", "a1").output
    listed = json.loads(cli("list", "--json").output)["accounts"]
    assert [(a["account_id"], a["state"], a["min_gap_s"]) for a in listed] == [
        ("a1", "needs_login", 8.0)
    ]
    bad = cli("add", "doubao", "../evil", ok=False)
    assert "account id '../evil'" in bad.output
    assert "daily_budget: -1" in cli("add", "doubao", "a2", "--daily-budget", "-1", ok=False).output
    cli("resume", "doubao", "a1")
    assert _rows(db_url)["a1"]["state"] == "ready"
    cli("suspend", "doubao", "a1", "--reason", "captcha seen by hand")
    row = _rows(db_url)["a1"]
    assert (row["state"], row["state_reason"]) == ("suspended", "captcha seen by hand")
    assert "add it with" in cli("resume", "doubao", "nobody", ok=False).output

    # login's storage-state file is checked field by field; a cookie value is never shown.
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "cookies": [
                    {"name": "sid", "value": "SECRET-1"},
                    {"value": "SECRET-2", "domain": "x"},
                ]
            }
        )
    )
    out = cli("login", "doubao", "a1", "--storage-state", str(state), ok=False).output
    assert "cookies[0]: 'domain' (with 'path') or 'url' is required" in out
    assert "SECRET" not in out
    state.write_text("{}")
    assert (
        "cookies: a non-empty list"
        in cli("login", "doubao", "a1", "--storage-state", str(state), ok=False).output
    )
    # Nothing of a login is a column of the table (D2).
    with psycopg.connect(db_url) as conn:
        cols = {
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'geo' "
                "AND table_name = 'accounts'"
            ).fetchall()
        }
    assert not {c for c in cols if "cookie" in c or "password" in c or "token" in c} - {
        "fencing_token"
    }


def _pg(db_url: str, owner: str, root: Path, *, lease_s: float = 600.0) -> PgAccounts:
    @contextmanager
    def connect() -> Iterator[dbmod.Conn]:
        with dbmod.connect(db_url) as conn:
            yield conn

    return PgAccounts(connect, owner, root, lease_s=lease_s, rnd=lambda: 0.5)


def test_leases_are_exclusive_fenced_and_paced(
    cli: Callable[..., Result], db_url: str, tmp_path: Path
) -> None:
    for acct in ("a1", "a2", "a3"):
        cli("add", "deepseek", acct, "--min-gap-s", "60", "--jitter-s", "20")
        cli("resume", "deepseek", acct)
    w1, w2 = _pg(db_url, "w1", tmp_path), _pg(db_url, "w2", tmp_path)

    async def many() -> list[Any]:
        tries = [w.acquire("deepseek") for w in (w1, w2) for _ in range(5)]
        return await asyncio.gather(*tries, return_exceptions=True)

    got = asyncio.run(many())
    leases = [g for g in got if not isinstance(g, BaseException)]
    refused = [g for g in got if isinstance(g, BaseException)]
    # Three accounts: three leases, each account once, the rest told to wait.
    assert sorted(le.account_id for le in leases) == ["a1", "a2", "a3"]
    assert all(isinstance(r, NoAccountReady) for r in refused) and len(refused) == 7
    assert all(le.profile_dir == tmp_path / "deepseek" / le.account_id for le in leases)

    by_id = {le.account_id: le for le in leases}
    owner = {r["account_id"]: r["lease_owner"] for r in _rows(db_url).values()}

    def source(acct: str) -> PgAccounts:
        return w1 if owner[acct] == "w1" else w2

    async def settle() -> None:
        await source("a1").release(by_id["a1"], "sent")
        await source("a2").release(by_id["a2"], "needs_login")
        await source("a3").release(by_id["a3"], "suspended")

    asyncio.run(settle())
    rows = _rows(db_url)
    assert [rows[a]["state"] for a in ("a1", "a2", "a3")] == ["ready", "needs_login", "suspended"]
    assert rows["a1"]["sends_today"] == 1 and rows["a1"]["lease_owner"] is None
    # Pacing: a1's next send waits min gap + jitter x 0.5 = 70 s.
    with pytest.raises(NoAccountReady) as wait:
        asyncio.run(w2.acquire("deepseek"))
    assert wait.value.retry_after_s is not None and 60 < wait.value.retry_after_s <= 70

    # A stale token writes nothing: an expired lease taken over, then the old holder releases.
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE geo.accounts SET next_send_at = now() WHERE account_id = 'a1'")
    short = _pg(db_url, "w1", tmp_path, lease_s=0.0)
    old = asyncio.run(short.acquire("deepseek"))
    new = asyncio.run(w2.acquire("deepseek"))  # the 0 s lease expired at once
    assert (new.account_id, new.token) == ("a1", old.token + 1)
    asyncio.run(short.release(old, "suspended"))
    row = _rows(db_url)["a1"]
    assert (row["state"], row["lease_owner"]) == ("ready", "w2")


def test_a_suspended_account_is_an_alert_until_resumed(
    cli: Callable[..., Result], db_url: str, tmp_path: Path
) -> None:
    """A captcha suspends an account: the operations alert path (the sensor's incidents) names
    it and what to do, not only a log line; resuming it resolves the incident. An account that
    needs a login is one too (its samples wait for a person)."""
    from geo_pipeline.defs.operations.alerts import AlertThresholds, database_incidents, run_alerts

    for acct in ("a1", "a2", "a3"):
        cli("add", "doubao", acct, "--min-gap-s", "0", "--jitter-s", "0")
        cli("resume", "doubao", acct)
    accounts = _pg(db_url, "w1", tmp_path)

    async def captcha_then_login_wall() -> None:
        first = await accounts.acquire("doubao")
        await accounts.release(first, "suspended")
        second = await accounts.acquire("doubao")
        await accounts.release(second, "needs_login")

    asyncio.run(captcha_then_login_wall())

    def account_incidents() -> dict[str, Any]:
        with dbmod.connect(db_url) as conn:
            found = database_incidents(conn, AlertThresholds())
        return {k: a for k, a in found.items() if k.startswith("account:")}

    incidents = account_incidents()
    assert sorted(incidents) == ["account:doubao:a1", "account:doubao:a2"]
    suspended, logged_out = incidents["account:doubao:a1"], incidents["account:doubao:a2"]
    assert suspended.kind == "account_suspended" and "a1" in suspended.summary
    assert "captcha" in suspended.details["reason"]
    assert "geo-pipeline accounts resume doubao a1" in suspended.details["do"]
    assert logged_out.kind == "account_needs_login"
    assert "geo-pipeline accounts login doubao a2" in logged_out.details["do"]

    class Log:
        def warning(self, *a: Any) -> None: ...

        def info(self, *a: Any) -> None: ...

    cursor, sent = run_alerts(None, incidents, [], Log())
    assert {a.key for a in sent} == set(incidents)
    cli("resume", "doubao", "a1")
    _, resolved = run_alerts(cursor, account_incidents(), [], Log())
    assert [(a.key, a.resolved) for a in resolved] == [("account:doubao:a1", True)]
