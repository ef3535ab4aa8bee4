"""DeepSeek's consumer chat (chat.deepseek.com, and the simulator's ``/ui/deepseek/``): selectors
and the stream parser.

Stream (source: a stored capture of chat.deepseek.com, see simulator/webapp/frames.py):
``event: ready``, then ``{"v", "p", "o"}`` patches: the first ``v`` is the whole ``response``;
``o: APPEND`` on ``response/fragments`` (or a ``BATCH`` on ``response`` holding one on
``fragments``) adds fragments of type ``RESPONSE`` (text) or ``SEARCH`` (queries and results,
(inf.)); a frame with a ``p`` ending in ``/content`` appends to that fragment and a frame with
only ``v`` appends to the last path named. Done = ``response/status`` set to ``FINISHED`` or
``event: close``.
"""

from __future__ import annotations

import re
from typing import Any

from geo_pipeline.connectors.base import Unparseable
from geo_pipeline.connectors.browser.spec import PlatformSpec, cited, sse_events
from geo_pipeline.connectors.parsers import ParsedAnswer

_CONTENT = re.compile(r"^response/fragments/(-?\d+)/content$")


def parse(raw: bytes) -> ParsedAnswer:
    fragments: list[dict[str, Any]] = []
    last: int | None = None
    finished = known = False

    def append_fragments(items: Any) -> None:
        for item in items or []:
            if isinstance(item, dict):
                fragments.append(dict(item))

    def append_text(index: int, value: str) -> None:
        frag = fragments[index]
        frag["content"] = str(frag.get("content") or "") + value

    for event, data in sse_events(raw):
        if event in ("ready", "update_session"):
            known = True
            continue
        if event == "close":
            finished = known = True
            continue
        if not isinstance(data, dict) or "v" not in data:
            continue
        known = True
        v, p, o = data.get("v"), data.get("p"), data.get("o")
        if p is None and isinstance(v, dict) and "response" in v:
            append_fragments(v["response"].get("fragments"))
            continue
        if p == "response/fragments" and o == "APPEND":
            append_fragments(v)
            last = None
            continue
        if p == "response" and o == "BATCH" and isinstance(v, list):
            for op in v:
                if isinstance(op, dict) and op.get("p") == "fragments" and op.get("o") == "APPEND":
                    append_fragments(op.get("v"))
            last = None
            continue
        if p == "response/status":
            finished = finished or v == "FINISHED"
            continue
        if isinstance(p, str):
            m = _CONTENT.match(p)
            last = int(m.group(1)) if m else None
        if last is not None and isinstance(v, str) and fragments:
            append_text(last, v)
    if not known:
        raise Unparseable("deepseek: no DeepSeek frames in the captured stream", raw=raw)
    text = "".join(str(f.get("content") or "") for f in fragments if f.get("type") == "RESPONSE")
    queries: list[str] = []
    results: list[tuple[int, str, str | None]] = []
    for f in fragments:
        if f.get("type") == "SEARCH":
            queries.extend(str(q) for q in f.get("queries") or [])
            for r in f.get("results") or []:
                results.append(
                    (int(r.get("cite_index") or 0), str(r.get("url") or ""), r.get("title"))
                )
    return ParsedAnswer(
        answer_text=text,
        citations=cited(text, results),
        truncated=not finished,
        web_search_used=bool(queries or results),
        search_queries=tuple(queries),
        warnings=() if finished else ("STREAM_INCOMPLETE",),
    )


SPEC = PlatformSpec(
    platform="deepseek",
    page_path="/ui/deepseek/",
    stream_url=re.compile(r"/api/v0/chat/completion"),
    input="textarea#chat-input",
    send="div[role=button][aria-label='发送']",
    search_toggle="button:has-text('联网搜索')",
    stop="button:has-text('停止生成')",
    answer=".answer",
    citation_links="a.citation-card",
    history_links="nav.history a.conversation",
    login_markers=("form[action$='/login']", "button:has-text('登录')"),
    captcha_markers=(".captcha", "text=请完成安全验证"),
    rate_limit_markers=("text=请求过于频繁",),
    own_domains=("deepseek.com",),
    parse=parse,
)
