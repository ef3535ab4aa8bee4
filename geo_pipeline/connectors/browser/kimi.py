"""Kimi's consumer chat (www.kimi.com, and the simulator's ``/ui/kimi/``): selectors and the
stream parser.

Stream (source: public adapters, research section 3): events ``req``, ``cmpl`` (``text``) and
``all_done``. No citation format was found for Kimi: ``search_plus`` with ``msg.type``
``start_res`` (queries) and ``get_res`` (one result) is (inf.), as in the simulator.
"""

from __future__ import annotations

import re

from geo_pipeline.connectors.base import Unparseable
from geo_pipeline.connectors.browser.spec import PlatformSpec, cited, sse_events
from geo_pipeline.connectors.parsers import ParsedAnswer


def parse(raw: bytes) -> ParsedAnswer:
    text: list[str] = []
    queries: list[str] = []
    results: list[tuple[int, str, str | None]] = []
    finished = known = False
    for _event, data in sse_events(raw):
        if not isinstance(data, dict) or "event" not in data:
            continue
        known = True
        kind = data["event"]
        if kind == "cmpl":
            text.append(str(data.get("text") or ""))
        elif kind == "all_done":
            finished = True
        elif kind == "search_plus":
            msg = data.get("msg") or {}
            if msg.get("type") == "start_res":
                queries.extend(str(q) for q in msg.get("queries") or [])
            elif msg.get("type") == "get_res":
                results.append(
                    (int(msg.get("index") or 0), str(msg.get("url") or ""), msg.get("title"))
                )
    if not known:
        raise Unparseable("kimi: no Kimi events in the captured stream", raw=raw)
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
    platform="kimi",
    page_path="/ui/kimi/",
    stream_url=re.compile(r"/api/chat/[^/]+/completion/stream"),
    input="div.chat-input-editor[contenteditable=true]",
    send="button.send-button",
    search_toggle="button:has-text('联网搜索')",
    stop="button:has-text('停止生成')",
    answer=".answer",
    citation_links="a.citation-card",
    history_links="nav.history a.conversation",
    login_markers=("form[action$='/login']", "button:has-text('登录')"),
    captcha_markers=(".captcha", "text=请完成安全验证"),
    rate_limit_markers=("text=请求过于频繁",),
    own_domains=("kimi.com", "moonshot.cn"),
    parse=parse,
)
