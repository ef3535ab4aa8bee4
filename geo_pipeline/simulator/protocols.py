"""The simulator's synchronous engine protocols: one generated answer, dressed in each vendor's
documented response shape, so every real-protocol connector can be exercised over HTTP offline.

Pure functions, values in and out: ``question_of`` reads the prompt from a request body,
``error_body`` builds the vendor's error object, ``success_body`` the answer (optionally one of the
failures vendors report *inside* HTTP 200).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from geo_pipeline.simulator.answers import GeneratedAnswer, GeneratedCitation

PROTOCOLS = ("openai_chat", "openai_responses", "perplexity", "gemini", "anthropic")
# Labels of the stats (``{label}/{model}``); OpenAI chat keeps its historical "openai".
STATS_LABEL = {"openai_chat": "openai"}

# error kind -> (HTTP status, OpenAI type, OpenAI code, Gemini status, Anthropic type)
_ERRORS: dict[str, tuple[int, str, str | None, str, str]] = {
    "bad_request": (
        400,
        "invalid_request_error",
        None,
        "INVALID_ARGUMENT",
        "invalid_request_error",
    ),
    "model_not_found": (
        404,
        "invalid_request_error",
        "model_not_found",
        "NOT_FOUND",
        "not_found_error",
    ),
    "unauthenticated": (
        401,
        "invalid_request_error",
        "invalid_api_key",
        "UNAUTHENTICATED",
        "authentication_error",
    ),
    "permission": (
        403,
        "invalid_request_error",
        "permission_denied",
        "PERMISSION_DENIED",
        "permission_error",
    ),
    "rate_limited": (
        429,
        "requests",
        "rate_limit_exceeded",
        "RESOURCE_EXHAUSTED",
        "rate_limit_error",
    ),
    "server": (500, "server_error", None, "INTERNAL", "api_error"),
}


def auth_key(protocol: str, headers: Any) -> str | None:
    """The API key as each vendor's documented header carries it."""
    if protocol == "gemini":
        return headers.get("x-goog-api-key")
    if protocol == "anthropic":
        return headers.get("x-api-key")
    value = headers.get("Authorization", "")
    return value[7:].strip() if value.startswith("Bearer ") else None


def question_of(protocol: str, body: dict[str, Any]) -> str:
    """The user's prompt, from wherever the protocol puts it ('' when absent)."""
    if protocol == "openai_responses":
        inp = body.get("input")
        if isinstance(inp, str):
            return inp
        body = {"messages": inp if isinstance(inp, list) else []}
    if protocol == "gemini":
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents or not isinstance(contents[-1], dict):
            return ""
        parts = contents[-1].get("parts") or []
        return "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict))
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        return ""
    content = users[-1].get("content")
    if isinstance(content, list):  # content blocks / parts
        return "".join(
            str(c.get("text") or "") for c in content if isinstance(c, dict) and "text" in c
        )
    return str(content or "")


def error_body(protocol: str, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    status, o_type, o_code, g_status, a_type = _ERRORS[kind]
    if protocol == "gemini":
        return status, {"error": {"code": status, "message": message, "status": g_status}}
    if protocol == "anthropic":
        if kind == "server":
            a_type, status = "overloaded_error", 529
        return status, {"type": "error", "error": {"type": a_type, "message": message}}
    return status, {"error": {"message": message, "type": o_type, "param": None, "code": o_code}}


def _spans(text: str, citations: tuple[GeneratedCitation, ...]) -> list[tuple[int, int]]:
    """Character span of each citation's reference line "[n] [title](url)" in the answer."""
    out = []
    pos = 0
    for c in citations:
        line = f"[{c.id}] [{c.title}]({c.url})"
        start = text.find(line, pos)
        if start < 0:
            out.append((-1, -1))
            continue
        out.append((start, start + len(line)))
        pos = start + len(line)
    return out


def _rid(prefix: str, key: str) -> str:
    return prefix + hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


_ID_PREFIX = {
    "openai_chat": "chatcmpl-",
    "perplexity": "chatcmpl-",
    "openai_responses": "resp_",
    "gemini": "",
    "anthropic": "msg_",
}


def response_id(protocol: str, key: str) -> str:
    """The id a success body of ``protocol`` carries for ``key`` (``id``, Gemini's
    ``responseId``): what the connector records as the attempt's upstream id."""
    return _rid(_ID_PREFIX[protocol], key)


def success_body(
    protocol: str,
    ans: GeneratedAnswer,
    *,
    model: str,
    key: str,
    question: str,
    failure: str | None = None,
) -> dict[str, Any]:
    """The vendor's success shape. ``failure`` = 'filtered' returns the refusal/filter that the
    vendor reports inside HTTP 200 (content_filter, blockReason, refusal, failed status)."""
    return _BUILDERS[protocol](ans, model, key, question, failure)


def tokens(question: str, text: str) -> tuple[int, int]:
    """Deterministic token counts: a system prompt's worth plus the question in, the text out."""
    return 24 + max(1, len(question) // 2), len(text) // 2


def _usage(question: str, text: str, model: str = "") -> dict[str, Any]:
    """OpenAI-compatible ``usage``; DeepSeek models add their cache hit/miss split, others
    ``prompt_tokens_details.cached_tokens`` (the system prompt is a cache hit)."""
    p, c = tokens(question, text)
    usage: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    if model.startswith("deepseek"):
        usage["prompt_cache_hit_tokens"] = 24
        usage["prompt_cache_miss_tokens"] = p - 24
    else:
        usage["prompt_tokens_details"] = {"cached_tokens": 24}
    return usage


def _openai_chat(
    ans: GeneratedAnswer, model: str, key: str, question: str, failure: str | None
) -> dict[str, Any]:
    content = "" if failure else ans.answer
    annotations = [
        {
            "type": "url_citation",
            "url_citation": {"start_index": s, "end_index": e, "url": c.url, "title": c.title},
        }
        for c, (s, e) in zip(ans.citations, _spans(content, ans.citations), strict=True)
        if s >= 0
    ]
    finish = "content_filter" if failure else ("length" if ans.truncated else "stop")
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if annotations:
        message["annotations"] = annotations
    return {
        "id": _rid("chatcmpl-", key),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(question, content, model),
    }


def _perplexity(
    ans: GeneratedAnswer, model: str, key: str, question: str, failure: str | None
) -> dict[str, Any]:
    body = _openai_chat(ans, model, key, question, failure)
    body["choices"][0]["message"].pop("annotations", None)
    if not failure:
        body["citations"] = [c.url for c in ans.citations]
        body["search_results"] = [
            {"title": c.title, "url": c.url, "date": "2026-11-01"}
            for c in (*ans.citations, *ans.search_results)
        ]
    # Sonar's usage: tokens plus the search context size its request fee depends on.
    body["usage"].pop("prompt_tokens_details", None)
    body["usage"].update(
        {
            "search_context_size": "low",
            "citation_tokens": 0,
            "num_search_queries": 0 if failure else 1,
        }
    )
    return body


def _openai_responses(
    ans: GeneratedAnswer, model: str, key: str, question: str, failure: str | None
) -> dict[str, Any]:
    rid = _rid("resp_", key)
    search = {
        "type": "web_search_call",
        "id": _rid("ws_", key),
        "status": "completed",
        "action": {
            "type": "search",
            "query": question,
            "sources": [
                {"type": "url", "url": c.url} for c in (*ans.citations, *ans.search_results)
            ],
        },
    }
    base: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
    }
    p, c = tokens(question, "" if failure else ans.answer)
    base["usage"] = {
        "input_tokens": p,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": c,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": p + c,
    }
    if failure:
        return {
            **base,
            "status": "incomplete",
            "incomplete_details": {"reason": "content_filter"},
            "output": [search],
        }
    text = ans.answer
    annotations = [
        {"type": "url_citation", "start_index": s, "end_index": e, "url": c.url, "title": c.title}
        for c, (s, e) in zip(ans.citations, _spans(text, ans.citations), strict=True)
        if s >= 0
    ]
    message = {
        "type": "message",
        "id": _rid("msg_", key),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": annotations}],
    }
    if ans.truncated:
        base["status"] = "incomplete"
        base["incomplete_details"] = {"reason": "max_output_tokens"}
    return {**base, "output": [search, message]}


def _gemini(
    ans: GeneratedAnswer, model: str, key: str, question: str, failure: str | None
) -> dict[str, Any]:
    if failure:
        return {
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
            "usageMetadata": {
                "promptTokenCount": tokens(question, "")[0],
                "totalTokenCount": tokens(question, "")[0],
            },
            "modelVersion": model,
        }
    text = ans.answer
    chunks = [
        {"web": {"uri": c.url, "title": c.title}} for c in (*ans.citations, *ans.search_results)
    ]
    supports = []
    for i, (s, e) in enumerate(_spans(text, ans.citations)):
        if s < 0:
            continue
        # Gemini segment indices are UTF-8 byte offsets into the part's text.
        start_b, end_b = len(text[:s].encode()), len(text[:e].encode())
        supports.append(
            {
                "segment": {"startIndex": start_b, "endIndex": end_b, "text": text[s:e]},
                "groundingChunkIndices": [i],
                "confidenceScores": [0.9],
            }
        )
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "MAX_TOKENS" if ans.truncated else "STOP",
                "index": 0,
                "groundingMetadata": {
                    "webSearchQueries": [question],
                    "groundingChunks": chunks,
                    "groundingSupports": supports,
                },
            }
        ],
        "usageMetadata": {
            "promptTokenCount": tokens(question, text)[0],
            "candidatesTokenCount": tokens(question, text)[1],
            "totalTokenCount": sum(tokens(question, text)),
        },
        "modelVersion": model,
        "responseId": _rid("", key),
    }


def _anthropic(
    ans: GeneratedAnswer, model: str, key: str, question: str, failure: str | None
) -> dict[str, Any]:
    tool_id = _rid("srvtoolu_", key)
    results = [
        {
            "type": "web_search_result",
            "url": c.url,
            "title": c.title,
            "encrypted_content": _rid("enc_", c.url),
            "page_age": None,
        }
        for c in (*ans.citations, *ans.search_results)
    ]
    blocks: list[dict[str, Any]] = [
        {
            "type": "server_tool_use",
            "id": tool_id,
            "name": "web_search",
            "input": {"query": question},
        },
        {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": results},
    ]
    text = "" if failure else ans.answer
    pos = 0
    for c, (s, e) in zip(ans.citations, _spans(text, ans.citations), strict=True):
        if s < 0:
            continue
        if s > pos:
            blocks.append({"type": "text", "text": text[pos:s]})
        blocks.append(
            {
                "type": "text",
                "text": text[s:e],
                "citations": [
                    {
                        "type": "web_search_result_location",
                        "url": c.url,
                        "title": c.title,
                        "encrypted_index": _rid("idx_", c.url),
                        "cited_text": c.title,
                    }
                ],
            }
        )
        pos = e
    if pos < len(text):
        blocks.append({"type": "text", "text": text[pos:]})
    stop = "refusal" if failure else ("max_tokens" if ans.truncated else "end_turn")
    return {
        "id": _rid("msg_", key),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": tokens(question, text)[0],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": tokens(question, text)[1],
            "server_tool_use": {"web_search_requests": 1},
        },
    }


_BUILDERS = {
    "openai_chat": _openai_chat,
    "perplexity": _perplexity,
    "openai_responses": _openai_responses,
    "gemini": _gemini,
    "anthropic": _anthropic,
}
