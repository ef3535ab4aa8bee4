"""Pure parts of the simulator and the connector plumbing: deterministic answers, profile
overrides, CLI flag parsing, Retry-After parsing and transport-error classification."""

from __future__ import annotations

import dataclasses
import email.utils
import json
import time

import click
import httpx
import pytest

from geo_pipeline.cli.simulator import _parse_sets
from geo_pipeline.connectors.base import (
    AcceptanceUnknown,
    RateLimited,
    TransientError,
    UpstreamFailed,
)
from geo_pipeline.connectors.http import parse_retry_after, transport_error
from geo_pipeline.connectors.parsers import PARSERS
from geo_pipeline.simulator.answers import BAD_KINDS, HOSTILE_SNIPPETS, generate_answer
from geo_pipeline.simulator.profiles import BrandSpec, ProfileError, load_profiles
from geo_pipeline.simulator.protocols import PROTOCOLS, error_body, success_body

ZH = "国内性价比最高的连锁咖啡品牌有哪些？"
EN = "Which coffee chain in China has the best value for money?"


@pytest.fixture(scope="module")
def profile():  # type: ignore[no-untyped-def]
    return load_profiles().profiles["deepseek"]


def test_answers_are_deterministic_per_seed_and_key(profile) -> None:  # type: ignore[no-untyped-def]
    a = generate_answer(7, "s1:1", ZH, profile)
    assert a == generate_answer(7, "s1:1", ZH, profile)
    assert a.answer != generate_answer(7, "s1:2", ZH, profile).answer  # another attempt
    assert a.answer != generate_answer(8, "s1:1", ZH, profile).answer  # another seed


def test_language_follows_the_question(profile) -> None:  # type: ignore[no-untyped-def]
    assert "综合多方信息" in generate_answer(1, "k:1", ZH, profile).answer
    assert "Regarding" in generate_answer(1, "k:1", EN, profile).answer
    forced = dataclasses.replace(profile, language="zh")
    assert "综合多方信息" in generate_answer(1, "k:1", EN, forced).answer


def test_brand_rates_positions_and_tracking_params(profile) -> None:  # type: ignore[no-untyped-def]
    brands = (
        BrandSpec("Alpha", (), ("alpha.example",), 1.0, "last"),
        BrandSpec("Beta", (), (), 1.0, "first"),
        BrandSpec("Gamma", (), (), 0.0, "any"),
    )
    p = dataclasses.replace(profile, brands=brands, brand_domain_citation_rate=1.0)
    for i in range(20):
        a = generate_answer(0, f"b{i}:1", EN, p)
        assert a.mentioned == ("Beta", "Alpha")  # Gamma never, Beta before Alpha
        assert a.answer.index("Beta") < a.answer.index("Alpha")
        assert "Gamma" not in a.answer
        assert any("alpha.example" in c.url for c in a.citations)  # the brand's own domain
    urls = [c.url for i in range(50) for c in generate_answer(0, f"t{i}:1", ZH, profile).citations]
    for param in ("utm_source=", "spm=", "gclid="):
        assert any(param in u for u in urls), param


def test_bad_and_hostile_shares(profile) -> None:  # type: ignore[no-untyped-def]
    bad = dataclasses.replace(profile, bad_answer_rate=1.0)
    kinds = {generate_answer(0, f"x{i}:1", ZH, bad).kind for i in range(200)}
    assert kinds == set(BAD_KINDS)
    truncated = next(
        a for i in range(200) if (a := generate_answer(0, f"x{i}:1", ZH, bad)).kind == "truncated"
    )
    assert truncated.truncated and truncated.answer
    hostile = dataclasses.replace(profile, hostile_rate=1.0)
    texts = [generate_answer(0, f"h{i}:1", EN, hostile).answer for i in range(100)]
    assert all(any(s in t for s in HOSTILE_SNIPPETS) for t in texts)
    assert {s for s in HOSTILE_SNIPPETS if any(s in t for t in texts)} == set(HOSTILE_SNIPPETS)


def test_profile_overrides_are_validated() -> None:
    cfg = load_profiles(
        {
            "seed": 4,
            "defaults": {"transient_rate": 0.1},
            "platforms": {"kimi": {"completion_s": 2}},
        },
        overrides={"*": {"hostile_rate": 0.2}, "qwen": {"lost_mode": "hold"}},
    )
    assert cfg.seed == 4
    assert cfg.profiles["deepseek"].transient_rate == 0.1
    assert cfg.profiles["kimi"].completion_s == (2.0, 2.0)
    assert cfg.profiles["doubao"].hostile_rate == 0.2
    assert cfg.profiles["qwen"].lost_mode == "hold"
    assert "openai_sim" not in cfg.profiles  # not a task-API platform
    for bad in (
        {"platforms": {"nosuch": {}}},
        {"defaults": {"transient_rate": 1.5}},
        {"defaults": {"typo_rate": 0.1}},
    ):
        with pytest.raises(ProfileError):
            load_profiles(bad)


def test_cli_set_flags() -> None:
    assert _parse_sets(
        ("deepseek.transient_rate=0.1", "completion_s=[0,1]", "qwen.lost_mode=hold")
    ) == {
        "deepseek": {"transient_rate": 0.1},
        "*": {"completion_s": [0, 1]},
        "qwen": {"lost_mode": "hold"},
    }
    with pytest.raises(click.BadParameter):
        _parse_sets(("novalue",))


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (parse_retry_after(later) or 0) <= 31


def test_transport_errors_split_on_whether_the_request_left() -> None:
    req = httpx.Request("POST", "http://127.0.0.1:1/v1/x/tasks")
    not_sent = transport_error(
        httpx.ConnectError("refused", request=req), sent_means_unknown=True, what="w"
    )
    assert isinstance(not_sent, TransientError)
    for exc in (
        httpx.ReadTimeout("t", request=req),
        httpx.RemoteProtocolError("gone", request=req),
    ):
        assert isinstance(
            transport_error(exc, sent_means_unknown=True, what="w"), AcceptanceUnknown
        )
        assert isinstance(transport_error(exc, sent_means_unknown=False, what="w"), TransientError)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_simulated_protocol_bodies_parse_back_to_the_generated_answer(
    protocol: str, profile
) -> None:  # type: ignore[no-untyped-def]
    """The simulator dresses one answer in each vendor's shape; the real parser of that vendor
    gets the same text, the cited URLs (with spans covering them) and the retrieved ones back."""
    p = dataclasses.replace(profile, search_results_range=(2, 2))
    ans = generate_answer(3, "proto:1", ZH, p)
    body = json.dumps(
        success_body(protocol, ans, model="deepseek", key="proto:1", question=ZH)
    ).encode()
    parsed = PARSERS[protocol](body)
    assert parsed.answer_text == ans.answer
    cited = [c for c in parsed.citations if c.relation == "cited"]
    assert [c.url for c in cited] == [c.url for c in ans.citations]
    for c in cited:
        if c.span_start is not None:
            assert c.url in parsed.answer_text[c.span_start : c.span_end]
    retrieved = {c.url for c in parsed.citations if c.relation == "retrieved"}
    if protocol != "openai_chat":  # plain chat completions carry no retrieved list
        assert retrieved == {c.url for c in ans.search_results}
    failed = json.dumps(
        success_body(
            protocol, ans, model="deepseek", key="proto:1", question=ZH, failure="filtered"
        )
    ).encode()
    with pytest.raises(UpstreamFailed):
        PARSERS[protocol](failed)
    status, err = error_body(protocol, "rate_limited", "slow down")
    assert status == 429
    with pytest.raises(RateLimited):
        PARSERS[protocol](json.dumps(err).encode())
