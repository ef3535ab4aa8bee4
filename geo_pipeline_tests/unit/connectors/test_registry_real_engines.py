"""The shipped registry's real engines: disabled until their key variable is set, refused for
planning with the variable named, enabled once it is; the simulator's platforms unchanged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import geo_pipeline.connectors.registry as registry_module
from geo_pipeline.connectors.protocols import BUILDERS
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import (
    OfferedCapabilities,
    PlatformDisabled,
    RegistryError,
    parse_catalogue,
)
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_loading import load_config_file
from geo_pipeline.flows.create_run import plan_run

BUNDLED = Path(registry_module.__file__).with_name("registry.yaml")
EXAMPLE = Path(__file__).parents[3] / "examples" / "collection.yaml"

REAL = {
    "deepseek_api": ("GEO_DEEPSEEK_API_KEY", "openai_chat", "CNY"),
    "doubao_api": ("GEO_DOUBAO_API_KEY", "openai_chat", "CNY"),
    "qwen_api": ("GEO_QWEN_API_KEY", "openai_chat", "CNY"),
    "kimi_api": ("GEO_KIMI_API_KEY", "openai_chat", "CNY"),
    "openai_responses_api": ("GEO_OPENAI_API_KEY", "openai_responses", "USD"),
    "perplexity_sonar_api": ("GEO_PERPLEXITY_API_KEY", "perplexity", "USD"),
    "gemini_grounded_api": ("GEO_GEMINI_API_KEY", "gemini", "USD"),
    "anthropic_web_search_api": ("GEO_ANTHROPIC_API_KEY", "anthropic", "USD"),
}
# Answer-scraping services (access: scraped), keyed like the real engines.
SERVICES = {
    "chatgpt_cloro": ("GEO_CLORO_API_KEY", "cloro", "USD"),
    "aimode_cloro": ("GEO_CLORO_API_KEY", "cloro", "USD"),
    "chatgpt_dataforseo": ("GEO_DATAFORSEO_CREDENTIALS", "dataforseo", "USD"),
    "aimode_serpapi": ("GEO_SERPAPI_API_KEY", "serpapi", "USD"),
    "aioverview_serpapi": ("GEO_SERPAPI_API_KEY", "serpapi", "USD"),
    "chatgpt_brightdata": ("GEO_BRIGHTDATA_API_KEY", "brightdata", "USD"),
}
# The browser lane's channels (issue #32): disabled until the profiles directory is named.
BROWSER = {
    "deepseek_web": ("GEO_BROWSER_PROFILES", "browser", "CNY"),
    "doubao_web": ("GEO_BROWSER_PROFILES", "browser", "CNY"),
    "kimi_web": ("GEO_BROWSER_PROFILES", "browser", "CNY"),
}
KEYED = {**REAL, **SERVICES, **BROWSER}
SIMULATED = {"deepseek", "doubao", "kimi", "qwen", "openai_sim", "chatgpt_api_sim"}


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEO_CONNECTORS_FILE", raising=False)
    for var, _, _ in KEYED.values():
        monkeypatch.delenv(var, raising=False)


def config_naming(platform: str, mode: str) -> dict[str, Any]:
    raw = dict(load_config_file(EXAMPLE))
    raw["channels"] = [{"platform": platform, "device": "web", "modes": [mode]}]
    return raw


def test_without_keys_every_real_engine_is_registered_but_disabled(no_keys: None) -> None:
    reg = load_registry()
    assert set(reg.disabled) == set(KEYED)
    assert set(reg.entries) == SIMULATED  # the demo's and the tests' platforms, unchanged
    caps = reg.capabilities()
    assert set(caps) == SIMULATED
    assert all(not ch.startswith(tuple(KEYED)) for ch in reg.channels())
    for name in REAL:
        assert name not in caps
        with pytest.raises(PlatformDisabled, match=REAL[name][0]):
            caps.get(name)
        with pytest.raises(PlatformDisabled, match=REAL[name][0]):
            caps[name]
        with pytest.raises(PlatformDisabled, match=REAL[name][0]):
            reg.entry(name)
    assert caps.get("nope") is None
    with pytest.raises(KeyError):
        caps["nope"]


def test_planning_a_disabled_engine_names_the_variable_to_set(no_keys: None) -> None:
    caps = load_registry().capabilities()
    with pytest.raises(PlatformDisabled) as err:
        normalise_and_validate(config_naming("deepseek_api", "standard"), caps)
    assert err.value.variable == "GEO_DEEPSEEK_API_KEY"
    assert "GEO_DEEPSEEK_API_KEY" in str(err.value) and "deepseek_api" in str(err.value)
    # A CLI command reports it as a registry error (exit 2), never as a traceback.
    assert isinstance(err.value, RegistryError)


@pytest.mark.parametrize("platform", sorted(REAL))
def test_setting_the_key_enables_the_engine(
    no_keys: None, monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    var, protocol, currency = REAL[platform]
    monkeypatch.setenv(var, "sk-test-not-a-real-key")
    reg = load_registry()
    assert platform in reg.entries and platform not in reg.disabled
    entry = reg.entry(platform)
    assert entry.protocol == protocol and entry.api_key_env == var and entry.requires_key
    caps = reg.capabilities()[platform]
    assert caps.prices.currency == currency
    assert not caps.asynchronous and not caps.lookup_by_key and not caps.screenshot
    assert f"{platform}__web" in reg.channels()
    plan = plan_run(config_naming(platform, caps.modes[-1]), reg.capabilities())
    assert {t.platform for t in plan.config.targets} == {platform}
    # The other engines stay disabled.
    assert set(reg.disabled) == set(KEYED) - {platform}


def test_an_empty_variable_counts_as_unset(no_keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEO_QWEN_API_KEY", "")
    assert "qwen_api" in load_registry().disabled


def test_the_real_engines_are_well_formed_and_documented() -> None:
    text = BUNDLED.read_text(encoding="utf-8")
    spec = yaml.safe_load(text)["platforms"]
    for name, (var, protocol, _) in REAL.items():
        entry = spec[name]
        assert entry["protocol"] == protocol and protocol in BUILDERS
        assert entry["requires_key"] is True and entry["api_key_env"] == var
        assert var.startswith("GEO_"), "a vendor variable in a shell must not enable an engine"
        assert entry["base_url"].startswith("https://")
        assert name not in SIMULATED
        # The comment block above the entry states a source with its date, or 'unverified'.
        block = text[: text.index(f"\n  {name}:")].rsplit("\n\n", 1)[-1]
        assert re.search(r"20\d\d-\d\d-\d\d|unverified", block), name


def test_requires_key_needs_a_variable() -> None:
    spec = {
        "platforms": {
            "x": {
                "protocol": "openai_chat",
                "requires_key": True,
                "devices": ["web"],
                "regions": ["global"],
                "modes": ["standard"],
                "prices": {"version": "v", "currency": "USD", "base": {"standard": 1}},
            }
        }
    }
    with pytest.raises(RegistryError, match="api_key_env"):
        parse_catalogue(spec, lambda name: False)
    spec["platforms"]["x"]["api_key_env"] = "GEO_X_KEY"
    # Pure parsing (no environment answer) offers every entry; the loader decides by the key.
    assert set(parse_catalogue(spec).entries) == {"x"}
    reg = parse_catalogue(spec, lambda name: False)
    assert set(reg.disabled) == {"x"} and not reg.entries
    assert set(reg.every_entry()) == {"x"}
    caps = reg.capabilities()
    assert isinstance(caps, OfferedCapabilities) and dict(caps) == {}


def test_every_real_engine_states_its_statement_source_and_usage_prices(no_keys: None) -> None:
    """Issue 19: each engine says where its bill comes from; one without a cost API states
    token prices (integer minor units per 1M tokens, with source and date) for the price
    version it quotes with, so reconciliation can price the recorded usage."""
    from geo_pipeline.billing.reconcile import token_prices
    from geo_pipeline.connectors.protocols import USAGE_FIELDS, statement_source

    reg = load_registry()
    expected = {
        "deepseek_api": USAGE_FIELDS,
        "doubao_api": USAGE_FIELDS,
        "qwen_api": USAGE_FIELDS,
        "kimi_api": USAGE_FIELDS,
        "openai_responses_api": "openai_costs",
        "perplexity_sonar_api": USAGE_FIELDS,
        "gemini_grounded_api": USAGE_FIELDS,
        "anthropic_web_search_api": "anthropic_cost_report",
    }
    for name, entry in reg.disabled.items():
        if name in SERVICES or name in BROWSER:
            continue  # billed in credits, not tokens; a consumer app bills nothing
        source = statement_source(entry)
        assert source == expected[name], name
        if source != USAGE_FIELDS:
            continue
        version = entry.capabilities.prices.version
        prices = token_prices(entry, version)
        assert prices is not None, f"{name}: no token prices for {version}"
        assert prices.currency == entry.capabilities.prices.currency == REAL[name][2]
        assert prices.output_per_1m > 0 and prices.source and prices.as_of == "2026-12-02"
    assert {statement_source(e) for e in reg.entries.values()} == {"simulator", "openai_costs"}


def test_browser_channels_are_enabled_by_the_profiles_directory(
    no_keys: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A browser channel is refused (naming the variable, not an "API key") until
    GEO_BROWSER_PROFILES is set; then it is a browser-access channel that looks unknown
    outcomes up (its accounts' history), takes no idempotency key and is never cancelled."""
    with pytest.raises(PlatformDisabled, match="GEO_BROWSER_PROFILES") as refused:
        load_registry().entry("doubao_web")
    assert "API key" not in str(refused.value)
    monkeypatch.setenv("GEO_BROWSER_PROFILES", str(tmp_path))
    reg = load_registry()
    for name in BROWSER:
        entry = reg.entry(name)
        caps = entry.capabilities
        assert entry.protocol == "browser" and caps.access == "browser"
        assert caps.lookup_by_key and not caps.idempotency_keys and not caps.cancellable
        assert caps.screenshot and set(caps.devices) == {"desktop", "mobile"}
        assert f"{name}__mobile" in reg.channels()
