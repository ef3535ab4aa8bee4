"""One rule for sources and one for text, the same for every protocol:

* a source is one normalised URL (R18): a retrieved source that normalises to a cited one, or to
  an earlier retrieved one, is not listed again, and the first raw URL received is the one kept;
* an answer's text is joined the way the engine's own client shows it: pieces the engine split
  mid-sentence (around citations, across parts) are concatenated as they are; separate
  segments (text before and after a search, separate message items) are separate paragraphs,
  so a word at the end of one never runs into the first word of the next;
* Gemini's grounding redirect stays the raw URL; the site the chunk names is its target.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from geo_pipeline.connectors.parsers import (
    ParsedAnswer,
    parse_anthropic,
    parse_gemini,
    parse_openai_chat,
    parse_openai_responses,
    parse_perplexity,
)


def b(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


# --------------------------------------------------------------------------- the sources fixture
# One cited source (the engine tags it), the same page fetched plainly, one page fetched twice
# (once with share parameters), and one page only fetched.
CITED = "https://www.scmp.com/luckin?utm_source=openai"
SAME_AS_CITED = "https://www.scmp.com/luckin"
SHARED = "https://www.bilibili.com/video/BV1GJ411x7h7/?spm_id_from=333.1007&vd_source=3c1d"
SHARED_BARE = "https://www.bilibili.com/video/BV1GJ411x7h7/"
ONLY_FETCHED = "https://www.reuters.com/cotti"
FETCHED = [SAME_AS_CITED, SHARED, SHARED_BARE, ONLY_FETCHED]
TEXT = "Luckin Coffee is the best value chain."
EXPECTED = [("cited", CITED), ("retrieved", SHARED), ("retrieved", ONLY_FETCHED)]


def responses_body() -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "action": {
                    "type": "search",
                    "query": "best value coffee",
                    "sources": [{"type": "url", "url": u} for u in FETCHED],
                },
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": TEXT,
                        "annotations": [
                            {
                                "type": "url_citation",
                                "start_index": 0,
                                "end_index": 13,
                                "url": CITED,
                                "title": "SCMP",
                            }
                        ],
                    }
                ],
            },
        ],
    }


def anthropic_body() -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "q"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": u,
                        "title": "t",
                        "encrypted_content": "E",
                        "page_age": None,
                    }
                    for u in FETCHED
                ],
            },
            {
                "type": "text",
                "text": TEXT,
                "citations": [
                    {
                        "type": "web_search_result_location",
                        "url": CITED,
                        "title": "SCMP",
                        "encrypted_index": "E",
                        "cited_text": "…",
                    }
                ],
            },
        ],
        "stop_reason": "end_turn",
    }


def perplexity_body() -> dict[str, Any]:
    return {
        "id": "pplx_1",
        "model": "sonar",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": TEXT + " [1]"},
            }
        ],
        "citations": [CITED],
        "search_results": [{"title": "t", "url": u, "date": None} for u in FETCHED],
    }


def gemini_body() -> dict[str, Any]:
    # Direct URIs (as Vertex AI returns for some grounding sources), so the fixture is the same.
    chunks = [{"web": {"uri": u, "title": "t"}} for u in [CITED, *FETCHED]]
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": TEXT}], "role": "model"},
                "finishReason": "STOP",
                "groundingMetadata": {
                    "webSearchQueries": ["q"],
                    "groundingChunks": chunks,
                    "groundingSupports": [
                        {
                            "segment": {"startIndex": 0, "endIndex": 13, "text": TEXT[:13]},
                            "groundingChunkIndices": [0],
                        }
                    ],
                },
            }
        ],
        "responseId": "g1",
    }


def chat_body() -> dict[str, Any]:
    # Chat Completions only carries what the answer cites.
    ann = {
        "type": "url_citation",
        "url_citation": {"start_index": 0, "end_index": 13, "title": "SCMP", "url": CITED},
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": TEXT, "annotations": [ann]},
            }
        ],
    }


CASES: dict[
    str, tuple[Callable[[bytes], ParsedAnswer], Callable[[], dict[str, Any]], list[tuple[str, str]]]
] = {
    "openai_responses": (parse_openai_responses, responses_body, EXPECTED),
    "anthropic": (parse_anthropic, anthropic_body, EXPECTED),
    "perplexity": (parse_perplexity, perplexity_body, EXPECTED),
    "gemini": (parse_gemini, gemini_body, EXPECTED),
    "openai_chat": (parse_openai_chat, chat_body, [("cited", CITED)]),
}


@pytest.mark.parametrize("protocol", sorted(CASES))
def test_every_protocol_dedupes_sources_on_the_normalised_url_keeping_the_first_raw(protocol):
    parse, body, expected = CASES[protocol]
    p = parse(b(body()))
    assert [(c.relation, c.url) for c in p.citations] == expected


def test_cited_pointings_are_each_kept_with_their_span():
    """Dedupe is for sources, not for pointings: two spans citing one page are two citations."""
    body = responses_body()
    part = body["output"][1]["content"][0]
    part["annotations"].append(
        {
            "type": "url_citation",
            "start_index": 14,
            "end_index": 37,
            "url": SAME_AS_CITED,
            "title": "SCMP",
        }
    )
    p = parse_openai_responses(b(body))
    cited = [(c.url, c.span_start, c.span_end) for c in p.citations if c.relation == "cited"]
    assert cited == [(CITED, 0, 13), (SAME_AS_CITED, 14, 37)]


# --------------------------------------------------------------------------- joining the answer text
def test_anthropic_text_blocks_around_a_search_are_separate_paragraphs():
    body = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look up the current rankings."},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "phone rankings"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://a.cn/r",
                        "title": "r",
                        "encrypted_content": "E",
                    }
                ],
            },
            # after the search, the answer is split around its citations mid-sentence
            {"type": "text", "text": "Based on the results, "},
            {
                "type": "text",
                "text": "Huawei is first in China",
                "citations": [
                    {
                        "type": "web_search_result_location",
                        "url": "https://a.cn/r",
                        "title": "r",
                        "encrypted_index": "E",
                        "cited_text": "Huawei led",
                    }
                ],
            },
            {"type": "text", "text": ", ahead of Apple."},
        ],
        "stop_reason": "end_turn",
    }
    p = parse_anthropic(b(body))
    assert p.answer_text == (
        "Let me look up the current rankings.\n\nBased on the results, Huawei is first in China, ahead of Apple."
    )
    (c,) = [c for c in p.citations if c.relation == "cited"]
    assert p.answer_text[c.span_start : c.span_end] == "Huawei is first in China"


def test_anthropic_adjacent_blocks_are_concatenated_as_returned():
    body = {
        "id": "msg_3",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Luckin"},
            {"type": "text", "text": " is cheaper."},
            {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"query": "q"}},
            # a segment that already starts on a new line gets no extra break
            {"type": "text", "text": "\nCotti follows."},
        ],
        "stop_reason": "end_turn",
    }
    assert parse_anthropic(b(body)).answer_text == "Luckin is cheaper.\nCotti follows."


def test_openai_responses_message_items_are_paragraphs_and_parts_concatenate():
    body = {
        "id": "resp_2",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "m1",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Checking the rankings.", "annotations": []}
                ],
            },
            {
                "type": "web_search_call",
                "id": "ws",
                "status": "completed",
                "action": {"type": "search", "query": "q"},
            },
            {
                "type": "message",
                "id": "m2",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Huawei is first ", "annotations": []},
                    {
                        "type": "output_text",
                        "text": "and Xiaomi second.",
                        "annotations": [
                            {
                                "type": "url_citation",
                                "start_index": 4,
                                "end_index": 10,
                                "url": "https://x.cn/a",
                                "title": "x",
                            }
                        ],
                    },
                ],
            },
        ],
    }
    p = parse_openai_responses(b(body))
    assert p.answer_text == "Checking the rankings.\n\nHuawei is first and Xiaomi second."
    (c,) = p.citations
    assert p.answer_text[c.span_start : c.span_end] == "Xiaomi"


def test_gemini_parts_concatenate_and_supports_index_their_own_part():
    first, second = "瑞幸咖啡", "性价比最高。Starbucks is premium."
    body = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"text": "thinking about prices", "thought": True},
                        {"text": first},
                        {"text": second},
                    ],
                    "role": "model",
                },
                "finishReason": "STOP",
                "groundingMetadata": {
                    "groundingChunks": [
                        {
                            "web": {
                                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/A",
                                "title": "starbucks.com",
                            }
                        }
                    ],
                    "groundingSupports": [
                        {
                            # byte offsets inside part 2 (the thought part is index 0)
                            "segment": {
                                "partIndex": 2,
                                "startIndex": len("性价比最高。".encode()),
                                "endIndex": len(second.encode()),
                                "text": "Starbucks is premium.",
                            },
                            "groundingChunkIndices": [0],
                        }
                    ],
                },
            }
        ]
    }
    p = parse_gemini(b(body))
    assert p.answer_text == first + second and p.deep_thinking_used
    (c,) = p.citations
    assert p.answer_text[c.span_start : c.span_end] == "Starbucks is premium."


@pytest.mark.parametrize("parse", [parse_openai_chat, parse_perplexity])
def test_chat_content_given_as_parts_is_concatenated(parse):
    body = {
        "id": "c1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Luckin is "},
                        {"type": "text", "text": "cheapest [1]."},
                    ],
                },
            }
        ],
        "citations": ["https://a.cn/x"],
    }
    assert parse(b(body)).answer_text == "Luckin is cheapest [1]."


# --------------------------------------------------------------------------- Gemini targets
@pytest.mark.parametrize(
    ("web", "target"),
    [
        (
            {
                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/A",
                "title": "luckincoffee.com",
            },
            "https://luckincoffee.com/",
        ),
        # Vertex AI names the domain in its own field; it wins over a page title
        (
            {
                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/B",
                "title": "Luckin's price war",
                "domain": "www.scmp.com",
            },
            "https://www.scmp.com/",
        ),
        # a title that is not a host names no target
        (
            {
                "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/C",
                "title": "Luckin Coffee - Wikipedia",
            },
            None,
        ),
        # a direct URI is its own target
        ({"uri": "https://www.reuters.com/cotti", "title": "reuters.com"}, None),
    ],
)
def test_gemini_grounding_target_comes_from_domain_then_title(web, target):
    from geo_pipeline.connectors.parsers import grounding_target

    assert grounding_target(web) == target
