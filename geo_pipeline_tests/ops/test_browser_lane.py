"""The browser lane (issue #32) in headless Debian chromium against the simulator's chat web apps
over real HTTP: captures on desktop and mobile for two platforms (screenshot pixel size of the
device, citations and search queries parsed from the captured stream, raw stream kept), and the
failure classes judged from the simulator's per-account counts (captcha -> account suspended and
no further sends; login expiry -> needs_login; a changed layout -> nothing sent)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from geo_pipeline.connectors.base import ConnectorError, SubmitRequest
from geo_pipeline.connectors.browser.accounts import LocalAccounts
from geo_pipeline.connectors.browser.connector import BrowserConnector, import_storage_state
from geo_pipeline.connectors.browser.spec import (
    DEVICES,
    AccountSuspended,
    InvalidCapability,
    NeedsLogin,
    NoAccountReady,
)
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.retry import ErrorFacts, RetryPolicy, classify
from geo_pipeline.evidence.thumbnails import screenshot_derivatives
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, registry_for
from geo_pipeline_tests.ops.conftest import ARTIFACTS, chromium_or_skip

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

QUESTION = "国内最好喝的咖啡品牌？"


def browser_entry(sim: SimulatorProcess, platform: str, root: Path, accounts: list[str]) -> Any:
    """The simulator profile's registry entry as a ``protocol: browser`` channel."""
    base = registry_for(sim.url).entry(platform)
    caps = dataclasses.replace(
        base.capabilities,
        devices=("desktop", "mobile"),
        regions=("cn", "global"),
        modes=("standard", "web_search"),
    )
    return PlatformEntry(
        platform=platform,
        protocol="browser",
        base_url=sim.url,
        capabilities=caps,
        options={
            "chromium": chromium_or_skip(),
            "profiles_dir": str(root),
            "accounts": accounts,
            "type_delay_ms": 0,
            "stable_poll_s": 0.2,
            "answer_timeout_s": 60,
            "min_gap_s": 0,
            "jitter_s": 0,
        },
    )


async def log_in(sim: SimulatorProcess, conn: BrowserConnector, account: str) -> None:
    """A person logs in once (here over HTTP) and exports the session; the storage-state
    cookies are imported into the account's persistent profile."""
    platform = conn.platform
    async with httpx.AsyncClient(base_url=sim.url) as client:
        resp = await client.post(f"/ui/{platform}/login", data={"account": account})
        assert resp.status_code == 302
        token = client.cookies["sim_session"]
    cookies = [
        {
            "name": "sim_session",
            "value": token,
            "domain": "127.0.0.1",
            "path": f"/ui/{platform}/",
            "httpOnly": True,
            "secure": False,
            "sameSite": "Lax",
            "expires": time.time() + 30 * 86400,
        }
    ]
    assert isinstance(conn.accounts, LocalAccounts)
    lease_dir = conn.accounts.root / platform / account
    assert await import_storage_state(conn.chromium, lease_dir, cookies) == 1


def request(n: int, device: str, mode: str = "web_search", region: str = "cn") -> SubmitRequest:
    return SubmitRequest(f"s{n}", 1, "acme", QUESTION, "x", device, region, mode, True)


def counts(sim: SimulatorProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/ui/_control/counts", timeout=10).json())


def faults(sim: SimulatorProcess, platform: str, **values: Any) -> None:
    httpx.post(
        f"{sim.url}/ui/_control/faults/{platform}", json=values, timeout=10
    ).raise_for_status()


@pytest.mark.parametrize("platform", ["deepseek", "doubao"])
def test_capture_on_desktop_and_mobile(
    own_simulator: Callable[..., SimulatorProcess], tmp_path: Path, platform: str
) -> None:
    sim = own_simulator()
    conn = build_connector(browser_entry(sim, platform, tmp_path, ["a1"]))
    assert isinstance(conn, BrowserConnector)

    async def run() -> list[Any]:
        try:
            await log_in(sim, conn, "a1")
            out = []
            for n, device in enumerate(("desktop", "mobile")):
                req = request(n, device)
                acc = await conn.submit(req)
                assert (await conn.poll(acc.upstream_id)).state == "completed"
                out.append((device, acc, await conn.fetch_evidence(acc.upstream_id, req)))
            return out
        finally:
            await conn.aclose()

    results = asyncio.run(run())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for device, acc, ev in results:
        profile = DEVICES[device]
        assert ev.collection_state == "completed" and QUESTION in ev.answer_text
        # The raw stream exactly as captured from the network, in the app's own frame shape.
        assert ev.raw_mime_type == "text/event-stream" and acc.inline_result == ev.raw_body
        first = b"event: ready" if platform == "deepseek" else b'data: {"patch_op"'
        assert ev.raw_body.startswith(first)
        assert "DOM_FALLBACK" not in ev.warnings and not ev.provider_truncated
        # Search queries and citations parsed from the stream, each cited one at its marker.
        assert ev.search_queries == (QUESTION, QUESTION + " 推荐") and ev.web_search_used
        assert ev.citations
        for c in ev.citations:
            assert c.url.startswith("https://")
            if c.relation == "cited":
                assert c.span_start is not None and c.span_end is not None
                assert ev.answer_text[c.span_start : c.span_end] == f"[{c.id}]"
        assert any(c.relation == "cited" for c in ev.citations)
        # The screenshot at native resolution: CSS viewport x device pixel ratio.
        assert ev.screenshot is not None and ev.screenshot.data is not None
        png = ev.screenshot.data
        (ARTIFACTS / f"browser-{platform}-{device}.png").write_bytes(png)
        width, height = Image.open(io.BytesIO(png)).size
        assert width == int(profile.width * profile.scale)
        assert height >= int(profile.height * profile.scale)
        info, thumb = screenshot_derivatives(png)
        assert (info.width, info.height) == (width, height)
        assert max(Image.open(io.BytesIO(thumb)).size) < max(width, height)  # the thumbnail
        assert ev.page_html is not None and QUESTION.encode() in ev.page_html
        assert ev.capture["device"] == device and ev.capture["locale"] == "zh-CN"
        assert ev.capture["viewport"] == f"{profile.width}x{profile.height}"
    assert counts(sim)[platform]["a1"]["sends"] == 2


def test_captcha_suspends_the_account_and_nothing_more_is_sent(
    own_simulator: Callable[..., SimulatorProcess], tmp_path: Path
) -> None:
    sim = own_simulator()
    faults(sim, "doubao", captcha_after=1)
    conn = build_connector(browser_entry(sim, "doubao", tmp_path, ["a1"]))
    assert isinstance(conn, BrowserConnector) and isinstance(conn.accounts, LocalAccounts)

    async def run() -> None:
        try:
            await log_in(sim, conn, "a1")
            await conn.submit(request(1, "desktop"))
            with pytest.raises(AccountSuspended):
                await conn.submit(request(2, "desktop"))
            with pytest.raises(NoAccountReady):
                await conn.submit(request(3, "desktop"))
        finally:
            await conn.aclose()

    asyncio.run(run())
    assert conn.accounts.state("doubao", "a1") == "suspended"
    seen = counts(sim)["doubao"]["a1"]
    assert seen["sends"] == 1 and seen["captcha_shown"] == 1


def test_login_expiry_parks_the_account_and_a_changed_layout_sends_nothing(
    own_simulator: Callable[..., SimulatorProcess], tmp_path: Path
) -> None:
    sim = own_simulator()
    faults(sim, "deepseek", expire_after=1)
    conn = build_connector(browser_entry(sim, "deepseek", tmp_path, ["a1", "a2"]))
    assert isinstance(conn, BrowserConnector) and isinstance(conn.accounts, LocalAccounts)

    async def run() -> None:
        try:
            await log_in(sim, conn, "a1")
            await conn.submit(request(1, "desktop"))
            with pytest.raises(NeedsLogin):
                await conn.submit(request(2, "desktop"))  # a1 again: its session expired
            faults(sim, "deepseek", layout="changed", expire_after=None)
            await log_in(sim, conn, "a2")
            with pytest.raises(InvalidCapability):
                await conn.submit(request(3, "mobile"))
        finally:
            await conn.aclose()

    asyncio.run(run())
    assert conn.accounts.state("deepseek", "a1") == "needs_login"
    assert conn.accounts.state("deepseek", "a2") == "ready"  # the page changed, not the account
    seen = counts(sim)["deepseek"]
    assert seen["a1"]["sends"] == 1 and seen["a1"]["expired"] == 1
    assert "sends" not in seen["a2"]


def test_a_truncated_stream_is_kept_raw_and_marked(
    own_simulator: Callable[..., SimulatorProcess], tmp_path: Path
) -> None:
    sim = own_simulator()
    faults(sim, "doubao", truncate=True, chunk_delay_s=0.01)
    conn = build_connector(browser_entry(sim, "doubao", tmp_path, ["a1"]))
    assert isinstance(conn, BrowserConnector)

    async def run() -> Any:
        try:
            await log_in(sim, conn, "a1")
            req = request(1, "desktop", mode="standard")
            acc = await conn.submit(req)
            return await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    ev = asyncio.run(run())
    assert ev.provider_truncated and "STREAM_INCOMPLETE" in ev.warnings
    assert b"SSE_REPLY_END" not in ev.raw_body and ev.raw_body.startswith(b"data: ")
    assert not ev.search_queries and not ev.web_search_used  # standard mode: the toggle stays off


def test_pg_accounts_login_by_cli_and_a_captcha_suspends_only_that_account(
    own_simulator: Callable[..., SimulatorProcess],
    tmp_path: Path,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Accounts leased from geo.accounts; logins imported with `accounts login
    --storage-state`; a captcha on one account suspends it in the database and its sends stop,
    while the other account carries on."""
    from click.testing import CliRunner

    from geo_pipeline.cli.accounts import accounts_group
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.accounts import PgAccounts

    sim = own_simulator()
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    monkeypatch.setenv("GEO_BROWSER_PROFILES", str(tmp_path / "profiles"))
    monkeypatch.setenv("GEO_CHROMIUM", chromium_or_skip())
    runner = CliRunner()

    def cli(*args: str) -> str:
        result = runner.invoke(accounts_group, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    for acct in ("a1", "a2"):
        cli("add", "doubao", acct, "--min-gap-s", "0", "--jitter-s", "0")
        token = httpx.post(f"{sim.url}/ui/doubao/login", data={"account": acct}).cookies[
            "sim_session"
        ]
        state = tmp_path / f"{acct}.json"
        cookie = {
            "name": "sim_session",
            "value": token,
            "domain": "127.0.0.1",
            "path": "/ui/doubao/",
            "expires": int(time.time()) + 86400,
            "httpOnly": True,
            "secure": False,
            "sameSite": "Lax",
        }
        state.write_text(json.dumps({"cookies": [cookie], "origins": []}))
        out = cli("login", "doubao", acct, "--storage-state", str(state))
        assert "ready" in out and token not in out

    entry = browser_entry(sim, "doubao", tmp_path / "profiles", [])

    class Connect:
        def __call__(self) -> Any:
            return dbmod.connect(db_url)

    accounts = PgAccounts(Connect(), "w1", tmp_path / "profiles")
    conn = BrowserConnector(entry, accounts)

    async def run() -> list[str]:
        used = []
        try:
            for n in range(2):
                used.append((await conn.submit(request(n, "desktop"))).upstream_id.split(":")[1])
            faults(sim, "doubao", captcha_accounts=["a1"])
            with pytest.raises(AccountSuspended):
                await conn.submit(request(2, "desktop"))  # a1, least recently used
            for n in range(3, 5):
                used.append((await conn.submit(request(n, "mobile"))).upstream_id.split(":")[1])
        finally:
            await conn.aclose()
        return used

    assert asyncio.run(run()) == ["a1", "a2", "a2", "a2"]
    with dbmod.connect(db_url) as db:
        rows = {r["account_id"]: r for r in db.execute("SELECT * FROM geo.accounts").fetchall()}
    assert rows["a1"]["state"] == "suspended" and rows["a2"]["state"] == "ready"
    assert (rows["a1"]["sends_today"], rows["a2"]["sends_today"]) == (1, 3)
    seen = counts(sim)["doubao"]
    assert seen["a1"]["sends"] == 1 and seen["a2"]["sends"] == 3


def test_an_unknown_outcome_is_looked_up_in_the_history_sidebar(
    own_simulator: Callable[..., SimulatorProcess], tmp_path: Path
) -> None:
    """R12 for the browser lane: after a send whose outcome is unknown, the send journal names
    the account and its history says whether the question was sent -- by its exact text, each
    of two sends of the same question paired with its own conversation (newest first); a key
    never journalled is absent. A found one is re-opened and captured from the page."""
    sim = own_simulator()
    conn = build_connector(browser_entry(sim, "kimi", tmp_path, ["a1"]))
    assert isinstance(conn, BrowserConnector)
    first, second = request(1, "desktop"), request(2, "mobile")  # the same question twice

    async def run() -> tuple[Any, ...]:
        try:
            await log_in(sim, conn, "a1")
            await conn.submit(first)
            await conn.submit(second)
            lease = await conn.accounts.acquire("kimi")
            try:
                matches = await conn.history_matches(lease, f"  {QUESTION} ")
                absent = await conn.find_in_history(lease, "另一个问题？")
            finally:
                await conn.accounts.release(lease, "not_sent")
            found = []
            for req in (first, second):
                acc = await conn.lookup(req.idempotency_key)
                assert acc is not None
                found.append(await conn.fetch_evidence(acc.upstream_id, req))
            never = await conn.lookup("s9:1")
            return matches, absent, found, never
        finally:
            await conn.aclose()

    matches, absent, (ev1, ev2), never = asyncio.run(run())
    assert len(matches) == 2 and all(m.startswith(f"{sim.url}/ui/kimi/c/") for m in matches)
    assert absent is None and never is None
    # Newest first: the second send is the sidebar's first conversation, the first its second.
    assert (ev2.capture["page_url"], ev1.capture["page_url"]) == (matches[0], matches[1])
    for ev, device in ((ev1, "desktop"), (ev2, "mobile")):
        assert "RECOVERED_FROM_HISTORY" in ev.warnings and ev.answer_text.strip()
        assert ev.capture["device"] == device  # the device the question was sent from
        assert ev.screenshot is not None and ev.screenshot.data
    assert counts(sim)["kimi"]["a1"]["sends"] == 2  # looking up asked nothing


def test_a_rate_limited_page_waits_for_its_hint_and_cools_the_account(
    own_simulator: Callable[..., SimulatorProcess], tmp_path: Path
) -> None:
    """A page saying "too many requests" (HTTP 429, Retry-After: 42) sent nothing: the sample
    waits (``unavailable``, never failed after the rate-limit budget) for the page's hint, and
    the account cools down until then while the others carry on."""
    sim = own_simulator()
    faults(sim, "doubao", rate_limited=True, rate_limited_retry_s=42)
    conn = build_connector(browser_entry(sim, "doubao", tmp_path, ["a1", "a2"]))
    assert isinstance(conn, BrowserConnector) and isinstance(conn.accounts, LocalAccounts)
    accounts = conn.accounts

    async def run() -> Any:
        try:
            await log_in(sim, conn, "a1")
            with pytest.raises(ConnectorError) as caught:
                await conn.submit(request(1, "desktop", mode="standard"))
            return caught.value
        finally:
            await conn.aclose()

    exc = asyncio.run(run())
    assert exc.error_class == "unavailable" and getattr(exc, "cause", None) == "rate_limited"
    assert exc.retry_after_s == 42.0
    assert accounts.state("doubao", "a1") == "cooling_down"
    assert accounts.state("doubao", "a2") == "ready"
    seen = counts(sim)["doubao"]["a1"]
    assert seen["rate_limited_shown"] == 1 and "sends" not in seen
    d = classify(
        ErrorFacts(exc.error_class, "submit", 9, 8, 1e6, exc.retry_after_s, cause="rate_limited"),
        RetryPolicy(),
        rnd=0.0,
    )
    assert (d.action, d.delay_s, d.reason) == ("retry", 42.0, "unavailable:rate_limited")
