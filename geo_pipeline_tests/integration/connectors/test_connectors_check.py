"""``connectors check`` against the simulator process: one real request per platform over HTTP,
reporting auth, model availability, web search, latency and citations; skipped without a key."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from geo_pipeline.cli.main import main
from geo_pipeline.connectors import check
from geo_pipeline.domain.catalogue import PlatformEntry, Registry
from geo_pipeline_tests.fixtures.simulator import (
    PROTOCOL_PLATFORMS,
    SimulatorProcess,
    registry_with_protocols,
)

KEY_VAR = "GEO_TEST_CONNECTORS_CHECK_KEY"
KEY = "sk-check-0123"
# Every platform the simulator serves for the model ``deepseek`` demands this key.
AUTH_PROFILE = {"platforms": {"deepseek": {"require_auth": True, "api_key": KEY}}}


def keyed(reg: Registry, names: list[str], **options: object) -> list[PlatformEntry]:
    """The named entries as real engines: a key variable that must be set."""
    return [
        dataclasses.replace(
            reg.entry(n),
            api_key_env=KEY_VAR,
            requires_key=True,
            options={**reg.entry(n).options, **options},
        )
        for n in names
    ]


def run(entries: list[PlatformEntry]) -> list[check.CheckResult]:
    return asyncio.run(check.check_platforms(entries, timeout_s=60))


@pytest.fixture
def sim(own_simulator: Callable[..., SimulatorProcess]) -> SimulatorProcess:
    return own_simulator(AUTH_PROFILE)


def test_every_protocol_answers_with_search_and_citations(
    sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    # The four synchronous protocols, OpenAI chat, and the simulator's asynchronous task API.
    names = [*PROTOCOL_PLATFORMS, "deepseek"]
    results = run(keyed(registry_with_protocols(sim.url), names))
    by_name = {r.platform: r for r in results}
    assert set(by_name) == set(names)
    for r in results:
        assert (r.status, r.auth, r.model_available) == ("ok", "ok", True), r
        assert r.latency_ms is not None and r.latency_ms >= 0
        assert r.citations is not None and r.citations >= 1, r
        assert r.key_variable == KEY_VAR
    for name in ("responses_sim", "perplexity_sim", "gemini_sim", "anthropic_sim"):
        assert by_name[name].web_search_used is True
        # The usage the answer reported ("in/out" tokens): what a no-cost-API vendor is
        # reconciled from.
        usage = by_name[name].usage_tokens
        assert usage is not None and all(int(n) > 0 for n in usage.split("/")), usage
    assert by_name["deepseek"].mode == "web_search"  # the simulator's deepseek offers it
    assert not check.failed(results)


def test_a_wrong_key_is_an_auth_failure(
    sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-wrong")
    results = run(keyed(registry_with_protocols(sim.url), [*PROTOCOL_PLATFORMS, "deepseek"]))
    for r in results:
        assert (r.status, r.auth) == ("failed", "failed"), r
        assert KEY_VAR in r.detail and "sk-wrong" not in r.detail
    assert check.failed(results)


def test_an_unknown_model_is_reported_as_unavailable(
    simulator_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    entries = keyed(registry_with_protocols(simulator_url), ["responses_sim"], model="gpt-nope")
    [r] = run(entries)
    assert (r.status, r.auth, r.model_available, r.model) == ("failed", "ok", False, "gpt-nope")
    assert "model" in r.detail


def test_without_the_key_the_platform_is_skipped_naming_the_variable(
    simulator_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    results = run(keyed(registry_with_protocols(simulator_url), ["openai_sim", "gemini_sim"]))
    for r in results:
        assert (r.status, r.auth, r.latency_ms) == ("skipped", "not_checked", None)
        assert KEY_VAR in r.detail
    assert check.failed(results)  # nothing was checked: the check does not pass
    stats = json.loads(json.dumps(results[0].as_dict()))
    assert stats["key_variable"] == KEY_VAR


def write_registry(path: Path, url: str) -> Path:
    """A deployment's registry file: two real-protocol engines behind one key variable."""
    common = (
        f"requires_key: true, api_key_env: {KEY_VAR}, options: {{model: deepseek}}, "
        "devices: [web], regions: [global], modes: [web_search], asynchronous: false, "
        "lookup_by_key: false, prices: {version: t, currency: USD, base: {web_search: 1}}"
    )
    path.write_text(
        "platforms:\n"
        f"  responses_chk: {{protocol: openai_responses, base_url: {url}/openai/v1, {common}}}\n"
        f"  gemini_chk: {{protocol: gemini, base_url: {url}/gemini/v1beta, {common}}}\n",
        encoding="utf-8",
    )
    return path


def cli_check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    try:
        code = main(["connectors", "check", "--json", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, json.loads(capsys.readouterr().out)


def test_the_command_end_to_end(
    sim: SimulatorProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GEO_CONNECTORS_FILE", str(write_registry(tmp_path / "r.yaml", sim.url)))

    monkeypatch.delenv(KEY_VAR, raising=False)
    code, out = cli_check(capsys)
    assert code == 1 and out["ok"] is False
    rows = out["platforms"]
    assert isinstance(rows, list) and {r["status"] for r in rows} == {"skipped"}
    assert all(KEY_VAR in r["detail"] for r in rows)

    monkeypatch.setenv(KEY_VAR, KEY)
    code, out = cli_check(capsys)
    assert code == 0 and out["ok"] is True
    rows = out["platforms"]
    assert isinstance(rows, list)
    assert [r["platform"] for r in rows] == ["gemini_chk", "responses_chk"]
    assert all(r["auth"] == "ok" and r["web_search_used"] and r["citations"] for r in rows)

    monkeypatch.setenv(KEY_VAR, "sk-wrong")
    code, out = cli_check(capsys, "gemini_chk")
    assert code == 1
    rows = out["platforms"]
    assert isinstance(rows, list) and [(r["platform"], r["auth"]) for r in rows] == [
        ("gemini_chk", "failed")
    ]

    code, out = cli_check(capsys, "nope")
    assert code == 2 and "not registered" in str(out["error"])
