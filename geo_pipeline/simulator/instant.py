"""An in-process connector that answers at once: no HTTP, deterministic.

For the execution core's benchmark mode that measures the pipeline itself (database, streams,
leases) with the engine taken out of the picture. Answers come from the same generator as the
simulator's, so analysis downstream sees realistic text and citations.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from geo_pipeline.connectors.base import (
    Acceptance,
    Attachment,
    CancelResult,
    Citation,
    Evidence,
    FeeLine,
    FeeStatement,
    NotFound,
    PollResult,
    SubmitRequest,
    check_request,
)
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.simulator.answers import generate_answer
from geo_pipeline.simulator.profiles import profile_from_registry_entry
from geo_pipeline.simulator.screenshots import render_png


@dataclass(frozen=True, slots=True)
class _Held:
    request: SubmitRequest
    accepted_at: datetime


class InstantConnector:
    """``latency=(lo, hi)``: each task stays running for a uniform lo..hi seconds (drawn from the
    idempotency key, so deterministic) -- the in-flight benchmark without an HTTP simulator."""

    def __init__(
        self, entry: PlatformEntry, *, seed: int = 0, latency: tuple[float, float] = (0.0, 0.0)
    ):
        self.platform = entry.platform
        self.entry = entry
        self.seed = seed
        self._profile = profile_from_registry_entry(entry)
        self._tasks: dict[str, _Held] = {}
        self._by_key: dict[str, str] = {}
        self._png: bytes | None = None
        self.latency = latency
        self._due: dict[str, float] = {}

    def capabilities(self) -> Capabilities:
        return self.entry.capabilities

    def _upstream_id(self, key: str) -> str:
        return f"{self.platform}-i-" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()

    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self.entry.capabilities, request)
        key = request.idempotency_key
        upstream_id = self._by_key.get(key)
        if upstream_id is None:  # the same key never creates a second task
            upstream_id = self._upstream_id(key)
            self._by_key[key] = upstream_id
            self._tasks[upstream_id] = _Held(request, datetime.now(UTC))
            lo, hi = self.latency
            if hi > 0:
                frac = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest()) / 2**32
                self._due[upstream_id] = time.monotonic() + lo + (hi - lo) * frac
        return Acceptance(upstream_id, self._tasks[upstream_id].accepted_at)

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        upstream_id = self._by_key.get(idempotency_key)
        if upstream_id is None:
            return None
        return Acceptance(upstream_id, self._tasks[upstream_id].accepted_at)

    def _held(self, upstream_id: str) -> _Held:
        try:
            return self._tasks[upstream_id]
        except KeyError:
            raise NotFound(f"{self.platform}: no task {upstream_id}") from None

    async def poll(self, upstream_id: str) -> PollResult:
        self._held(upstream_id)
        if time.monotonic() < self._due.get(upstream_id, 0.0):
            return PollResult("running", upstream_id)
        self._due.pop(upstream_id, None)
        return PollResult("completed", upstream_id)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        held = self._held(upstream_id)
        ans = generate_answer(
            self.seed, held.request.idempotency_key, request.question, self._profile
        )
        body = {
            "task_id": upstream_id,
            "status": "completed",
            "answer": ans.answer,
            "citations": [{"id": c.id, "url": c.url, "title": c.title} for c in ans.citations],
            "search_results": [{"url": c.url, "title": c.title} for c in ans.search_results],
            "truncated": ans.truncated,
        }
        citations = tuple(
            Citation(url=c.url, relation="cited", id=c.id, title=c.title) for c in ans.citations
        ) + tuple(
            Citation(url=c.url, relation="retrieved", title=c.title) for c in ans.search_results
        )
        shot = None
        if request.screenshot:
            ok = self.entry.capabilities.screenshot
            shot = Attachment(
                "screenshot",
                "available" if ok else "unavailable",
                reason=None if ok else "unsupported",
            )
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=ans.answer,
            raw_body=json.dumps(body, ensure_ascii=False).encode(),
            raw_mime_type="application/json",
            captured_at=held.accepted_at,
            citations=citations,
            screenshot=shot,
            warnings=("SCREENSHOT_UNAVAILABLE",) if shot and shot.status == "unavailable" else (),
            provider_truncated=ans.truncated,
            deep_thinking_used=request.mode == "deep_thinking",
            web_search_used=request.mode == "web_search",
            screenshot_used=bool(shot and shot.status == "available"),
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        held = self._held(upstream_id)
        if not (held.request.screenshot and self.entry.capabilities.screenshot):
            return Attachment("screenshot", "unavailable", reason="unsupported")
        if self._png is None:  # one picture per process: the benchmark measures the pipeline
            self._png = render_png("instant", self.platform, "instant")
        return Attachment("screenshot", "available", data=self._png, mime_type="image/png")

    async def cancel(self, upstream_id: str) -> CancelResult:
        return CancelResult(upstream_cancelled=False, detail="instant connector: already finished")

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        """Charges of the tasks this process accepted on that UTC day, at registry prices."""
        p = self.entry.capabilities.prices
        lines = []
        for upstream_id, held in self._tasks.items():
            if held.accepted_at.date().isoformat() != statement_date:
                continue
            r = held.request
            items = [("base", p.base.get(r.mode, next(iter(p.base.values()), 0)))]
            if r.mode == "deep_thinking" and p.deep_thinking:
                items.append(("deep_thinking", p.deep_thinking))
            if r.mode == "web_search" and p.web_search:
                items.append(("web_search", p.web_search))
            if r.screenshot and self.entry.capabilities.screenshot and p.screenshot:
                items.append(("screenshot", p.screenshot))
            lines += [
                FeeLine(upstream_id, item, amount, p.currency, p.version, held.accepted_at)
                for item, amount in items
            ]
        return FeeStatement(self.platform, statement_date, p.currency, tuple(lines))

    async def aclose(self) -> None:
        return None
