"""DataForSEO's LLM Scraper (ChatGPT) as the simulator imitates it: ``task_post`` ->
``tasks_ready`` -> ``task_get/advanced``, with errors inside HTTP 200 at two levels.

Every behaviour names its source: "research §2.2 <bullet>" is the project's research note on
answer services (section 2.2, DataForSEO), read from docs.dataforseo.com, the data-for-seo crate
and api-evangelist/dataforseo; the ``id_list`` endpoint is from docs.dataforseo.com
(appendix/id_list: tasks created in a window, with their POST metadata, free, 10 calls/min).

Reproduced: HTTP Basic auth; the envelope ``{version, status_code, status_message, time, cost,
tasks_count, tasks_error, tasks:[{id, status_code, status_message, cost, data, result}]}``;
errors inside 200 at the top (40202 rate, 40100 auth) and per task (40501 invalid field, 40601
pending, 40103 failed, 40401 not found, 40403 expired); billing at ``task_post``; our ``tag``
echoed in ``data`` and in ``tasks_ready`` results; ``tasks_ready`` lists done tasks not yet
collected, "with a small delay"; ``id_list`` with metadata (its own listing delay and 10
calls/min); results kept 30 days; lost answers after the task was created.
Callbacks (docs.dataforseo.com task_post: ``pingback_url``, a GET when the task is done with
``$id`` / ``$tag`` replaced, and ``postback_url``, a POST of the task_get body): sent once on
the service clock, sometimes lost or duplicated (``callback_lost_rate``,
``callback_duplicate_rate``; simulator.services.callbacks). Not reproduced: ``postback_data``
variants and gzip bodies, priority queues, live mode, the duplicate-task limits
(40205/40206), Gemini paths, items typed beyond ``chat_gpt_text``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from aiohttp import web

from geo_pipeline.domain.platforms import PriceList
from geo_pipeline.simulator.answers import generate_answer, unit
from geo_pipeline.simulator.profiles import Profile
from geo_pipeline.simulator.services import persist
from geo_pipeline.simulator.services.callbacks import CallbackLoop, Delivery

PREFIX = "/dataforseo"
ENDPOINT = "/v3/ai_optimization/chat_gpt/llm_scraper"
SCRAPER = PREFIX + ENDPOINT
MONTH_S = 30 * 24 * 3600.0  # research §2.2 "Submit": results free to fetch for 30 days
COST = 0.0012  # research §2.2 "Price": from $0.0012 per ChatGPT results page
_TASK_FIELDS = {
    "keyword",
    "location_code",
    "location_name",
    "language_code",
    "language_name",
    "force_web_search",
    "priority",
    "tag",
    "postback_url",
    "postback_data",
    "pingback_url",
}


@dataclass(frozen=True)
class DataForSeoProfile:
    login: str = "sim-login"
    password: str = "sim-password"
    completion_s: tuple[float, float] = (0.05, 0.2)
    ready_delay_s: float = 0.0  # research §2.2 "Poll": tasks_ready updates with a small delay
    list_delay_s: float = 0.0  # id_list shows a new task only after this
    fail_rate: float = 0.0  # task_get answers 40103 "failed, resubmit"
    lost_rate: float = 0.0  # the task is created (and billed) but the answer never arrives
    rate_limited_rate: float = 0.0  # 40202 inside HTTP 200 at the top level
    id_list_per_min: int = 10  # id_list: 10 calls per minute, then 40202
    retention_s: float = MONTH_S
    us_only: bool = False  # research §2.2 "Locale trap": other locations -> 40501 inside 200
    # research §2.2 "Submit": pingback_url / postback_url; a callback that never arrives, and
    # one that arrives twice (inf.: delivery is not guaranteed; polling is the safety net).
    callback_lost_rate: float = 0.0
    callback_duplicate_rate: float = 0.0

    def with_overrides(self, overrides: Mapping[str, Any]) -> DataForSeoProfile:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"dataforseo: unknown profile key(s) {sorted(unknown)}")
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            current = getattr(self, key)
            if isinstance(current, bool):
                changes[key] = bool(value)
            elif isinstance(current, tuple):
                lo, hi = (float(v) for v in value)
                if not 0 <= lo <= hi:
                    raise ValueError(f"dataforseo.{key}: {value!r} is not a range [lo, hi]")
                changes[key] = (lo, hi)
            elif isinstance(current, int):
                changes[key] = int(value)
            elif isinstance(current, float):
                number = float(value)
                if key.endswith("_rate") and not 0.0 <= number <= 1.0:
                    raise ValueError(f"dataforseo.{key}: {value!r} is not a probability")
                changes[key] = number
            else:
                changes[key] = str(value)
        return dataclasses.replace(self, **changes)


@dataclass
class DfsTask:
    id: str
    tag: str | None
    keyword: str
    location_code: int
    language_code: str
    posted: float
    posted_wall: datetime
    done: float
    fails: bool
    collected: bool = False
    fetched: int = 0
    pingback_url: str | None = None
    postback_url: str | None = None
    called_back: bool = False


_TASK_TIMES = ("posted", "posted_wall", ("done",))
_TASK_KW: dict[str, Any] = {"anchor": "posted", "anchor_wall": "posted_wall", "clocks": ("done",)}


class DataForSeoService:
    def __init__(self, seed: int, profile: Mapping[str, Any] | None = None) -> None:
        self.seed = seed
        self.initial = DataForSeoProfile().with_overrides(profile or {})
        self.write: persist.Write | None = None  # the --state-file journal, when there is one
        self.callbacks = CallbackLoop(seed, self._due_callbacks, self._callback_rates)
        self.reset()

    def reset(self) -> None:
        self.profile = self.initial
        self.offset = 0.0
        self.tasks: dict[str, DfsTask] = {}
        self.posts: Counter[str] = Counter()  # tag -> task_post calls naming it
        self.created: dict[str, list[str]] = defaultdict(list)  # tag -> task ids
        self.id_list_calls: list[float] = []
        self.requests: Counter[str] = Counter()
        self.seq = 0
        if hasattr(self, "callbacks"):
            self.callbacks.reset()

    def now(self) -> float:
        return time.monotonic() + self.offset

    def wall(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def mount(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.post(SCRAPER + "/task_post", self.task_post),
                web.get(SCRAPER + "/tasks_ready", self.tasks_ready),
                web.get(SCRAPER + "/task_get/advanced/{task_id}", self.task_get),
                web.post(PREFIX + "/v3/ai_optimization/id_list", self.id_list),
                web.post("/_control/services/dataforseo/profile", self.control_profile),
                web.post("/_control/services/dataforseo/advance", self.control_advance),
                web.get("/_control/services/dataforseo/stats", self.control_stats),
                web.post("/_control/services/dataforseo/reset", self.control_reset),
            ]
        )
        self.callbacks.mount(app)

    def _callback_rates(self) -> tuple[float, float]:
        return self.profile.callback_lost_rate, self.profile.callback_duplicate_rate

    def _due_callbacks(self) -> list[Delivery]:
        """Tasks that are done and asked for a callback, each once."""
        now = self.now()
        out: list[Delivery] = []
        for t in list(self.tasks.values()):
            if t.called_back or now < t.done or not (t.pingback_url or t.postback_url):
                continue
            t.called_back = True
            if t.pingback_url:
                url = t.pingback_url.replace("$id", t.id).replace("$tag", quote(t.tag or ""))
                out.append(Delivery(f"{t.id}#ping", "GET", url))
            if t.postback_url:
                body = self._get_body(t, now)
                out.append(Delivery(f"{t.id}#post", "POST", t.postback_url, body))
        return out

    def _get_body(self, t: DfsTask, now: float) -> dict[str, Any]:
        """The task_get body a postback carries (the task as a poll would see it)."""
        if t.fails:
            entry = self._task_entry(t.id, 40103, "Task Failed. Please resubmit the task.")
        else:
            entry = self._task_entry(
                t.id, 20000, "Ok.", data={"tag": t.tag, "keyword": t.keyword},
                result=[self._result(t)],
            )  # fmt: skip
        return {"version": "0.1.20261201", "status_code": 20000, "status_message": "Ok.",
                "tasks_count": 1, "tasks_error": int(t.fails), "tasks": [entry]}  # fmt: skip

    # ------------------------------------------------------------------ envelope
    def _stamp(self) -> str:
        return self.wall().strftime("%Y-%m-%d %H:%M:%S +00:00")

    def _envelope(
        self, tasks: list[dict[str, Any]], code: int = 20000, message: str = "Ok.", kind: str = ""
    ) -> web.Response:
        """research §2.2 "Errors arrive inside HTTP 200": a status_code at the top and one in
        every task."""
        self.requests[f"{kind}:{code}"] += 1
        body = {
            "version": "0.1.20261201",
            "status_code": code,
            "status_message": message,
            "time": "0.0100 sec.",
            "cost": round(sum(float(t.get("cost") or 0) for t in tasks), 4),
            "tasks_count": len(tasks),
            "tasks_error": sum(1 for t in tasks if t["status_code"] >= 40000),
            "tasks": tasks,
        }
        return web.json_response(body)

    def _task_entry(
        self, task_id: str, code: int, message: str, *, cost: float = 0.0, **extra: Any
    ) -> dict[str, Any]:
        return {
            "id": task_id,
            "status_code": code,
            "status_message": message,
            "time": "0.0050 sec.",
            "cost": cost,
            "result_count": len(extra.get("result") or []),
            "path": extra.pop("path", []),
            "data": extra.pop("data", {}),
            "result": extra.pop("result", None),
        }

    def _auth(self, request: web.Request, kind: str) -> web.Response | None:
        # research §2.2 "Auth": HTTP Basic login:password.
        header = request.headers.get("Authorization", "")
        want = base64.b64encode(f"{self.profile.login}:{self.profile.password}".encode()).decode()
        if header != f"Basic {want}":
            self.requests[f"{kind}:401"] += 1
            return web.json_response(
                {
                    "version": "0.1.20261201",
                    "status_code": 40100,
                    "status_message": "You are not authorized to access this resource.",
                    "tasks_count": 0,
                    "tasks_error": 0,
                    "tasks": None,
                },
                status=401,
            )
        return None

    def _rate_limited(self, kind: str, draw: str) -> web.Response | None:
        if unit(self.seed, draw, "dfs-40202") < self.profile.rate_limited_rate:
            # research §2.2 errors table: 40202 over 2,000 requests/min -- inside HTTP 200.
            return self._envelope(
                [], 40202, "Rate limit per minute exceeded. Please, contact support.", kind
            )
        return None

    def _expire(self, now: float) -> None:
        for tid in [
            t.id for t in self.tasks.values() if now >= t.posted + self.profile.retention_s
        ]:
            self.tasks[tid].collected = True  # off tasks_ready; task_get then says 40403

    # ------------------------------------------------------------------ vendor API
    async def task_post(self, request: web.Request) -> web.Response:
        kind = "task_post"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        try:
            items = json.loads(await request.read())
        except ValueError:
            return self._envelope([], 40501, "Invalid JSON.", kind)
        if not isinstance(items, list) or not 1 <= len(items) <= 100:
            # research §2.2 "Submit": up to 100 tasks per call.
            return self._envelope([], 40501, "Invalid Field: 'tasks' (1-100 per call).", kind)
        self.seq += 1
        limited = self._rate_limited(kind, f"post#{self.seq}")
        if limited is not None:
            return limited
        now = self.now()
        out: list[dict[str, Any]] = []
        lost = False
        for item in items:
            problem = self._invalid(item)
            tid = self._new_id()
            if problem:
                out.append(self._task_entry(tid, 40501, f"Invalid Field: {problem}", data=item))
                continue
            tag = item.get("tag")
            self.posts[tag or "-"] += 1
            draw = f"{tag or tid}#{self.posts[tag or '-']}"
            lo, hi = self.profile.completion_s
            task = DfsTask(
                id=tid,
                tag=tag,
                keyword=str(item["keyword"]),
                location_code=int(item.get("location_code") or 2840),
                language_code=str(item.get("language_code") or "en"),
                posted=now,
                posted_wall=self.wall(),
                done=now + lo + (hi - lo) * unit(self.seed, draw, "dfs-done"),
                fails=unit(self.seed, draw, "dfs-fail") < self.profile.fail_rate,
                pingback_url=item.get("pingback_url"),
                postback_url=item.get("postback_url"),
            )
            self.tasks[tid] = task
            self.created[tag or "-"].append(tid)
            self.journal({"op": "task", **persist.dump(task, *_TASK_TIMES)})
            lost = lost or unit(self.seed, draw, "dfs-lost") < self.profile.lost_rate
            out.append(
                self._task_entry(
                    tid,
                    20100,
                    "Task Created.",
                    cost=COST,  # research §2.2: billing happens when the task is set
                    path=["v3", "ai_optimization", "chat_gpt", "llm_scraper", "task_post"],
                    data={"api": "ai_optimization", "function": "llm_scraper", **item},
                )
            )
        if lost:
            self.requests[f"{kind}:lost"] += 1
            await asyncio.sleep(0)
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=599)
        return self._envelope(out, kind=kind)

    def _invalid(self, item: Any) -> str | None:
        if not isinstance(item, dict):
            return "'task' must be an object"
        unknown = sorted(set(item) - _TASK_FIELDS)
        if unknown:
            return f"'{unknown[0]}' is not a known field"
        keyword = item.get("keyword")
        if not isinstance(keyword, str) or not 1 <= len(keyword) <= 2000:
            return "'keyword' (1-2000 characters)"
        if "location_code" not in item and "location_name" not in item:
            return "'location_code' or 'location_name' is required"
        if "language_code" not in item and "language_name" not in item:
            return "'language_code' or 'language_name' is required"
        tag = item.get("tag")
        if tag is not None and (not isinstance(tag, str) or len(tag) > 255):
            return "'tag' (up to 255 characters)"
        if self.profile.us_only and item.get("location_code") not in (None, 2840):
            return "'location_code' (only 2840, United States, is supported)"
        return None

    def _new_id(self) -> str:
        # DataForSEO ids look like "11231545-1535-0566-0000-2d4b1e4a7f11" (a dated uuid).
        return str(uuid.uuid4())

    async def tasks_ready(self, request: web.Request) -> web.Response:
        kind = "tasks_ready"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        now = self.now()
        self._expire(now)
        ready = [
            t
            for t in self.tasks.values()
            if not t.collected and now >= t.done + self.profile.ready_delay_s
        ]
        result = [
            {
                "id": t.id,
                "se": "chat_gpt",
                "se_type": "llm_scraper",
                "date_posted": t.posted_wall.strftime("%Y-%m-%d %H:%M:%S +00:00"),
                "tag": t.tag,
                "endpoint_advanced": f"{ENDPOINT}/task_get/advanced/{t.id}",
            }
            for t in ready
        ]
        entry = self._task_entry(str(uuid.uuid4()), 20000, "Ok.", result=result)
        return self._envelope([entry], kind=kind)

    async def task_get(self, request: web.Request) -> web.Response:
        kind = "task_get"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        now = self.now()
        self._expire(now)
        tid = request.match_info["task_id"]
        task = self.tasks.get(tid)
        if task is None:
            return self._envelope([self._task_entry(tid, 40401, "Task Not Found.")], kind=kind)
        if now >= task.posted + self.profile.retention_s:
            # research §2.2 errors table: 40403 results expired (over a month old).
            return self._envelope([self._task_entry(tid, 40403, "Results Expired.")], kind=kind)
        if now < task.done:
            return self._envelope([self._task_entry(tid, 40602, "Task In Queue.")], kind=kind)
        if task.fails:
            return self._envelope(
                [self._task_entry(tid, 40103, "Task Failed. Please resubmit the task.")], kind=kind
            )
        task.collected = True
        self.journal({"op": "collected", "id": task.id})
        task.fetched += 1
        return self._envelope(
            [
                self._task_entry(
                    tid,
                    20000,
                    "Ok.",
                    data={"tag": task.tag, "keyword": task.keyword},
                    result=[self._result(task)],
                )
            ],
            kind=kind,
        )

    def _result(self, task: DfsTask) -> dict[str, Any]:
        """research §2.2 "Result fields": model, check_url, datetime, markdown, typed items[],
        sources[] (cited), search_results[] (shown, not cited), fan_out_queries[]."""
        prof = Profile(
            platform="dataforseo-chat_gpt",
            devices=("web",),
            regions=("us",),
            modes=("standard",),
            screenshot_supported=False,
            cancellable=False,
            prices=PriceList("dfs-sim", "USD", {"standard": 1}),
        )
        ans = generate_answer(self.seed, task.tag or task.id, task.keyword, prof)
        return {
            "keyword": task.keyword,
            "location_code": task.location_code,
            "language_code": task.language_code,
            "model": "gpt-5",
            "check_url": "https://chatgpt.com/",
            "datetime": self._stamp(),
            "markdown": ans.answer,
            "items": [{"type": "chat_gpt_text", "rank_absolute": 1, "markdown": ans.answer}],
            "sources": [
                {"type": "chat_gpt_source", "url": c.url, "title": c.title, "domain": None}
                for c in ans.citations
            ],
            "search_results": [
                {"type": "chat_gpt_search_result", "url": c.url, "title": c.title}
                for c in ans.search_results
            ],
            "fan_out_queries": [task.keyword[:80]],
        }

    async def id_list(self, request: web.Request) -> web.Response:
        """docs.dataforseo.com appendix/id_list: tasks created in [datetime_from, datetime_to]
        with their POST metadata; 10 calls per minute."""
        kind = "id_list"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        now = self.now()
        self.id_list_calls = [t for t in self.id_list_calls if t > now - 60.0]
        if len(self.id_list_calls) >= self.profile.id_list_per_min:
            return self._envelope([], 40202, "Rate limit per minute exceeded.", kind)
        self.id_list_calls.append(now)
        try:
            spec = json.loads(await request.read())[0]
            start = datetime.strptime(spec["datetime_from"], "%Y-%m-%d %H:%M:%S %z")
            end = datetime.strptime(spec["datetime_to"], "%Y-%m-%d %H:%M:%S %z")
            limit = min(1000, int(spec.get("limit", 100)))
            offset = int(spec.get("offset", 0))
        except (ValueError, KeyError, TypeError, IndexError):
            return self._envelope(
                [], 40501, "Invalid Field: 'datetime_from' / 'datetime_to'.", kind
            )
        listed = sorted(
            (
                t
                for t in self.tasks.values()
                if now >= t.posted + self.profile.list_delay_s and start <= t.posted_wall <= end
            ),
            key=lambda t: t.posted,
        )
        page = listed[offset : offset + limit]
        result = [
            {
                "id": t.id,
                "url": f"https://api.dataforseo.com{ENDPOINT}/task_post",
                "datetime_posted": t.posted_wall.strftime("%Y-%m-%d %H:%M:%S +00:00"),
                "datetime_done": None,
                "status": "Completed" if now >= t.done else "In Queue",
                "cost": COST,
                "metadata": {"tag": t.tag, "keyword": t.keyword}
                if spec.get("include_metadata")
                else None,
            }
            for t in page
        ]
        entry = self._task_entry(str(uuid.uuid4()), 20000, "Ok.", result=result)
        entry["total_count"] = len(listed)
        return self._envelope([entry], kind=kind)

    # ------------------------------------------------------------------ control
    def stats(self) -> dict[str, Any]:
        keys = {}
        for tag, calls in self.posts.items():
            ids = self.created.get(tag, [])
            tasks = [self.tasks[i] for i in ids]
            keys[tag] = {
                "submit_calls": calls,
                "tasks_created": len(ids),
                "tasks_billed": len(ids),  # billed at task_post
                "results_fetched": sum(t.fetched for t in tasks),
            }
        return {
            "keys": keys,
            "tasks": len(self.tasks),
            "max_tasks_per_key": max((v["tasks_created"] for v in keys.values()), default=0),
            "cost_usd": round(COST * len(self.tasks), 4),
            "requests": dict(sorted(self.requests.items())),
            "callbacks": self.callbacks.stats(),
        }

    async def control_profile(self, request: web.Request) -> web.Response:
        try:
            overrides = json.loads(await request.read() or b"{}")
            if not isinstance(overrides, dict):
                raise ValueError("the body must be a JSON object of profile keys")
            self.profile = self.profile.with_overrides(overrides)
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        out = dataclasses.asdict(self.profile)
        out.pop("password")
        return web.json_response(out)

    async def control_advance(self, request: web.Request) -> web.Response:
        seconds = float(json.loads(await request.read() or b"{}").get("seconds", 0))
        if seconds < 0:
            return web.json_response({"error": {"message": "seconds must be >= 0"}}, status=400)
        self.offset += seconds
        self.journal({"op": "advance", "seconds": seconds})
        return web.json_response({"offset_s": self.offset})

    async def control_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        self.journal({"op": "reset"})
        return web.json_response({"reset": True})

    # ------------------------------------------------------------------ --state-file
    def journal(self, record: dict[str, Any]) -> None:
        if self.write is not None:
            self.write(record)

    def restore(self, record: dict[str, Any]) -> None:
        """Replay one journal record (simulator.services.persist) on a fresh service."""
        op = record.get("op")
        if op == "reset":
            self.reset()
        elif op == "advance":
            self.offset += float(record["seconds"])
        elif op == "task":
            task = persist.load(DfsTask, record, **_TASK_KW, now=self.now(), wall=self.wall())
            self.tasks[task.id] = task
            self.created[task.tag or "-"].append(task.id)
            self.posts[task.tag or "-"] += 1
        elif op == "collected":
            found = self.tasks.get(record["id"])
            if found is not None:
                found.collected = True
