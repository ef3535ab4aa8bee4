"""A run with a browser channel through the REAL worker (PostgreSQL, Redis, the fenced
completion, the evidence archive) against the simulator's chat web app over HTTP in headless
Chromium (issue #32): desktop and mobile samples of two apps complete, each with a screenshot of its
device's pixel size and the raw stream archived."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from PIL import Image
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.browser.accounts import LocalAccounts, profile_dir
from geo_pipeline.connectors.browser.connector import BrowserConnector, import_storage_state
from geo_pipeline.connectors.browser.spec import DEVICES
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.retry import RetryPolicy
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.evidence.access import read_object
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store.accounts import Pacing as AccountPacing
from geo_pipeline.store.accounts import PgAccounts, add_account, set_state
from geo_pipeline.worker.browser import build_connectors
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess
from geo_pipeline_tests.integration.execution.helpers import CAPS, check_invariants, fetch, states
from geo_pipeline_tests.integration.execution.test_worker_flow import all_terminal, run_worker_until
from geo_pipeline_tests.ops.conftest import chromium_or_skip
from geo_pipeline_tests.ops.test_browser_lane import (
    QUESTION,
    browser_entry,
    counts,
    faults,
    log_in,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

# Each app's stream, exactly as captured, starts with its own first frame.
PLATFORMS = {"deepseek": b"event: ready", "doubao": b'data: {"patch_op"'}
MODES = {"deepseek": "web_search", "doubao": "standard"}  # doubao's prices: no web_search
# The shipped registry's browser channels and the simulator web app each drives.
WEB = {"deepseek_web": "deepseek", "doubao_web": "doubao"}


def web_run(questions: list[str] | None = None, devices: tuple[str, ...] = ("desktop", "mobile"),
            platforms: tuple[str, ...] = tuple(WEB), repeats: int = 1) -> dict[str, Any]:  # fmt: skip
    return {
        "tenant": "acme",
        "brand": {"name": "瑞幸", "aliases": ["Luckin"]},
        "questions": questions or [QUESTION],
        "channels": [
            {"platform": p, "device": d, "regions": ["cn"], "modes": ["web_search"]}
            for p in platforms
            for d in devices
        ],
        "repeats": repeats,
        "screenshot": "required",
    }


def make_browser_run(
    db_url: str, run_id: str, caps: dict[str, Any], raw: dict[str, Any] | None = None
) -> list[str]:
    raw = raw or {
        "tenant": "acme",
        "brand": {"name": "瑞幸", "aliases": ["Luckin"]},
        "questions": [QUESTION],
        "channels": [
            {"platform": p, "device": d, "regions": ["cn"], "modes": [MODES[p]]}
            for p in PLATFORMS
            for d in ("desktop", "mobile")
        ],
        "repeats": 1,
        "screenshot": "required",
    }
    config = normalise_and_validate(raw, caps)
    plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        ledger.deposit(conn, "acme", 10**10, "CNY", f"dep-{run_id}")  # type: ignore[arg-type]
        conn.commit()
        create_run(conn, plan, confirm=True, dispatch=True)  # type: ignore[arg-type]
        conn.commit()
    return [s.sample_id for s in plan.samples]


def pg_log_in(
    sim: SimulatorProcess, db_url: str, platform: str, account: str, root: Path, budget: int = 50
) -> None:
    """`accounts add` then `accounts login` as an operator does: the account in geo.accounts,
    a person's exported session imported into its profile under ``root`` (the directory
    GEO_BROWSER_PROFILES names), the account ready."""
    app = str(load_registry().entry(platform).options["app"])
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        add_account(conn, platform, account, AccountPacing(budget, 0.0, 0.0))  # type: ignore[arg-type]
        conn.commit()
    resp = httpx.post(f"{sim.url}/ui/{app}/login", data={"account": account}, timeout=30)
    assert resp.status_code == 302, resp.text
    cookie = {
        "name": "sim_session",
        "value": resp.cookies["sim_session"],
        "domain": "127.0.0.1",
        "path": f"/ui/{app}/",
        "expires": time.time() + 86400,
        "httpOnly": True,
        "secure": False,
        "sameSite": "Lax",
    }
    asyncio.run(
        import_storage_state(chromium_or_skip(), profile_dir(root, platform, account), [cookie])
    )
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        set_state(conn, platform, account, "ready", "logged in")  # type: ignore[arg-type]
        conn.commit()


def registry_env(monkeypatch: pytest.MonkeyPatch, sim: SimulatorProcess, root: Path) -> None:
    """The deployment's environment for the shipped registry's browser channels: the web apps
    at the simulator, the profiles directory named (which enables them), Debian's chromium."""
    monkeypatch.setenv("GEO_SIMULATOR_URL", sim.url)
    monkeypatch.setenv("GEO_BROWSER_PROFILES", str(root))
    monkeypatch.setenv("GEO_CHROMIUM", chromium_or_skip())
    monkeypatch.delenv("GEO_CONNECTORS_FILE", raising=False)


def test_a_browser_run_completes_through_the_worker(
    own_simulator: Callable[..., SimulatorProcess],
    tmp_path: Path,
    db_url: str,
    redis_url: str,
    redis_ns: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shipped registry's browser channels, built as `geo-pipeline worker` builds them
    (accounts leased from geo.accounts), serve a run on desktop and mobile."""
    sim = own_simulator()
    root = tmp_path / "profiles"
    registry_env(monkeypatch, sim, root)
    registry = load_registry()
    for p in WEB:
        pg_log_in(sim, db_url, p, "a1", root)
    conns = build_connectors(registry, list(WEB), None, db_url=db_url, owner="worker:test:1")
    assert all(isinstance(c, BrowserConnector) for c in conns.values())
    assert all(isinstance(c.accounts, PgAccounts) for c in conns.values())  # type: ignore[attr-defined]
    caps = {**CAPS, **registry.capabilities()}
    ids = make_browser_run(db_url, "r-browser", caps, web_run())
    archive = LocalArchive(tmp_path / "archive")

    async def run() -> dict[str, int]:
        try:
            return await run_worker_until(
                db_url,
                redis_url,
                redis_ns,
                conns,
                all_terminal(db_url),
                timeout_s=400.0,
                archive=archive,
                capabilities=caps,
            )
        finally:
            for c in conns.values():
                await c.aclose()  # type: ignore[attr-defined]

    asyncio.run(run())
    assert states(db_url) == {"completed": len(ids)} and len(ids) == 2 * len(WEB)
    check_invariants(db_url, expected_samples=len(ids))
    sent = counts(sim)
    assert {app: sent[app]["a1"]["sends"] for app in WEB.values()} == dict.fromkeys(WEB.values(), 2)
    rows = fetch(
        db_url,
        "SELECT s.platform, s.device, o.kind, o.storage_key, o.sha256, o.mime_type "
        "FROM geo.samples s JOIN geo.evidence_objects o USING (sample_id)",
    )
    found: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        found.setdefault((r["platform"], r["device"]), {})[r["kind"]] = r
    assert set(found) == {(p, d) for p in WEB for d in ("desktop", "mobile")}
    for (platform, device), objects in sorted(found.items()):
        profile = DEVICES[device]
        shot = objects["screenshot"]
        png = read_object(archive, shot["storage_key"], "screenshot", shot["sha256"])
        width, height = Image.open(io.BytesIO(png)).size
        assert width == int(profile.width * profile.scale), (platform, device, width)
        assert height >= int(profile.height * profile.scale), (platform, device, height)
        assert "thumbnail" in objects
        assert {"page_html", "capture"} <= set(objects), sorted(objects)
        raw = objects["response_raw"]  # the stream exactly as captured from the network
        assert raw["mime_type"].startswith("text/event-stream"), raw["mime_type"]
        body = read_object(archive, raw["storage_key"], "response_raw", raw["sha256"])
        assert body.startswith(PLATFORMS[WEB[platform]]), (platform, body[:40])
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        accts = conn.execute(
            "SELECT platform, sends_today, lease_owner FROM geo.accounts"
        ).fetchall()
    assert {(a["platform"], a["sends_today"], a["lease_owner"]) for a in accts} == {
        (p, 2, None) for p in WEB
    }


def test_login_expiry_mid_run_waits_then_finishes_after_a_login(
    own_simulator: Callable[..., SimulatorProcess],
    tmp_path: Path,
    db_url: str,
    redis_url: str,
    redis_ns: str,
) -> None:
    """a1's session expires after one answer (login wall); a2 is not logged in yet. The other
    samples wait (never failed, never charged) until a person logs a2 in; then they finish."""
    sim = own_simulator()
    faults(sim, "deepseek", expire_after=1)
    conn = build_connector(browser_entry(sim, "deepseek", tmp_path / "profiles", ["a1", "a2"]))
    assert isinstance(conn, BrowserConnector) and isinstance(conn.accounts, LocalAccounts)
    accounts = conn.accounts
    accounts.set_state("deepseek", "a2", "needs_login")
    caps = {**CAPS, "deepseek": conn.capabilities()}
    raw = {
        "tenant": "acme",
        "brand": {"name": "瑞幸", "aliases": ["Luckin"]},
        "questions": [QUESTION, QUESTION + "？", QUESTION + "！"],
        "channels": [{"platform": "deepseek", "device": "desktop", "regions": ["cn"]}],
        "repeats": 1,
        "screenshot": "optional",
    }
    ids = make_browser_run(db_url, "r-expiry", caps, raw)
    policy = RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, wait_base_s=0.2, wait_max_s=1.0)

    def waiting_for_login() -> bool:
        return bool(
            fetch(
                db_url,
                "SELECT 1 FROM geo.state_transitions WHERE reason = 'unavailable:needs_login'",
            )
        )

    async def person_logs_in() -> None:
        while not await asyncio.to_thread(waiting_for_login):
            await asyncio.sleep(0.1)
        faults(sim, "deepseek", expire_after=None)  # a2's fresh session lasts
        await log_in(sim, conn, "a2")
        accounts.set_state("deepseek", "a2", "ready")

    async def run() -> None:
        try:
            await log_in(sim, conn, "a1")
            login = asyncio.create_task(person_logs_in())
            await run_worker_until(
                db_url,
                redis_url,
                redis_ns,
                {"deepseek": conn},
                all_terminal(db_url),
                timeout_s=300.0,
                capabilities=caps,
                retry=policy,
            )
            await login
        finally:
            await conn.aclose()

    asyncio.run(run())
    assert states(db_url) == {"completed": len(ids)}
    check_invariants(db_url, expected_samples=len(ids))
    seen = counts(sim)["deepseek"]
    assert seen["a1"]["sends"] == 1 and seen["a1"]["expired"] == 1
    assert seen["a2"]["sends"] == 2  # each waiting sample asked once, after the login
    assert accounts.state("deepseek", "a1") == "needs_login"
    waits = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.attempts WHERE error_class = 'unavailable' "
        "AND outcome = 'not_accepted'",
    )[0]["n"]
    assert waits >= 1
    charged = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.ledger_entries l JOIN geo.attempts a "
        "USING (sample_id, attempt_no) WHERE l.kind = 'charge' AND a.error_class IS NOT NULL",
    )[0]["n"]
    assert charged == 0
