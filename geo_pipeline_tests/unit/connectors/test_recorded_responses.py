"""Recorded responses of every protocol, shaped as the vendors' API references document them:
each parses to the right outcome -- a charged answer (with or without citations), a failure the
vendor reports inside HTTP 200 (a refusal or filter: the platform's retry fee rule decides the
charge), an error object inside HTTP 200 (not accepted: never charged), or an unparseable body
(kept raw, sent to review) -- and the request-level usage (tokens, cache hits, searches) comes out
of the body whatever the outcome, for reconciliation against vendors without a cost API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from geo_pipeline.connectors.base import (
    InvalidParams,
    NoPermission,
    RateLimited,
    Unparseable,
    UpstreamFailed,
)
from geo_pipeline.connectors.parsers import PARSERS, parse_usage
from geo_pipeline.domain.usage import Usage


def b(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def chat(message: dict[str, Any], usage: dict[str, Any] | None, finish: str = "stop") -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1764633600,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return b(body)


# --------------------------------------------------------------------------- OpenAI-compatible
DEEPSEEK_USAGE = {  # api-docs.deepseek.com: cache hit/miss split of prompt_tokens
    "prompt_tokens": 120,
    "completion_tokens": 900,
    "total_tokens": 1020,
    "prompt_cache_hit_tokens": 64,
    "prompt_cache_miss_tokens": 56,
    "completion_tokens_details": {"reasoning_tokens": 400},
}


def test_deepseek_answer_without_citations_is_charged_with_cache_split_usage() -> None:
    raw = chat({"role": "assistant", "content": "瑞幸。", "reasoning_content": "…"}, DEEPSEEK_USAGE)
    p = PARSERS["openai_chat"](raw)
    assert p.answer_text == "瑞幸。" and p.citations == () and not p.web_search_used
    assert p.usage == Usage(
        input_tokens=120,
        output_tokens=900,
        total_tokens=1020,
        cached_input_tokens=64,
        reasoning_tokens=400,
        source="usage",
    )


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        # OpenAI / Qwen compatible mode / Doubao Ark: prompt_tokens_details.cached_tokens
        (
            {
                "prompt_tokens": 30,
                "completion_tokens": 70,
                "total_tokens": 100,
                "prompt_tokens_details": {"cached_tokens": 10},
            },
            10,
        ),
        # Kimi (Moonshot): a top-level usage.cached_tokens
        (
            {
                "prompt_tokens": 30,
                "completion_tokens": 70,
                "total_tokens": 100,
                "cached_tokens": 12,
            },
            12,
        ),
        # no cache information at all
        ({"prompt_tokens": 30, "completion_tokens": 70, "total_tokens": 100}, None),
    ],
)
def test_openai_compatible_usage_shapes(usage: dict[str, Any], cached: int | None) -> None:
    p = PARSERS["openai_chat"](chat({"role": "assistant", "content": "x"}, usage))
    assert p.usage is not None
    assert (p.usage.input_tokens, p.usage.output_tokens, p.usage.total_tokens) == (30, 70, 100)
    assert p.usage.cached_input_tokens == cached


def test_openai_chat_refusal_and_content_filter_fail_inside_200_with_usage_kept() -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    refused = chat({"role": "assistant", "content": None, "refusal": "I can't help."}, usage)
    with pytest.raises(UpstreamFailed, match="refusal"):
        PARSERS["openai_chat"](refused)
    assert parse_usage("openai_chat", refused) == Usage(11, 5, 16, source="usage")
    filtered = chat({"role": "assistant", "content": None}, usage, finish="content_filter")
    with pytest.raises(UpstreamFailed, match="content filter"):
        PARSERS["openai_chat"](filtered)
    assert parse_usage("openai_chat", filtered) == Usage(11, 5, 16, source="usage")


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        (
            {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"},
            RateLimited,
        ),
        (
            {"message": "Authentication Fails", "type": "authentication_error", "code": None},
            NoPermission,
        ),
        (
            {"message": "bad model", "type": "invalid_request_error", "code": "model_not_found"},
            InvalidParams,
        ),
    ],
)
def test_error_object_inside_200_is_an_error_without_usage(
    error: dict[str, Any], cls: type
) -> None:
    raw = b({"error": error})
    for protocol in ("openai_chat", "perplexity"):
        with pytest.raises(cls):
            PARSERS[protocol](raw)
        assert parse_usage(protocol, raw) is None


def test_missing_or_malformed_usage_is_none_never_zero() -> None:
    p = PARSERS["openai_chat"](chat({"role": "assistant", "content": "x"}, None))
    assert p.usage is None  # reconciliation reports the missing usage on its own line
    bad = chat(
        {"role": "assistant", "content": "x"}, {"prompt_tokens": "12", "completion_tokens": -1}
    )
    p = PARSERS["openai_chat"](bad)
    assert p.answer_text == "x" and p.usage is None
    assert any(w.startswith("USAGE_UNREADABLE") for w in p.warnings)


# --------------------------------------------------------------------------- Perplexity
def test_perplexity_usage_with_search_context_and_no_citations() -> None:
    raw = b(
        {
            "id": "pplx-1",
            "model": "sonar",
            "object": "chat.completion",
            "created": 1764633600,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "No sources needed."},
                }
            ],
            "usage": {
                "prompt_tokens": 9,
                "completion_tokens": 120,
                "total_tokens": 129,
                "search_context_size": "low",
                "citation_tokens": 0,
                "num_search_queries": 1,
            },
        }
    )
    p = PARSERS["perplexity"](raw)
    assert p.citations == () and p.answer_text == "No sources needed."
    assert p.usage == Usage(
        input_tokens=9,
        output_tokens=120,
        total_tokens=129,
        web_search_requests=1,
        search_context_size="low",
        source="usage",
    )


# --------------------------------------------------------------------------- OpenAI Responses
RESPONSES_USAGE = {
    "input_tokens": 2100,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 350,
    "output_tokens_details": {"reasoning_tokens": 128},
    "total_tokens": 2450,
}


def responses(output: list[dict[str, Any]], **extra: Any) -> bytes:
    return b(
        {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": output,
            "usage": RESPONSES_USAGE,
            **extra,
        }
    )


SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "coffee"},
}


def test_responses_usage_and_web_search_calls_counted() -> None:
    raw = responses(
        [
            SEARCH,
            dict(SEARCH, id="ws_2"),
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Plain answer.", "annotations": []}],
            },
        ]
    )
    p = PARSERS["openai_responses"](raw)
    assert p.citations == () and p.answer_text == "Plain answer." and p.web_search_used
    assert p.usage == Usage(
        input_tokens=2100,
        output_tokens=350,
        total_tokens=2450,
        cached_input_tokens=100,
        reasoning_tokens=128,
        web_search_requests=2,
        source="usage",
    )


def test_responses_refusal_part_is_a_failure_with_usage_kept() -> None:
    raw = responses(
        [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "I can't assist with that."}],
            }
        ]
    )
    with pytest.raises(UpstreamFailed, match="refusal"):
        PARSERS["openai_responses"](raw)
    usage = parse_usage("openai_responses", raw)
    assert usage is not None and usage.input_tokens == 2100 and usage.web_search_requests == 0


def test_responses_error_in_200_and_failed_status() -> None:
    with pytest.raises(RateLimited):
        PARSERS["openai_responses"](b({"error": {"type": "rate_limit_error", "message": "slow"}}))
    failed = b(
        {
            "id": "resp_2",
            "object": "response",
            "status": "failed",
            "output": [],
            "error": {"code": "server_error", "message": "boom"},
            "usage": None,
        }
    )
    with pytest.raises(UpstreamFailed):
        PARSERS["openai_responses"](failed)
    assert parse_usage("openai_responses", failed) is None


# --------------------------------------------------------------------------- Anthropic
ANTHROPIC_USAGE = {
    "input_tokens": 2048,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 512,
    "output_tokens": 300,
    "server_tool_use": {"web_search_requests": 2},
}


def message(content: list[dict[str, Any]], stop: str = "end_turn") -> bytes:
    return b(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": ANTHROPIC_USAGE,
        }
    )


def test_anthropic_usage_with_web_search_requests_and_no_citations() -> None:
    p = PARSERS["anthropic"](message([{"type": "text", "text": "From memory: Luckin."}]))
    assert p.citations == () and p.answer_text == "From memory: Luckin."
    # input_tokens excludes cache reads and writes; the billed input is their sum.
    assert p.usage == Usage(
        input_tokens=2560,
        output_tokens=300,
        total_tokens=2860,
        cached_input_tokens=512,
        web_search_requests=2,
        source="usage",
    )


def test_anthropic_refusal_stop_reason_fails_with_usage_kept() -> None:
    raw = message([{"type": "text", "text": ""}], stop="refusal")
    with pytest.raises(UpstreamFailed, match="refusal"):
        PARSERS["anthropic"](raw)
    assert parse_usage("anthropic", raw) == Usage(2560, 300, 2860, 512, None, 2, None, "usage")


def test_anthropic_error_in_200_maps_to_its_class() -> None:
    raw = b({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    with pytest.raises(Exception) as exc:
        PARSERS["anthropic"](raw)
    assert getattr(exc.value, "error_class", None) == "transient"
    assert parse_usage("anthropic", raw) is None


# --------------------------------------------------------------------------- Gemini
GEMINI_USAGE = {
    "promptTokenCount": 10,
    "candidatesTokenCount": 200,
    "thoughtsTokenCount": 50,
    "toolUsePromptTokenCount": 400,
    "cachedContentTokenCount": 0,
    "totalTokenCount": 660,
}


def test_gemini_usage_counts_thoughts_as_output_and_tool_prompt_as_input() -> None:
    raw = b(
        {
            "candidates": [
                {
                    "content": {"parts": [{"text": "Ungrounded answer."}], "role": "model"},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": GEMINI_USAGE,
            "responseId": "r1",
        }
    )
    p = PARSERS["gemini"](raw)
    assert p.citations == () and not p.web_search_used
    assert p.usage == Usage(
        input_tokens=410,
        output_tokens=250,
        total_tokens=660,
        cached_input_tokens=0,
        reasoning_tokens=50,
        source="usageMetadata",
    )


def test_gemini_block_reason_fails_with_prompt_usage_and_error_in_200() -> None:
    raw = b(
        {
            "promptFeedback": {"blockReason": "SAFETY"},
            "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
        }
    )
    with pytest.raises(UpstreamFailed, match="SAFETY"):
        PARSERS["gemini"](raw)
    assert parse_usage("gemini", raw) == Usage(7, 0, 7, source="usageMetadata")
    denied = b({"error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}})
    with pytest.raises(NoPermission):
        PARSERS["gemini"](denied)


# --------------------------------------------------------------------------- review
@pytest.mark.parametrize("protocol", sorted(PARSERS))
def test_not_the_documented_shape_goes_to_review_with_raw_kept(protocol: str) -> None:
    raw = b"<html>502 Bad Gateway</html>"
    with pytest.raises(Unparseable) as exc:
        PARSERS[protocol](raw)
    assert exc.value.raw == raw and exc.value.error_class == "unparseable"
    assert parse_usage(protocol, raw) is None


# --------------------------------------------------------------------------- the simulator
@pytest.mark.parametrize("protocol", sorted(PARSERS))
@pytest.mark.parametrize("model", ["deepseek", "qwen"])
def test_simulator_bodies_carry_usage_in_each_documented_shape(protocol: str, model: str) -> None:
    from geo_pipeline.simulator.answers import GeneratedAnswer
    from geo_pipeline.simulator.protocols import success_body

    ans = GeneratedAnswer("瑞幸咖啡性价比最高。" * 20)
    question = "国内性价比最高的连锁咖啡品牌有哪些？"
    raw = b(success_body(protocol, ans, model=model, key="k:1", question=question))
    usage = PARSERS[protocol](raw).usage
    assert usage is not None and usage.input_tokens and usage.output_tokens == len(ans.answer) // 2
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    if protocol == "openai_chat" and model == "deepseek":
        assert usage.cached_input_tokens == 24  # prompt_cache_hit_tokens
    if protocol == "anthropic":
        assert usage.web_search_requests == 1
    if protocol == "perplexity":
        assert usage.search_context_size == "low" and usage.web_search_requests == 1
    failed = b(
        success_body(protocol, ans, model=model, key="k:1", question=question, failure="filtered")
    )
    with pytest.raises(UpstreamFailed):
        PARSERS[protocol](failed)
    kept = parse_usage(protocol, failed)
    assert kept is not None and kept.input_tokens and kept.output_tokens == 0
