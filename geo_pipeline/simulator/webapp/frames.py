"""Each simulated consumer chat app's own streamed frame shape (SSE), from one generated answer.

The shapes follow what browser collectors of the real apps parse
(``docs/research``: shared/research/answer-services.md section 3, cited per encoder below);
where the research found no published shape the encoder says "(inf.)": an inference, kept
deliberately close to the documented parts so a parser written for it is plausible.

``encode(platform, turn)`` yields the SSE chunks of one answer; ``cut`` (a truncated-stream fault)
stops it before the final frame.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from geo_pipeline.simulator.answers import GeneratedCitation


@dataclass(frozen=True)
class Turn:
    """What one send produced: the answer text, the citations it cites (ids are the ``[n]``
    markers in the text), the search queries the engine ran and whether search was on."""

    message_id: int
    question: str
    text: str
    citations: tuple[GeneratedCitation, ...]
    queries: tuple[str, ...]
    search: bool


def _sse(data: Any, event: str | None = None) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {body}\n\n".encode()


def _chunks(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _host(url: str) -> str:
    return url.split("/")[2] if "://" in url else url


# --------------------------------------------------------------------------- DeepSeek
def deepseek(turn: Turn) -> Iterator[bytes]:
    """DeepSeek's web chat (``POST /api/v0/chat/completion``): ``event: ready``, then a
    JSON-patch-like stream of ``{"v": value, "p": path, "o": op}`` frames: the first carries the
    whole ``response`` object, ``o: APPEND`` on ``response/fragments`` adds a fragment, a frame
    with only ``v`` appends to the last path named (source: a stored capture of chat.deepseek.com,
    terminail/chromai-extension request-response-20251121.md). The SEARCH fragment's fields
    (``queries``, ``results[{url, title, snippet, cite_index}]``) and the closing
    ``response/status = FINISHED`` + ``event: close`` are (inf.)."""
    yield _sse(
        {"request_message_id": turn.message_id - 1, "response_message_id": turn.message_id}, "ready"
    )
    yield _sse(
        {
            "v": {
                "response": {
                    "message_id": turn.message_id,
                    "role": "ASSISTANT",
                    "search_enabled": turn.search,
                    "status": "WIP",
                    "fragments": [],
                }
            }
        }
    )
    n = 0
    if turn.search:
        results = [
            {"url": c.url, "title": c.title, "snippet": c.title, "cite_index": int(c.id)}
            for c in turn.citations
        ]
        yield _sse(
            {
                "v": [
                    {"id": 1, "type": "SEARCH", "queries": list(turn.queries), "results": results}
                ],
                "p": "response/fragments",
                "o": "APPEND",
            }
        )
        n = 1
    parts = _chunks(turn.text)
    yield _sse(
        {
            "v": [{"id": n + 1, "type": "RESPONSE", "content": parts[0]}],
            "p": "response/fragments",
            "o": "APPEND",
        }
    )
    for i, part in enumerate(parts[1:]):
        if i == 0:
            yield _sse({"v": part, "p": f"response/fragments/{n}/content", "o": "APPEND"})
        else:
            yield _sse({"v": part})
    yield _sse({"v": "FINISHED", "p": "response/status", "o": "SET"})
    yield _sse({"click_behavior": "none"}, "close")


# --------------------------------------------------------------------------- Doubao
def doubao(turn: Turn) -> Iterator[bytes]:
    """Doubao's web chat (a ``/chat/completion`` URL): each ``data:`` line holds ``patch_op[]``,
    each op a ``patch_value.content_block[]``; ``block_type 10000`` is answer text
    (``content.text_block.text``), ``10025`` a ``search_query_result_block`` with ``queries[]``
    (the fan-out) and ``results[]`` of ``text_card{url, title, summary, sitename, index}``
    (source: LLM Sentry's doubao_web.py parser, research section 3). The closing
    ``event: SSE_REPLY_END`` is (inf.)."""

    def op(block: dict[str, Any]) -> bytes:
        return _sse(
            {
                "patch_op": [
                    {"patch_object": 1, "patch_type": 1, "patch_value": {"content_block": [block]}}
                ]
            }
        )

    if turn.search:
        results = [
            {
                "text_card": {
                    "url": c.url,
                    "title": c.title,
                    "summary": c.title,
                    "sitename": _host(c.url),
                    "index": int(c.id),
                },
                "query_indexes": [0],
            }
            for c in turn.citations
        ]
        yield op(
            {
                "block_type": 10025,
                "block_id": f"s{turn.message_id}",
                "content": {
                    "search_query_result_block": {"queries": list(turn.queries), "results": results}
                },
            }
        )
    for part in _chunks(turn.text):
        yield op(
            {
                "block_type": 10000,
                "block_id": f"t{turn.message_id}",
                "content": {"text_block": {"text": part}},
            }
        )
    yield _sse({"end_type": 1}, "SSE_REPLY_END")


# --------------------------------------------------------------------------- Kimi
def kimi(turn: Turn) -> Iterator[bytes]:
    """Kimi's web chat (``/api/chat/{id}/completion/stream``): events ``req``, ``cmpl`` (text)
    and ``all_done`` (source: public adapters, research section 3). The research found no
    citation format for Kimi: the ``search_plus`` events (``msg.type`` ``start_res`` with the
    queries, ``get_res`` with one result) are (inf.)."""
    yield _sse({"event": "req", "id": str(turn.message_id)})
    if turn.search:
        yield _sse(
            {"event": "search_plus", "msg": {"type": "start_res", "queries": list(turn.queries)}}
        )
        for c in turn.citations:
            yield _sse(
                {
                    "event": "search_plus",
                    "msg": {
                        "type": "get_res",
                        "title": c.title,
                        "url": c.url,
                        "site_name": _host(c.url),
                        "index": int(c.id),
                    },
                }
            )
    for part in _chunks(turn.text):
        yield _sse({"event": "cmpl", "text": part})
    yield _sse({"event": "all_done"})


ENCODERS = {"deepseek": deepseek, "doubao": doubao, "kimi": kimi}


def encode(platform: str, turn: Turn, *, cut: bool = False) -> list[bytes]:
    """The SSE chunks of one answer; ``cut``: a truncated stream (about half the frames, never
    the final one), the connection closes without the app's end marker."""
    frames = list(ENCODERS[platform](turn))
    if cut:
        frames = frames[: max(2, len(frames) // 2)]
    return frames
