"""Doubao's consumer chat (www.doubao.com, and the simulator's ``/ui/doubao/``): selectors and
the stream parser.

Stream (source: LLM Sentry's doubao_web.py, research section 3): each ``data:`` holds
``patch_op[]``, each op a ``patch_value.content_block[]``; ``block_type 10000`` is answer text
(``content.text_block.text``), ``10025`` a ``search_query_result_block`` with ``queries[]`` and
``results[]`` of ``text_card{url, title, summary, sitename, index}`` or ``video_card``. Done =
``event: SSE_REPLY_END`` (inf.).
"""

from __future__ import annotations

import re
from typing import Any

from geo_pipeline.connectors.base import Unparseable
from geo_pipeline.connectors.browser.spec import PlatformSpec, cited, sse_events
from geo_pipeline.connectors.parsers import ParsedAnswer

TEXT_BLOCK = 10000
SEARCH_BLOCK = 10025


def parse(raw: bytes) -> ParsedAnswer:
    text: list[str] = []
    queries: list[str] = []
    results: list[tuple[int, str, str | None]] = []
    finished = known = False
    for event, data in sse_events(raw):
        if event == "SSE_REPLY_END":
            finished = known = True
            continue
        if not isinstance(data, dict) or "patch_op" not in data:
            continue
        known = True
        for op in data.get("patch_op") or []:
            blocks: list[Any] = ((op or {}).get("patch_value") or {}).get("content_block") or []
            for block in blocks:
                kind = block.get("block_type")
                content = block.get("content") or {}
                if kind == TEXT_BLOCK:
                    text.append(str((content.get("text_block") or {}).get("text") or ""))
                elif kind == SEARCH_BLOCK:
                    s = content.get("search_query_result_block") or {}
                    queries.extend(str(q) for q in s.get("queries") or [])
                    for r in s.get("results") or []:
                        card = r.get("text_card") or r.get("video_card") or {}
                        results.append(
                            (
                                int(card.get("index") or 0),
                                str(card.get("url") or ""),
                                card.get("title"),
                            )
                        )
    if not known:
        raise Unparseable("doubao: no Doubao patch_op frames in the captured stream", raw=raw)
    answer = "".join(text)
    return ParsedAnswer(
        answer_text=answer,
        citations=cited(answer, results),
        truncated=not finished,
        web_search_used=bool(queries or results),
        search_queries=tuple(queries),
        warnings=() if finished else ("STREAM_INCOMPLETE",),
    )


SPEC = PlatformSpec(
    platform="doubao",
    page_path="/ui/doubao/",
    stream_url=re.compile(r"/chat/completion"),
    input="textarea[data-testid=chat_input_input]",
    send="button[data-testid=chat_input_send_button]",
    search_toggle="button:has-text('联网搜索')",
    stop="button:has-text('停止生成')",
    answer=".answer",
    citation_links="a.citation-card",
    history_links="nav.history a.conversation",
    login_markers=("form[action$='/login']", "button:has-text('登录')"),
    captcha_markers=(".captcha", "text=请完成安全验证"),
    rate_limit_markers=("text=请求过于频繁",),
    own_domains=("doubao.com", "bytedance.com", "douyin.com"),
    parse=parse,
)
