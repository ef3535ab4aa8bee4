"""SerpApi's Google AI Mode and AI Overviews as the simulator imitates them (research on answer
services §2.4: serpapi.com/google-ai-mode-api, /ai-overview, /google-ai-overview-api and the
failure modes of github.com/serpapi/public-roadmap).

Reproduced: ``GET /search.json`` with ``engine=google_ai_mode`` (``text_blocks``,
``references``) and ``engine=google`` (``ai_overview{text_blocks, references}``, present only
sometimes and only with ``hl=en``: roadmap #4113); an overview that needs a second request
(``engine=google_ai_overview&page_token=``) whose token expires after 4 minutes; identical
parameters served from a 1-hour cache for free unless ``no_cache=true``; ``async`` cannot be
combined with ``no_cache``; errors as ``{"error": ...}`` with 400/401.
Not reproduced: the Searches Archive (async collection), location/uule resolution, partial
content (#3756), follow-ups that always fail (#3848), shopping and local results.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from geo_pipeline.domain.platforms import PriceList
from geo_pipeline.simulator.answers import generate_answer, unit
from geo_pipeline.simulator.profiles import Profile

PREFIX = "/serpapi"
CACHE_S = 3600.0  # research §2.4 "Cache": identical parameters are cached for 1 h
TOKEN_S = 240.0  # research §2.4: the page_token "expires within 4 minutes"
ENGINES = ("google_ai_mode", "google", "google_ai_overview")
DEVICES = ("desktop", "tablet", "mobile")
_NOT_CACHE_KEY = {"api_key", "no_cache", "async", "output"}


@dataclass(frozen=True)
class SerpApiProfile:
    api_key: str = "sim-serpapi-key"
    ai_overview_rate: float = 0.6  # roadmap #4113: the same query has an overview only sometimes
    page_token_rate: float = 0.0  # the overview needs a second request (google_ai_overview)

    def with_overrides(self, overrides: Mapping[str, Any]) -> SerpApiProfile:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"serpapi: unknown profile key(s) {sorted(unknown)}")
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key.endswith("_rate"):
                number = float(value)
                if not 0.0 <= number <= 1.0:
                    raise ValueError(f"serpapi.{key}: {value!r} is not a probability")
                changes[key] = number
            else:
                changes[key] = str(value)
        return dataclasses.replace(self, **changes)


class SerpApiService:
    def __init__(self, seed: int, profile: Mapping[str, Any] | None = None) -> None:
        self.seed = seed
        self.initial = SerpApiProfile().with_overrides(profile or {})
        self.reset()

    def reset(self) -> None:
        self.profile = self.initial
        self.offset = 0.0
        self.cache: dict[tuple[tuple[str, str], ...], tuple[float, bytes]] = {}
        self.tokens: dict[str, tuple[float, str]] = {}  # page_token -> (issued, query)
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)  # q -> counters
        self.seq = 0

    def now(self) -> float:
        return time.monotonic() + self.offset

    def mount(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(PREFIX + "/search.json", self.search),
                web.get(PREFIX + "/search", self.search),
                web.post("/_control/services/serpapi/profile", self.control_profile),
                web.post("/_control/services/serpapi/advance", self.control_advance),
                web.get("/_control/services/serpapi/stats", self.control_stats),
                web.post("/_control/services/serpapi/reset", self.control_reset),
            ]
        )

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        return web.json_response({"error": message}, status=status)

    async def search(self, request: web.Request) -> web.Response:
        params = dict(request.query)
        if params.get("api_key") != self.profile.api_key:
            return self._error(401, "Invalid API key. Your API key should be here: ...")
        engine = params.get("engine", "google")
        if engine not in ENGINES:
            return self._error(400, f"Unsupported `{engine}` search engine.")
        if params.get("device", "desktop") not in DEVICES:
            return self._error(400, "Unsupported `device` parameter.")
        no_cache = params.get("no_cache") == "true"
        if no_cache and params.get("async") == "true":
            # research §2.4 "Cache": async=true cannot be combined with no_cache.
            return self._error(400, "`async` and `no_cache` parameters cannot be used together.")
        now = self.now()
        if engine == "google_ai_overview":
            return self._follow_up(params, now)
        q = params.get("q")
        if not q:
            return self._error(400, "Missing query `q` parameter.")
        key = tuple(sorted((k, v) for k, v in params.items() if k not in _NOT_CACHE_KEY))
        counts = self.counts[q]
        counts["searches"] += 1
        cached = self.cache.get(key)
        if not no_cache and cached is not None and now - cached[0] < CACHE_S:
            counts["cache_hits"] += 1  # research §2.4: cache hits are free
            return web.Response(body=cached[1], content_type="application/json")
        counts["billed"] += 1
        self.seq += 1
        draw = f"{q}#{self.seq}"
        body = self._page(engine, params, draw, now)
        if "ai_overview" in body:
            counts["overviews"] += 1
        raw = json.dumps(body, ensure_ascii=False).encode()
        self.cache[key] = (now, raw)
        return web.Response(body=raw, content_type="application/json")

    def _metadata(self, engine: str, params: Mapping[str, str]) -> dict[str, Any]:
        return {
            "search_metadata": {
                "id": uuid.uuid4().hex[:24],
                "status": "Success",
                "total_time_taken": 1.2,
            },
            "search_parameters": {k: v for k, v in params.items() if k != "api_key"},
        }

    def _blocks(self, q: str, draw: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        prof = Profile(
            platform="serpapi-google",
            devices=("web",),
            regions=("us",),
            modes=("standard",),
            screenshot_supported=False,
            cancellable=False,
            prices=PriceList("serpapi-sim", "USD", {"standard": 1}),
        )
        ans = generate_answer(self.seed, draw, q, prof)
        refs = [
            {"title": c.title, "link": c.url, "snippet": c.title, "source": "web", "index": i}
            for i, c in enumerate(ans.citations)
        ]
        paragraphs = [p for p in ans.answer.split("\n") if p.strip()]
        blocks = [
            {"type": "paragraph", "snippet": p, "reference_indexes": [i % max(1, len(refs))]}
            for i, p in enumerate(paragraphs)
        ]
        return blocks, refs

    def _page(self, engine: str, params: Mapping[str, str], draw: str, now: float) -> dict:
        q = params["q"]
        body = self._metadata(engine, params)
        if engine == "google_ai_mode":
            body["text_blocks"], body["references"] = self._blocks(q, draw)
            return body
        body["organic_results"] = [
            {"position": 1, "title": f"{q} - results", "link": "https://example.com/"}
        ]
        # research §2.4: overviews only with hl=en (and some gl), and only sometimes (#4113).
        if params.get("hl", "en") != "en":
            return body
        if unit(self.seed, draw, "serp-overview") >= self.profile.ai_overview_rate:
            return body
        if unit(self.seed, draw, "serp-token") < self.profile.page_token_rate:
            token = uuid.uuid4().hex
            self.tokens[token] = (now, q)
            body["ai_overview"] = {
                "page_token": token,
                "serpapi_link": f"{PREFIX}/search.json?engine=google_ai_overview"
                f"&page_token={token}",
            }
            return body
        blocks, refs = self._blocks(q, draw)
        body["ai_overview"] = {"text_blocks": blocks, "references": refs}
        return body

    def _follow_up(self, params: Mapping[str, str], now: float) -> web.Response:
        token = params.get("page_token", "")
        issued = self.tokens.get(token)
        if issued is None:
            return self._error(400, "Invalid `page_token` parameter.")
        if now - issued[0] > TOKEN_S:
            return self._error(400, "`page_token` has expired.")
        self.counts[issued[1]]["billed"] += 1
        self.counts[issued[1]]["follow_ups"] += 1
        self.seq += 1
        blocks, refs = self._blocks(issued[1], f"{issued[1]}#{self.seq}")
        body = self._metadata("google_ai_overview", params)
        body["ai_overview"] = {"text_blocks": blocks, "references": refs}
        return web.json_response(body)

    async def control_profile(self, request: web.Request) -> web.Response:
        try:
            self.profile = self.profile.with_overrides(json.loads(await request.read() or b"{}"))
        except (ValueError, TypeError, AttributeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        return web.json_response({"ok": True})

    async def control_advance(self, request: web.Request) -> web.Response:
        self.offset += max(0.0, float(json.loads(await request.read() or b"{}").get("seconds", 0)))
        return web.json_response({"offset_s": self.offset})

    async def control_stats(self, request: web.Request) -> web.Response:
        queries = {q: dict(c) for q, c in self.counts.items()}
        return web.json_response(
            {
                "queries": queries,
                "billed": sum(c["billed"] for c in self.counts.values()),
                "cache_hits": sum(c["cache_hits"] for c in self.counts.values()),
            }
        )

    async def control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"reset": True})
