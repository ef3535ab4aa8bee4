"""`geo-pipeline connectors check <x>_web` asks through the shared accounts (geo.accounts, as
every worker leases them), in headless chromium against the simulator's web app (issue #32)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from geo_pipeline.connectors.check import check_platform
from geo_pipeline.connectors.http import new_client
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.worker.browser import check_connector_builder
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess
from geo_pipeline_tests.integration.execution.helpers import fetch
from geo_pipeline_tests.ops.test_browser_lane import counts
from geo_pipeline_tests.ops.test_browser_worker import pg_log_in, registry_env

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]


def test_connectors_check_of_a_browser_channel_leases_a_shared_account(
    own_simulator: Callable[..., SimulatorProcess],
    tmp_path: Path,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = own_simulator()
    root = tmp_path / "profiles"
    registry_env(monkeypatch, sim, root)
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    pg_log_in(sim, db_url, "deepseek_web", "a1", root)
    entry = load_registry().entry("deepseek_web")

    async def run():  # type: ignore[no-untyped-def]
        async with new_client() as client:
            return await check_platform(
                entry, client, timeout_s=300, build=check_connector_builder(db_url)
            )

    result = asyncio.run(run())
    assert result.status == "ok", result
    assert result.web_search_used and result.citations > 0, result
    # The account the operator added answered, and the shared table knows it (its pacing and
    # daily budget hold for a check as for a worker).
    assert counts(sim)["deepseek"]["a1"]["sends"] == 1
    row = fetch(db_url, "SELECT sends_today, lease_owner FROM geo.accounts")[0]
    assert row == {"sends_today": 1, "lease_owner": None}
