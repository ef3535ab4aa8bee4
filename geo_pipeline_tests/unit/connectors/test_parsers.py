"""Each real-protocol parser on response bodies shaped as the public API references document them,
including error bodies and errors inside HTTP 200: citations come out with title, URL,
cited/retrieved and the text span where the format gives one."""

from __future__ import annotations

import json

import pytest

from geo_pipeline.connectors.base import (
    InvalidParams,
    NoPermission,
    RateLimited,
    TransientError,
    Unparseable,
    UpstreamFailed,
)
from geo_pipeline.connectors.parsers import (
    error_in_body,
    parse_anthropic,
    parse_gemini,
    parse_openai_chat,
    parse_openai_responses,
    parse_perplexity,
)


def b(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


# --------------------------------------------------------------------------- OpenAI chat
CHAT = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4o-search-preview",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Luckin Coffee leads on price [Reuters](https://www.reuters.com/a?utm_source=openai).",
                "refusal": None,
                "annotations": [
                    {
                        "type": "url_citation",
                        "url_citation": {
                            "end_index": 82,
                            "start_index": 29,
                            "title": "Reuters",
                            "url": "https://www.reuters.com/a?utm_source=openai",
                        },
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29},
}


def test_openai_chat_url_citation_annotations() -> None:
    p = parse_openai_chat(b(CHAT))
    assert p.answer_text.startswith("Luckin Coffee leads")
    assert p.response_id == "chatcmpl-abc123"
    (c,) = p.citations
    assert (c.url, c.title, c.relation) == (
        "https://www.reuters.com/a?utm_source=openai",
        "Reuters",
        "cited",
    )
    assert (c.span_start, c.span_end) == (29, 82)
    assert not p.truncated


def test_openai_chat_plain_deepseek_reasoner_and_length() -> None:
    body = {
        "id": "930c60df-bf64-41c9-a88e-3ec75f81e00e",
        "object": "chat.completion",
        "created": 1705651092,
        "model": "deepseek-reasoner",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "瑞幸咖啡性价比",
                    "reasoning_content": "先比较价格",
                },
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 16, "completion_tokens": 10, "total_tokens": 26},
    }
    p = parse_openai_chat(b(body))
    assert p.answer_text == "瑞幸咖啡性价比"
    assert p.citations == ()
    assert p.truncated and p.deep_thinking_used


def test_openai_chat_content_filter_and_refusal_inside_200_are_failures() -> None:
    filtered = json.loads(json.dumps(CHAT))
    filtered["choices"][0]["finish_reason"] = "content_filter"
    filtered["choices"][0]["message"]["content"] = None
    with pytest.raises(UpstreamFailed) as exc:
        parse_openai_chat(b(filtered))
    assert exc.value.raw == b(filtered)
    refused = json.loads(json.dumps(CHAT))
    refused["choices"][0]["message"]["refusal"] = "I can't help with that."
    with pytest.raises(UpstreamFailed):
        parse_openai_chat(b(refused))


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        (
            {
                "message": "Rate limit reached",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            },
            RateLimited,
        ),
        (
            {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            },
            NoPermission,
        ),
        (
            {
                "message": "You exceeded your current quota",
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            },
            NoPermission,
        ),
        (
            {
                "message": "Invalid value for 'temperature'",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": None,
            },
            InvalidParams,
        ),
        (
            {
                "message": "The server had an error",
                "type": "server_error",
                "param": None,
                "code": None,
            },
            TransientError,
        ),
    ],
)
def test_openai_error_bodies_map_to_classes(error: dict[str, object], cls: type) -> None:
    body = {"error": error}
    err = error_in_body(body, b(body), "openai_chat")
    assert isinstance(err, cls)
    with pytest.raises(cls):  # the same body inside HTTP 200 raises from the parser too
        parse_openai_chat(b(body))


def test_unparseable_keeps_raw_bytes_exactly() -> None:
    raw = b'{"id": "chatcmpl-1", "choices": [{"message": {"content": "half'
    with pytest.raises(Unparseable) as exc:
        parse_openai_chat(raw)
    assert exc.value.raw == raw
    with pytest.raises(Unparseable):
        parse_openai_chat(b({"id": "x", "choices": []}))


# --------------------------------------------------------------------------- Perplexity
PPLX = {
    "id": "3c90c3cc-0d44-4b50-8888-8dd25736052a",
    "model": "sonar",
    "created": 1724369245,
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {
                "role": "assistant",
                "content": "Luckin is cheapest [1], Starbucks premium [2].",
            },
        }
    ],
    "citations": ["https://www.scmp.com/luckin", "https://en.wikipedia.org/wiki/Starbucks"],
    "search_results": [
        {
            "title": "Luckin undercuts rivals",
            "url": "https://www.scmp.com/luckin",
            "date": "2025-03-01",
        },
        {"title": "Starbucks", "url": "https://en.wikipedia.org/wiki/Starbucks", "date": None},
        {
            "title": "Cotti Coffee expands",
            "url": "https://www.reuters.com/cotti",
            "date": "2025-02-11",
        },
    ],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 20,
        "total_tokens": 32,
        "search_context_size": "low",
    },
}


def test_perplexity_citations_are_cited_and_other_search_results_retrieved() -> None:
    p = parse_perplexity(b(PPLX))
    cited = [c for c in p.citations if c.relation == "cited"]
    retrieved = [c for c in p.citations if c.relation == "retrieved"]
    assert [(c.id, c.url, c.title) for c in cited] == [
        ("1", "https://www.scmp.com/luckin", "Luckin undercuts rivals"),
        ("2", "https://en.wikipedia.org/wiki/Starbucks", "Starbucks"),
    ]
    assert [(c.url, c.title) for c in retrieved] == [
        ("https://www.reuters.com/cotti", "Cotti Coffee expands")
    ]
    assert p.web_search_used


def test_perplexity_error_body() -> None:
    body = {"error": {"message": "Invalid model 'sonar-x'", "type": "invalid_model", "code": 400}}
    with pytest.raises(InvalidParams):
        parse_perplexity(b(body))


# --------------------------------------------------------------------------- OpenAI Responses
RESPONSES = {
    "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41",
    "object": "response",
    "created_at": 1741476777,
    "status": "completed",
    "model": "gpt-5",
    "output": [
        {
            "type": "web_search_call",
            "id": "ws_67ccd3acc8548190a1fa6e7f3f3e6c7a",
            "status": "completed",
            "action": {
                "type": "search",
                "query": "best value coffee chain China",
                "sources": [
                    {"type": "url", "url": "https://www.reuters.com/luckin"},
                    {"type": "url", "url": "https://www.bloomberg.com/cotti"},
                ],
            },
        },
        {
            "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [
                {
                    "type": "output_text",
                    "text": "Luckin Coffee offers the best value ([reuters.com](https://www.reuters.com/luckin?utm_source=openai)).",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "start_index": 36,
                            "end_index": 101,
                            "url": "https://www.reuters.com/luckin?utm_source=openai",
                            "title": "Luckin's price war",
                        }
                    ],
                }
            ],
        },
    ],
}


def test_openai_responses_annotations_cited_sources_retrieved() -> None:
    p = parse_openai_responses(b(RESPONSES))
    assert p.answer_text.startswith("Luckin Coffee offers")
    cited = [c for c in p.citations if c.relation == "cited"]
    retrieved = [c for c in p.citations if c.relation == "retrieved"]
    assert [(c.url, c.title, c.span_start, c.span_end) for c in cited] == [
        ("https://www.reuters.com/luckin?utm_source=openai", "Luckin's price war", 36, 101)
    ]
    assert (
        p.answer_text[36:101] == "([reuters.com](https://www.reuters.com/luckin?utm_source=openai))"
    )
    # Sources are what the search fetched; the cited one differs only by tracking parameters, so
    # it is the same source (same normalised URL, R18): cited, not also retrieved.
    assert [c.url for c in retrieved] == ["https://www.bloomberg.com/cotti"]
    assert p.web_search_used and p.search_queries == ("best value coffee chain China",)


def test_openai_responses_failed_and_incomplete() -> None:
    failed = {
        **RESPONSES,
        "status": "failed",
        "output": [],
        "error": {"code": "server_error", "message": "boom"},
    }
    with pytest.raises(UpstreamFailed):
        parse_openai_responses(b(failed))
    filtered = {
        **RESPONSES,
        "status": "incomplete",
        "incomplete_details": {"reason": "content_filter"},
    }
    with pytest.raises(UpstreamFailed):
        parse_openai_responses(b(filtered))
    cut = {
        **RESPONSES,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert parse_openai_responses(b(cut)).truncated


# --------------------------------------------------------------------------- Gemini
GEMINI_TEXT = "瑞幸咖啡性价比最高。Starbucks is premium."


def test_gemini_grounding_supports_use_byte_offsets() -> None:
    first = "瑞幸咖啡性价比最高。"
    first_bytes = len(first.encode())  # 30 bytes for 10 characters
    body = {
        "candidates": [
            {
                "content": {"parts": [{"text": GEMINI_TEXT}], "role": "model"},
                "finishReason": "STOP",
                "groundingMetadata": {
                    "webSearchQueries": ["性价比 连锁咖啡", "Starbucks price"],
                    "searchEntryPoint": {"renderedContent": "<style>...</style>"},
                    "groundingChunks": [
                        {
                            "web": {
                                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AAA",
                                "title": "luckincoffee.com",
                            }
                        },
                        {
                            "web": {
                                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/BBB",
                                "title": "starbucks.com",
                            }
                        },
                        {
                            "web": {
                                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/CCC",
                                "title": "zhihu.com",
                            }
                        },
                    ],
                    "groundingSupports": [
                        {
                            "segment": {"startIndex": 0, "endIndex": first_bytes, "text": first},
                            "groundingChunkIndices": [0],
                            "confidenceScores": [0.9],
                        },
                        {
                            "segment": {
                                "startIndex": first_bytes,
                                "endIndex": len(GEMINI_TEXT.encode()),
                                "text": "Starbucks is premium.",
                            },
                            "groundingChunkIndices": [1],
                            "confidenceScores": [0.8],
                        },
                    ],
                },
            }
        ],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 20, "totalTokenCount": 28},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-gemini-1",
    }
    p = parse_gemini(b(body))
    assert p.answer_text == GEMINI_TEXT
    cited = [c for c in p.citations if c.relation == "cited"]
    retrieved = [c for c in p.citations if c.relation == "retrieved"]
    assert [(c.title, c.span_start, c.span_end) for c in cited] == [
        ("luckincoffee.com", 0, len(first)),
        ("starbucks.com", len(first), len(GEMINI_TEXT)),
    ]
    for c in cited:  # character spans cut the text exactly where the supported segment is
        assert GEMINI_TEXT[c.span_start : c.span_end] == c.cited_text
    assert [c.title for c in retrieved] == ["zhihu.com"]
    assert p.search_queries == ("性价比 连锁咖啡", "Starbucks price") and p.web_search_used


def test_gemini_block_reason_and_safety_are_failures_inside_200() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
        "usageMetadata": {},
    }
    with pytest.raises(UpstreamFailed):
        parse_gemini(b(blocked))
    safety = {
        "candidates": [{"finishReason": "SAFETY", "safetyRatings": [], "content": {"parts": []}}]
    }
    with pytest.raises(UpstreamFailed):
        parse_gemini(b(safety))
    cut = {"candidates": [{"finishReason": "MAX_TOKENS", "content": {"parts": [{"text": "瑞幸"}]}}]}
    assert parse_gemini(b(cut)).truncated


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        ("RESOURCE_EXHAUSTED", RateLimited),
        ("PERMISSION_DENIED", NoPermission),
        ("INVALID_ARGUMENT", InvalidParams),
        ("UNAVAILABLE", TransientError),
    ],
)
def test_gemini_error_bodies(status: str, cls: type) -> None:
    body = {"error": {"code": 429, "message": "quota", "status": status}}
    with pytest.raises(cls):
        parse_gemini(b(body))


# --------------------------------------------------------------------------- Anthropic
ANTHROPIC = {
    "id": "msg_01ABC",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "text", "text": "I'll search for that."},
        {
            "type": "server_tool_use",
            "id": "srvtoolu_01",
            "name": "web_search",
            "input": {"query": "best value coffee chain China"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_01",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://www.scmp.com/luckin",
                    "title": "Luckin undercuts rivals",
                    "encrypted_content": "EqgfCioIARgBIiQ3YTAw...",
                    "page_age": "March 1, 2025",
                },
                {
                    "type": "web_search_result",
                    "url": "https://www.reuters.com/cotti",
                    "title": "Cotti expands",
                    "encrypted_content": "EqgfCioIARgBIiQ3YTAx...",
                    "page_age": None,
                },
            ],
        },
        {"type": "text", "text": "Based on the results, "},
        {
            "type": "text",
            "text": "Luckin Coffee is the best value chain",
            "citations": [
                {
                    "type": "web_search_result_location",
                    "url": "https://www.scmp.com/luckin",
                    "title": "Luckin undercuts rivals",
                    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm..",
                    "cited_text": "Luckin's drinks cost about half of Starbucks' ...",
                }
            ],
        },
        {"type": "text", "text": "."},
    ],
    "stop_reason": "end_turn",
    "usage": {
        "input_tokens": 6039,
        "output_tokens": 931,
        "server_tool_use": {"web_search_requests": 1},
    },
}


def test_anthropic_text_citations_cited_tool_results_retrieved() -> None:
    p = parse_anthropic(b(ANTHROPIC))
    assert (
        p.answer_text
        == "I'll search for that.\n\nBased on the results, Luckin Coffee is the best value chain."
    )  # text after the search is a paragraph of its own; the blocks split at the citation are not
    cited = [c for c in p.citations if c.relation == "cited"]
    retrieved = [c for c in p.citations if c.relation == "retrieved"]
    (c,) = cited
    assert (c.url, c.title) == ("https://www.scmp.com/luckin", "Luckin undercuts rivals")
    assert c.cited_text and c.cited_text.startswith("Luckin's drinks")
    assert p.answer_text[c.span_start : c.span_end] == "Luckin Coffee is the best value chain"
    assert [r.url for r in retrieved] == ["https://www.reuters.com/cotti"]
    assert p.web_search_used and not p.truncated


def test_anthropic_errors_and_refusal() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(TransientError):
        parse_anthropic(b(overloaded))
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    with pytest.raises(RateLimited):
        parse_anthropic(b(limited))
    auth = {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    with pytest.raises(NoPermission):
        parse_anthropic(b(auth))
    refusal = {**ANTHROPIC, "stop_reason": "refusal"}
    with pytest.raises(UpstreamFailed):
        parse_anthropic(b(refusal))
    search_error = {
        **ANTHROPIC,
        "content": [
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": {
                    "type": "web_search_tool_result_error",
                    "error_code": "max_uses_exceeded",
                },
            },
            {"type": "text", "text": "No results."},
        ],
        "stop_reason": "max_tokens",
    }
    p = parse_anthropic(b(search_error))
    assert p.warnings == ("WEB_SEARCH_ERROR:max_uses_exceeded",) and p.truncated
