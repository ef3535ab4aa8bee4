"""Parsers of the engine protocols people monitor: each turns its own citation format into the one
normalised ``Citation`` model, keeping *cited* (the answer points at it) apart from *retrieved*
(the engine fetched it but did not cite it), with title, URL and the text span where the format
gives one (R17, R18).

Pure functions: bytes in, ``ParsedAnswer`` out. They raise the typed errors of base.py:
``Unparseable`` (keep raw, send to review, never re-ask — R13) when the body is not the documented
shape, ``UpstreamFailed`` when the engine answered with a refusal or a filter *inside* HTTP 200
(content_filter, Gemini promptFeedback.blockReason, Anthropic ``refusal``), and
``error_in_body`` maps an error object returned with status 200 to the class its type names.

Shapes follow the public API references: OpenAI Chat Completions (``message.annotations`` of type
``url_citation``), OpenAI Responses (``output_text.annotations`` with ``start_index``/``end_index``,
``web_search_call.action.sources``), Perplexity Sonar (``citations``, ``search_results``), Gemini
``generateContent`` (``groundingMetadata``: ``groundingChunks``, ``groundingSupports`` whose segment
indices are UTF-8 *byte* offsets, ``webSearchQueries``), Anthropic Messages with the web search
tool (``web_search_tool_result`` blocks, text blocks with ``web_search_result_location``
citations carrying ``cited_text``).

Two rules hold for every protocol:

* **One source, one normalised URL** (R18). Cited citations are kept one per pointing (each has
  its own span or marker). A retrieved source is dropped when its normalised URL
  (``domain.urls.normalise_url``: tracking and share parameters gone) is already cited or already
  retrieved; the first raw URL received is the one kept. So a page fetched plainly and cited
  with ``?utm_source=openai`` is cited, not also retrieved.
* **Text is joined as the engine's own client shows it.** Pieces the engine split inside one
  segment (Anthropic text blocks around citations, OpenAI ``output_text`` parts of one message,
  Gemini candidate parts, chat content parts) are concatenated exactly as returned, like the
  vendors' SDKs (``output_text``, ``response.text``, the streamed deltas). Separate segments —
  text before and after a search or tool call, separate Responses ``message`` items — are
  separate paragraphs: ``\n\n`` between them unless the boundary already has whitespace, so the
  last word of one never runs into the first of the next ("rankings.Huawei").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from geo_pipeline.connectors.base import (
    Citation,
    ConnectorError,
    InvalidParams,
    NoPermission,
    RateLimited,
    TransientError,
    Unparseable,
    UpstreamFailed,
)
from geo_pipeline.domain.urls import normalise_url, registrable_domain, site_url
from geo_pipeline.domain.usage import Usage


@dataclass(frozen=True)
class ParsedAnswer:
    answer_text: str
    citations: tuple[Citation, ...] = ()
    truncated: bool = False
    response_id: str | None = None
    web_search_used: bool = False
    deep_thinking_used: bool = False
    search_queries: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    # Request-level usage as the engine reported it (None: the body carries none).
    usage: Usage | None = None


def load_json(raw: bytes, protocol: str) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Unparseable(f"{protocol}: the body is not JSON ({exc})", raw=raw) from exc
    if not isinstance(body, dict):
        raise Unparseable(f"{protocol}: the body is not a JSON object", raw=raw)
    return body


def error_in_body(body: dict[str, Any], raw: bytes, protocol: str) -> ConnectorError | None:
    """An error object in a body (also inside HTTP 200, which some gateways return), mapped by
    the type/status/code it names. None when the body carries no error."""
    err = body.get("error")
    if body.get("type") == "error" and isinstance(err, dict):  # Anthropic
        pass
    elif not isinstance(err, dict) or not err:
        return None
    kind = " ".join(str(err.get(k) or "") for k in ("type", "code", "status")).lower()
    message = f"{protocol}: {err.get('message') or kind}"
    if "rate_limit" in kind or "resource_exhausted" in kind or "requests" == kind.strip():
        return RateLimited(message, raw=raw)
    if any(
        k in kind
        for k in ("auth", "permission", "invalid_api_key", "unauthenticated", "insufficient_quota")
    ):
        return NoPermission(message, raw=raw)
    if "invalid" in kind or "not_found" in kind or "failed_precondition" in kind:
        return InvalidParams(message, raw=raw)
    return TransientError(message, raw=raw)


def _need(cond: bool, raw: bytes, protocol: str, what: str) -> None:
    if not cond:
        raise Unparseable(f"{protocol}: {what}", raw=raw)


def _raise_error(body: dict[str, Any], raw: bytes, protocol: str) -> None:
    err = error_in_body(body, raw, protocol)
    if err is not None:
        raise err


PARAGRAPH = "\n\n"


class _Joiner:
    """Builds the answer text from segments of pieces (see the module docstring) and gives each
    piece's character offset in the joined text, for citation spans."""

    def __init__(self) -> None:
        self._out: list[str] = []
        self._len = 0
        self._new_segment = False

    def break_segment(self) -> None:
        """The next piece starts a new segment (text after a tool call, a new message item)."""
        self._new_segment = bool(self._out)

    def add(self, piece: str) -> int:
        """Append one piece; returns its start offset in the joined text."""
        if self._new_segment and piece:
            prev = self._out[-1] if self._out else ""
            if prev and not prev[-1].isspace() and not piece[0].isspace():
                self._append(PARAGRAPH)
            self._new_segment = False
        start = self._len
        self._append(piece)
        return start

    def _append(self, text: str) -> None:
        self._out.append(text)
        self._len += len(text)

    @property
    def text(self) -> str:
        return "".join(self._out)


def _sources(cited: list[Citation], retrieved: list[Citation]) -> tuple[Citation, ...]:
    """Cited as given, then each retrieved source once: not when its normalised URL is already
    cited or retrieved; the first raw URL received is kept (R18)."""
    seen = {normalise_url(c.url).normalized for c in cited}
    kept: list[Citation] = []
    for c in retrieved:
        key = normalise_url(c.url).normalized
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return (*cited, *kept)


def _content_text(content: Any, raw: bytes, proto: str) -> tuple[str, bool]:
    """Chat ``message.content``: a string, or a list of parts whose text parts are concatenated
    (Mistral-style and some gateways); thinking parts are not the answer. Returns (text,
    whether a thinking part was present)."""
    if content is None:
        return "", False
    if isinstance(content, str):
        return content, False
    _need(isinstance(content, list), raw, proto, "message.content is not text")
    texts: list[str] = []
    thinking = False
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "output_text"):
            text = part.get("text")
            _need(isinstance(text, str), raw, proto, "content part without text")
            texts.append(str(text))
        elif isinstance(part, dict) and part.get("type") in ("thinking", "reasoning"):
            thinking = True
    return "".join(texts), thinking


# --------------------------------------------------------------------------- OpenAI chat
def parse_openai_chat(raw: bytes) -> ParsedAnswer:
    """OpenAI-compatible Chat Completions (DeepSeek, Moonshot/Kimi, Qwen compatible mode,
    Doubao/Ark). Citations: ``message.annotations[].url_citation`` when the engine gives them
    (search models); Perplexity-style top-level ``citations`` are handled by parse_perplexity."""
    proto = "openai_chat"
    body = load_json(raw, proto)
    _raise_error(body, raw, proto)
    choices: Any = body.get("choices")
    _need(isinstance(choices, list) and bool(choices), raw, proto, "no choices")
    choice = choices[0]
    _need(isinstance(choice, dict), raw, proto, "choice is not an object")
    message = choice.get("message")
    _need(isinstance(message, dict), raw, proto, "choice has no message")
    finish = choice.get("finish_reason")
    if finish == "content_filter":
        raise UpstreamFailed(f"{proto}: the answer was withheld by a content filter", raw=raw)
    if message.get("refusal"):
        raise UpstreamFailed(f"{proto}: refusal: {message['refusal']}", raw=raw)
    content, thinking_part = _content_text(message.get("content"), raw, proto)
    citations: list[Citation] = []
    for ann in message.get("annotations") or []:
        if isinstance(ann, dict) and ann.get("type") == "url_citation":
            uc = ann.get("url_citation") or {}
            if uc.get("url"):
                citations.append(
                    Citation(
                        url=str(uc["url"]),
                        relation="cited",
                        id=str(len(citations) + 1),
                        title=uc.get("title"),
                        span_start=uc.get("start_index"),
                        span_end=uc.get("end_index"),
                    )
                )
    reasoning = message.get("reasoning_content")  # DeepSeek reasoner / Qwen thinking mode
    usage, usage_warnings = _usage_of("openai_chat", body)
    return ParsedAnswer(
        usage=usage,
        warnings=usage_warnings,
        answer_text=content,
        citations=_sources(citations, []),
        truncated=finish == "length",
        response_id=body.get("id"),
        web_search_used=bool(citations),
        deep_thinking_used=bool(reasoning) or thinking_part,
    )


# --------------------------------------------------------------------------- Perplexity
def parse_perplexity(raw: bytes) -> ParsedAnswer:
    """Perplexity Sonar: chat-completion body plus top-level ``citations`` (URLs, numbered as the
    ``[n]`` markers of the text: cited) and ``search_results`` ({title, url, date}: retrieved,
    unless the same source, by normalised URL, is cited or listed already)."""
    proto = "perplexity"
    parsed = parse_openai_chat(raw)
    body = load_json(raw, proto)
    cited_urls = [str(u) for u in body.get("citations") or [] if isinstance(u, str)]
    titles = {
        str(r.get("url")): r.get("title")
        for r in body.get("search_results") or []
        if isinstance(r, dict) and r.get("url")
    }
    citations = [
        Citation(url=u, relation="cited", id=str(i), title=titles.get(u))
        for i, u in enumerate(cited_urls, start=1)
    ]
    retrieved = [
        Citation(url=str(r["url"]), relation="retrieved", title=r.get("title"))
        for r in body.get("search_results") or []
        if isinstance(r, dict) and r.get("url")
    ]
    return ParsedAnswer(
        usage=parsed.usage,
        warnings=parsed.warnings,
        answer_text=parsed.answer_text,
        citations=_sources(citations, retrieved),
        truncated=parsed.truncated,
        response_id=parsed.response_id,
        web_search_used=bool(citations),
        deep_thinking_used=parsed.deep_thinking_used or "<think>" in parsed.answer_text,
    )


# --------------------------------------------------------------------------- OpenAI Responses
def parse_openai_responses(raw: bytes) -> ParsedAnswer:
    """OpenAI Responses API with the ``web_search`` tool: ``output`` holds ``web_search_call``
    items (their ``action.sources`` are retrieved) and ``message`` items whose ``output_text``
    parts carry ``url_citation`` annotations with character ``start_index``/``end_index``
    (cited). ``status`` failed/incomplete are errors inside HTTP 200."""
    proto = "openai_responses"
    body = load_json(raw, proto)
    status = body.get("status")
    if status == "failed":
        err = body.get("error") or {}
        raise UpstreamFailed(f"{proto}: failed: {err.get('code')}: {err.get('message')}", raw=raw)
    _raise_error(body, raw, proto)
    output: Any = body.get("output")
    _need(isinstance(output, list), raw, proto, "no output list")
    incomplete = (body.get("incomplete_details") or {}).get("reason")
    if status == "incomplete" and incomplete == "content_filter":
        raise UpstreamFailed(f"{proto}: incomplete: content_filter", raw=raw)
    joined = _Joiner()
    cited: list[Citation] = []
    retrieved: list[Citation] = []
    queries: list[str] = []
    searched = False
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "web_search_call":
            searched = True
            action = item.get("action") or {}
            if action.get("query"):
                queries.append(str(action["query"]))
            for src in action.get("sources") or []:
                if isinstance(src, dict) and src.get("url"):
                    retrieved.append(Citation(url=str(src["url"]), relation="retrieved"))
        elif item.get("type") == "message":
            joined.break_segment()  # each message item is a segment of its own
            for part in item.get("content") or []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "refusal":
                    raise UpstreamFailed(f"{proto}: refusal: {part.get('refusal')}", raw=raw)
                if part.get("type") != "output_text":
                    continue
                text: Any = part.get("text")
                _need(isinstance(text, str), raw, proto, "output_text without text")
                offset = joined.add(text)
                for ann in part.get("annotations") or []:
                    if (
                        isinstance(ann, dict)
                        and ann.get("type") == "url_citation"
                        and ann.get("url")
                    ):
                        start, end = ann.get("start_index"), ann.get("end_index")
                        cited.append(
                            Citation(
                                url=str(ann["url"]),
                                relation="cited",
                                id=str(len(cited) + 1),
                                title=ann.get("title"),
                                # indices are relative to this part; shift to the joined text
                                span_start=None if start is None else offset + int(start),
                                span_end=None if end is None else offset + int(end),
                            )
                        )
    usage, usage_warnings = _usage_of("openai_responses", body)
    return ParsedAnswer(
        usage=usage,
        warnings=usage_warnings,
        answer_text=joined.text,
        citations=_sources(cited, retrieved),
        truncated=status == "incomplete",
        response_id=body.get("id"),
        web_search_used=searched,
        deep_thinking_used=any(
            isinstance(i, dict) and i.get("type") == "reasoning" for i in output
        ),
        search_queries=tuple(queries),
    )


# --------------------------------------------------------------------------- Gemini
_GEMINI_FAILED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE"}


def _byte_to_char(text: str) -> Callable[[int], int]:
    """Gemini segment indices are UTF-8 byte offsets; Python strings index characters."""
    encoded = text.encode("utf-8")

    def convert(byte_index: int) -> int:
        byte_index = max(0, min(byte_index, len(encoded)))
        return len(encoded[:byte_index].decode("utf-8", errors="ignore"))

    return convert


_GROUNDING_REDIRECT = "/grounding-api-redirect/"


def grounding_target(web: dict[str, Any]) -> str | None:
    """The site a Gemini grounding chunk stands for, when its ``uri`` is Google's grounding
    redirect (``vertexaisearch.cloud.google.com/grounding-api-redirect/…``), which hides the
    page: ``web.domain`` (Vertex AI) if given, else ``web.title`` when it is a host name (the
    Gemini API puts the source's domain there, e.g. ``example.com``). ``https://<host>/``, or
    None when the chunk names no host or its uri is the page itself. Resolving the redirect
    (a bounded HEAD request) would give the full page URL; that belongs to the worker, not here."""
    uri = str(web.get("uri") or "")
    if _GROUNDING_REDIRECT not in uri:
        return None
    for name in (web.get("domain"), web.get("title")):
        if isinstance(name, str) and (url := site_url(name)):
            host = url.split("/")[2]
            if registrable_domain(host) != "google.com":  # the redirect names itself: no target
                return url
    return None


def parse_gemini(raw: bytes) -> ParsedAnswer:
    """Gemini ``generateContent`` with Google Search grounding. Chunks referenced by a
    ``groundingSupport`` are cited (with the supported segment as span and text); chunks no
    support points at are retrieved. ``promptFeedback.blockReason`` with no candidates, and a
    candidate ``finishReason`` of SAFETY/RECITATION/…, are failures inside HTTP 200."""
    proto = "gemini"
    body = load_json(raw, proto)
    _raise_error(body, raw, proto)
    feedback = body.get("promptFeedback") or {}
    candidates = body.get("candidates") or []
    if feedback.get("blockReason") and not candidates:
        raise UpstreamFailed(f"{proto}: prompt blocked: {feedback['blockReason']}", raw=raw)
    _need(isinstance(candidates, list) and bool(candidates), raw, proto, "no candidates")
    cand = candidates[0]
    _need(isinstance(cand, dict), raw, proto, "candidate is not an object")
    finish = cand.get("finishReason")
    if finish in _GEMINI_FAILED:
        raise UpstreamFailed(f"{proto}: finishReason {finish}", raw=raw)
    parts = (cand.get("content") or {}).get("parts") or []
    # Text parts concatenate as the SDK's ``response.text`` does; thought parts are not the answer.
    # ``part_at[i]`` is part i's (char offset in the answer, text), for segments that name a part.
    part_at: dict[int, tuple[int, str]] = {}
    pieces: list[str] = []
    length = 0
    for i, p in enumerate(parts):
        if isinstance(p, dict) and not p.get("thought") and isinstance(p.get("text"), str):
            part_at[i] = (length, p["text"])
            pieces.append(p["text"])
            length += len(p["text"])
    text = "".join(pieces)
    thought = any(isinstance(p, dict) and p.get("thought") for p in parts)
    meta = cand.get("groundingMetadata") or {}
    chunks = [c for c in meta.get("groundingChunks") or [] if isinstance(c, dict)]
    to_char = _byte_to_char(text)
    citations: list[Citation] = []
    referenced: set[int] = set()
    for support in meta.get("groundingSupports") or []:
        if not isinstance(support, dict):
            continue
        seg = support.get("segment") or {}
        if seg.get("partIndex") is not None and int(seg["partIndex"]) in part_at:
            # Indices are UTF-8 byte offsets inside the part the segment names.
            base, part_text = part_at[int(seg["partIndex"])]
            in_part = _byte_to_char(part_text)
            start = base + in_part(int(seg.get("startIndex", 0)))
            end = base + in_part(int(seg["endIndex"])) if seg.get("endIndex") is not None else None
        else:
            start = to_char(int(seg.get("startIndex", 0)))
            end = to_char(int(seg["endIndex"])) if seg.get("endIndex") is not None else None
        for idx in support.get("groundingChunkIndices") or []:
            if not isinstance(idx, int) or not 0 <= idx < len(chunks):
                continue
            web = chunks[idx].get("web") or {}
            if not web.get("uri"):
                continue
            referenced.add(idx)
            citations.append(
                Citation(
                    url=str(web["uri"]),
                    relation="cited",
                    id=str(idx + 1),
                    title=web.get("title"),
                    span_start=start,
                    span_end=end,
                    cited_text=seg.get("text"),
                    target_url=grounding_target(web),
                )
            )
    retrieved = [
        Citation(
            url=str(web["uri"]),
            relation="retrieved",
            id=str(idx + 1),
            title=web.get("title"),
            target_url=grounding_target(web),
        )
        for idx, chunk in enumerate(chunks)
        if idx not in referenced and (web := chunk.get("web") or {}).get("uri")
    ]
    queries = tuple(str(q) for q in meta.get("webSearchQueries") or [])
    usage, usage_warnings = _usage_of("gemini", body)
    return ParsedAnswer(
        usage=usage,
        warnings=usage_warnings,
        answer_text=text,
        citations=_sources(citations, retrieved),
        truncated=finish == "MAX_TOKENS",
        response_id=body.get("responseId"),
        web_search_used=bool(queries or chunks),
        deep_thinking_used=thought,
        search_queries=queries,
    )


# --------------------------------------------------------------------------- Anthropic
def parse_anthropic(raw: bytes) -> ParsedAnswer:
    """Anthropic Messages with the web search server tool. ``web_search_tool_result`` blocks list
    what was retrieved; ``text`` blocks carry ``citations`` of type ``web_search_result_location``
    (url, title, cited_text) — cited, with the span of that text block in the joined answer
    (adjacent text blocks concatenate as returned: the API splits a sentence around each cited
    claim; text after a tool call starts a new paragraph).
    ``stop_reason`` ``refusal`` is a failure inside HTTP 200; ``max_tokens`` is truncation."""
    proto = "anthropic"
    body = load_json(raw, proto)
    _raise_error(body, raw, proto)
    _need(body.get("type") == "message", raw, proto, f"type is {body.get('type')!r}")
    content: Any = body.get("content")
    _need(isinstance(content, list), raw, proto, "no content list")
    stop = body.get("stop_reason")
    if stop == "refusal":
        raise UpstreamFailed(f"{proto}: stop_reason refusal", raw=raw)
    joined = _Joiner()
    cited: list[Citation] = []
    retrieved: list[Citation] = []
    warnings: list[str] = []
    searched = thinking = False
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype != "text":
            # Text after a tool call (or thinking) is a new segment: a paragraph of its own.
            joined.break_segment()
        if btype in ("thinking", "redacted_thinking"):
            thinking = True
        elif btype == "server_tool_use" and block.get("name") == "web_search":
            searched = True
        elif btype == "web_search_tool_result":
            searched = True
            results = block.get("content")
            if isinstance(results, dict) and results.get("type") == "web_search_tool_result_error":
                warnings.append(f"WEB_SEARCH_ERROR:{results.get('error_code')}")
                continue
            for r in results or []:
                if isinstance(r, dict) and r.get("type") == "web_search_result" and r.get("url"):
                    retrieved.append(
                        Citation(url=str(r["url"]), relation="retrieved", title=r.get("title"))
                    )
        elif btype == "text":
            text: Any = block.get("text")
            _need(isinstance(text, str), raw, proto, "text block without text")
            offset = joined.add(text)
            for c in block.get("citations") or []:
                if isinstance(c, dict) and c.get("type") == "web_search_result_location":
                    cited.append(
                        Citation(
                            url=str(c.get("url")),
                            relation="cited",
                            id=str(len(cited) + 1),
                            title=c.get("title"),
                            span_start=offset,
                            span_end=offset + len(text),
                            cited_text=c.get("cited_text"),
                        )
                    )
    usage, usage_warnings = _usage_of("anthropic", body)
    return ParsedAnswer(
        usage=usage,
        answer_text=joined.text,
        citations=_sources(cited, retrieved),
        truncated=stop == "max_tokens",
        response_id=body.get("id"),
        web_search_used=searched,
        deep_thinking_used=thinking,
        warnings=(*warnings, *usage_warnings),
    )


# --------------------------------------------------------------------------- usage
def _count(m: Any, *path: str) -> int | None:
    """A non-negative integer at ``path`` inside ``m``; None when absent; ValueError when the
    field is there but is not a count."""
    for key in path:
        if not isinstance(m, dict) or m.get(key) is None:
            return None
        m = m[key]
    if isinstance(m, bool) or not isinstance(m, int) or m < 0:
        raise ValueError(f"{'.'.join(path)} is {m!r}, not a token count")
    return m


def _sum(*values: int | None) -> int | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def _usage_chat(body: dict[str, Any]) -> Usage | None:
    """OpenAI-compatible ``usage`` (DeepSeek's cache hit/miss split, OpenAI/Qwen/Ark
    ``prompt_tokens_details.cached_tokens``, Kimi's ``cached_tokens``; Perplexity adds
    ``search_context_size`` and ``num_search_queries``)."""
    u = body.get("usage")
    if not isinstance(u, dict):
        return None
    inp, out = _count(u, "prompt_tokens"), _count(u, "completion_tokens")
    cached = _count(u, "prompt_cache_hit_tokens")
    if cached is None:
        cached = _count(u, "prompt_tokens_details", "cached_tokens")
    if cached is None:
        cached = _count(u, "cached_tokens")
    context = u.get("search_context_size")
    return Usage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=_count(u, "total_tokens") or _sum(inp, out),
        cached_input_tokens=cached,
        reasoning_tokens=_count(u, "completion_tokens_details", "reasoning_tokens"),
        web_search_requests=_count(u, "num_search_queries"),
        search_context_size=str(context) if isinstance(context, str) else None,
        source="usage",
    )


def _usage_responses(body: dict[str, Any]) -> Usage | None:
    """Responses ``usage`` (input/output tokens with their details); web searches are the
    ``web_search_call`` items of ``output`` (each billed as one tool call)."""
    u = body.get("usage")
    if not isinstance(u, dict):
        return None
    inp, out = _count(u, "input_tokens"), _count(u, "output_tokens")
    output: Any = body.get("output")
    items: list[Any] = output if isinstance(output, list) else []
    return Usage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=_count(u, "total_tokens") or _sum(inp, out),
        cached_input_tokens=_count(u, "input_tokens_details", "cached_tokens"),
        reasoning_tokens=_count(u, "output_tokens_details", "reasoning_tokens"),
        web_search_requests=len(
            [i for i in items if isinstance(i, dict) and i.get("type") == "web_search_call"]
        ),
        source="usage",
    )


def _usage_anthropic(body: dict[str, Any]) -> Usage | None:
    """Anthropic ``usage``: ``input_tokens`` excludes cache writes and reads, so the billed input
    is their sum; ``server_tool_use.web_search_requests`` counts the searches billed."""
    u = body.get("usage")
    if not isinstance(u, dict):
        return None
    read = _count(u, "cache_read_input_tokens")
    inp = _sum(_count(u, "input_tokens"), _count(u, "cache_creation_input_tokens"), read)
    out = _count(u, "output_tokens")
    return Usage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=_sum(inp, out),
        cached_input_tokens=read,
        web_search_requests=_count(u, "server_tool_use", "web_search_requests"),
        source="usage",
    )


def _usage_gemini(body: dict[str, Any]) -> Usage | None:
    """Gemini ``usageMetadata``: the prompt plus the search tool's prompt is input; candidates
    plus thoughts are output (both billed at the output price)."""
    u = body.get("usageMetadata")
    if not isinstance(u, dict):
        return None
    prompt = _count(u, "promptTokenCount")
    inp = _sum(prompt, _count(u, "toolUsePromptTokenCount"))
    thoughts = _count(u, "thoughtsTokenCount")
    out = _sum(_count(u, "candidatesTokenCount"), thoughts)
    if out is None and prompt is not None:
        out = 0  # a blocked prompt: Gemini reports no candidates, so none were generated
    return Usage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=_count(u, "totalTokenCount") or _sum(inp, out),
        cached_input_tokens=_count(u, "cachedContentTokenCount"),
        reasoning_tokens=thoughts,
        source="usageMetadata",
    )


_USAGE: dict[str, Callable[[dict[str, Any]], Usage | None]] = {
    "openai_chat": _usage_chat,
    "perplexity": _usage_chat,
    "openai_responses": _usage_responses,
    "gemini": _usage_gemini,
    "anthropic": _usage_anthropic,
}


def _usage_of(protocol: str, body: dict[str, Any]) -> tuple[Usage | None, tuple[str, ...]]:
    """The body's usage, and a warning when it is there but unreadable (the answer stands)."""
    try:
        return _USAGE[protocol](body), ()
    except (ValueError, TypeError) as exc:
        return None, (f"USAGE_UNREADABLE: {exc}"[:200],)


def parse_usage(protocol: str, raw: bytes) -> Usage | None:
    """The request-level usage of a response body of ``protocol``, whatever its outcome (a
    refusal or filter inside HTTP 200 is billed too); None when the body is no JSON object,
    carries an error object, or reports no (readable) usage."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict) or error_in_body(body, raw, protocol) is not None:
        return None
    return _usage_of(protocol, body)[0]


PARSERS: dict[str, Callable[[bytes], ParsedAnswer]] = {
    "openai_chat": parse_openai_chat,
    "openai_responses": parse_openai_responses,
    "perplexity": parse_perplexity,
    "gemini": parse_gemini,
    "anthropic": parse_anthropic,
}
