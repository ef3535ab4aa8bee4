"""SerpApi: Google AI Mode (``engine=google_ai_mode``) and AI Overviews (``engine=google`` +
``ai_overview``) as rendered to a searcher (``access: scraped``; research on answer services §2.4).

A synchronous API adapted to submit/poll like the chat APIs (connectors.protocols): the search
answers with the page, kept as ``Acceptance.inline_result`` (archived at once by the worker).
Truths this connector keeps:
- **``no_cache=true`` on every request.** Identical parameters are served from a 1-hour cache
  for free: without it the R repeats of one question would be one cached page counted R times
  (R5, R15).
- **No overview is an observation, not a failure.** A Google page without ``ai_overview`` is a
  completed evidence with an empty answer and the warning ``NO_AI_OVERVIEW``.
- An overview that needs a second request (``page_token``, valid 4 minutes) is fetched at once;
  the evidence's raw body is that second answer.
- No idempotency key, no lookup: an unknown outcome waits for an operator (R12).
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import httpx

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
    Attachment,
    CancelResult,
    Citation,
    Evidence,
    FeeStatement,
    InvalidParams,
    NoStatementApi,
    NotFound,
    PollResult,
    SubmitRequest,
    Unparseable,
    check_request,
)
from geo_pipeline.connectors.http import new_client, status_error, timeout_from, transport_error
from geo_pipeline.connectors.registry import api_key
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities

NO_AI_OVERVIEW = "NO_AI_OVERVIEW"
_DEVICES = {"web": "desktop", "mobile": "mobile", "tablet": "tablet"}


def answer_of(page: dict[str, Any]) -> tuple[str, tuple[Citation, ...]] | None:
    """The rendered answer of an AI Mode page or the overview of a Google page; None when the
    page has no overview (a valid observation)."""
    block: dict[str, Any] = page["ai_overview"] if "ai_overview" in page else page
    if not isinstance(block, dict) or "text_blocks" not in block:
        return None
    lines: list[str] = []
    for b in block.get("text_blocks") or []:
        if b.get("snippet"):
            lines.append(str(b["snippet"]))
        for item in b.get("list") or []:
            if item.get("snippet"):
                lines.append(f"- {item['snippet']}")
    refs = tuple(
        Citation(
            url=str(r["link"]),
            relation="cited",
            id=None if r.get("index") is None else str(r["index"]),
            title=r.get("title"),
        )
        for r in block.get("references") or []
    )
    return "\n".join(lines), refs


class SerpApiConnector:
    def __init__(self, entry: PlatformEntry, client: httpx.AsyncClient | None = None):
        self.platform = entry.platform
        self.entry = entry
        self._own_client = client is None
        self.client = client or new_client()
        self.base = entry.base_url.rstrip("/")
        self.engine = str(entry.options.get("engine") or "google_ai_mode")
        self.hl = str(entry.options.get("hl") or "en")
        self.timeout = timeout_from(entry.options, "submit_timeout_s", 90.0)
        self._inline: OrderedDict[str, bytes] = OrderedDict()
        self._caps = dataclasses.replace(
            entry.capabilities, lookup_by_key=False, idempotency_keys=False, asynchronous=False
        )

    def capabilities(self) -> Capabilities:
        return self._caps

    def adopt_inline_result(self, upstream_id: str, raw: bytes, mime_type: str = "") -> None:
        self._inline[upstream_id] = raw
        self._inline.move_to_end(upstream_id)
        while len(self._inline) > 10_000:
            self._inline.popitem(last=False)

    async def _get(self, params: dict[str, str], what: str) -> httpx.Response:
        try:
            resp = await self.client.get(
                self.base + "/search.json", params=params, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            # A search that left may have been run and billed: unknown, never re-sent blindly.
            raise transport_error(exc, sent_means_unknown=True, what=what) from exc
        if resp.status_code != 200:
            raise status_error(resp, what=what)
        return resp

    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self._caps, request)
        what = f"{self.platform} serpapi {self.engine} {request.idempotency_key}"
        params = {
            "engine": "google" if self.engine == "google_ai_overview" else self.engine,
            "q": request.question,
            "gl": request.region,
            "hl": self.hl,
            "device": _DEVICES.get(request.device, "desktop"),
            "no_cache": "true",  # research §2.4 "Cache": repeats must not be one cached page
            "api_key": api_key(self.entry) or "",
        }
        resp = await self._get(params, what)
        raw = resp.content
        try:
            page = json.loads(raw)
            token = (page.get("ai_overview") or {}).get("page_token")
            search_id = page["search_metadata"]["id"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AcceptanceUnknown(f"{what}: unreadable search page", raw=raw) from exc
        if token:
            # The overview needs a second request within 4 minutes: now, not later.
            follow = {"engine": "google_ai_overview", "page_token": str(token)}
            follow["api_key"] = params["api_key"]
            raw = (await self._get(follow, what + " (page_token)")).content
        upstream_id = f"{self.platform}:{search_id}"
        self.adopt_inline_result(upstream_id, raw)
        return Acceptance(upstream_id=upstream_id, accepted_at=datetime.now(UTC), inline_result=raw)

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        raise NotImplementedError(f"{self.platform}: SerpApi searches cannot be looked up by key")

    async def poll(self, upstream_id: str) -> PollResult:
        if upstream_id not in self._inline:
            raise NotFound(f"{self.platform}: no search page held for {upstream_id}")
        return PollResult("completed", upstream_id)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        raw = self._inline.get(upstream_id)
        if raw is None:
            raise NotFound(f"{self.platform}: no search page held for {upstream_id}")
        try:
            page = json.loads(raw)
            if "error" in page:
                raise InvalidParams(f"{self.platform}: {page['error']}", raw=raw)
            found = answer_of(page)
        except InvalidParams:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Unparseable(f"{self.platform} {upstream_id}: {exc!r}", raw=raw) from exc
        text, citations = found if found is not None else ("", ())
        warnings = () if found is not None else (NO_AI_OVERVIEW,)
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=text,
            raw_body=raw,
            raw_mime_type="application/json",
            captured_at=datetime.now(UTC),
            citations=citations,
            screenshot=(
                Attachment("screenshot", "unavailable", reason="unsupported")
                if request.screenshot
                else None
            ),
            warnings=warnings + (("SCREENSHOT_UNAVAILABLE",) if request.screenshot else ()),
            web_search_used=True,  # an AI Mode / Overview answer is grounded in Google Search
            # One search billed: every request sets no_cache=true, so it is never a free
            # cached hit (research §2.4 "Cache"); the page itself reports no credits.
            vendor_credits=1,
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "unavailable", reason="unsupported")

    async def cancel(self, upstream_id: str) -> CancelResult:
        return CancelResult(upstream_cancelled=False, detail="a synchronous search has finished")

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        raise NoStatementApi(f"{self.platform}: SerpApi bills searches per plan; no statement API")

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()
