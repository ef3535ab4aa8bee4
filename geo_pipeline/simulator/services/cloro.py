"""cloro (https://api.cloro.dev) as the simulator imitates it: async tasks that scrape a consumer
answer engine (ChatGPT, Google AI Mode, ...).

Every behaviour below names its source: "research §2.1 <bullet>" is the project's research note on
answer services (section 2.1, cloro), itself read from cloro's published OpenAPI, errors, skills
and webhooks files (github.com/api-evangelist/cloro-dev, a copy of docs.cloro.dev, 2026-10-07).

Reproduced: the envelope ``{success, task:{...}, credits:{creditsToCharge, creditsCharged}}``;
``Authorization: Bearer`` (case-sensitive prefix); ``POST /v1/async/task`` with validation,
``idempotencyKey`` and 409 RESOURCE_ALREADY_EXISTS with ``details{field, value}`` (no task id);
``GET /v1/async/task/{id}`` with QUEUED / PROCESSING / COMPLETED / FAILED, ``latencyMs`` and the
``response`` (the result, or ``{error}``); credits charged only on COMPLETED, 0 on FAILED;
canned refusals (short text, no sources) billed all the same; ``html`` URLs that expire 24 h
after completion; task records (and the key binding) deleted 24 h after creation;
``DELETE /v1/async/queue`` that drops every QUEUED task of the organisation and nothing else;
``GET /v1/async/status``; 429 without Retry-After; lost responses after the task was created.
Webhooks: a POST to ``webhook.url`` on a terminal state, a new ``X-Cloro-Webhook-Id`` per
attempt, retries at ~2/4/8/16 minutes of the service clock, lost and duplicated deliveries.
Not reproduced: the batch endpoint, sync endpoints, concurrency slots and the 100k
queue cap, server-side retries, rawResponse / entities / map fields, the credits API.

The clock is the process's monotonic clock plus an offset that ``/_control/services/cloro/advance``
moves forward, so a test sees 24 h pass without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from geo_pipeline.domain.platforms import PriceList
from geo_pipeline.simulator.answers import generate_answer, unit
from geo_pipeline.simulator.profiles import Profile
from geo_pipeline.simulator.services import persist

PREFIX = "/cloro"
DAY_S = 24 * 3600.0
# research §2.1 "Submit": taskType is one of these.
TASK_TYPES = (
    "AIMODE",
    "GOOGLE",
    "GOOGLE_NEWS",
    "GEMINI",
    "CHATGPT",
    "COPILOT",
    "PERPLEXITY",
    "GROK",
)
# research §2.1 "Credits per async task" (AI Overviews = GOOGLE). ChatGPT: the web-search task,
# 5 credits, the one the pipeline asks for and prices (a "full" task is 7; docs/services/cloro.md).
CREDITS = {
    "CHATGPT": 5,
    "PERPLEXITY": 4,
    "COPILOT": 5,
    "AIMODE": 4,
    "GOOGLE": 5,
    "GOOGLE_NEWS": 5,
    "GEMINI": 4,
    "GROK": 5,
}
SHOPPING_SURCHARGE = 2  # research §2.1 "Surcharges": +2 for ChatGPT shopping
MODELS = {"CHATGPT": "gpt-5", "AIMODE": "google-ai-mode", "PERPLEXITY": "sonar"}
_COUNTRY = re.compile(r"^[A-Z]{2}$")
_TOP_FIELDS = {"taskType", "payload", "priority", "idempotencyKey", "webhook"}


@dataclass(frozen=True)
class CloroProfile:
    """What the imitated cloro account does. Rates are probabilities, durations seconds."""

    api_key: str = "sim-cloro-key"
    queued_s: tuple[float, float] = (0.02, 0.1)  # time spent QUEUED (excluded from latencyMs)
    processing_s: tuple[float, float] = (0.05, 0.2)
    fail_rate: float = 0.0  # the task ends FAILED ("Maximum retries exceeded")
    refusal_rate: float = 0.0  # a canned refusal: short text, no sources, still billed
    lost_rate: float = 0.0  # the task is created but the connection closes before the answer
    rate_limited_rate: float = 0.0  # 429 RATE_LIMIT_EXCEEDED, without Retry-After
    retention_s: float = DAY_S  # research §2.1 "Errors": 404 once a task passes 24 h retention
    html_expiry_s: float = DAY_S  # research §2.1 "ChatGPT result fields": html expires after 24 h
    # research §2.1 "Webhook": a delivery attempt that never arrives (retried at ~2, 4, 8, 16
    # minutes, 5 attempts in all), and one delivered again, each time with a new
    # X-Cloro-Webhook-Id ("redelivers at least once", §2.6).
    webhook_lost_rate: float = 0.0
    webhook_duplicate_rate: float = 0.0

    def with_overrides(self, overrides: Mapping[str, Any]) -> CloroProfile:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(
                f"cloro: unknown profile key(s) {sorted(unknown)}; known: {sorted(known)}"
            )
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            current = getattr(self, key)
            if isinstance(current, tuple):
                lo, hi = (float(v) for v in value)
                if not 0 <= lo <= hi:
                    raise ValueError(
                        f"cloro.{key}: {value!r} is not a range [lo, hi] with 0 <= lo <= hi"
                    )
                changes[key] = (lo, hi)
            elif isinstance(current, float):
                number = float(value)
                if key.endswith("_rate") and not 0.0 <= number <= 1.0:
                    raise ValueError(f"cloro.{key}: {value!r} is not a probability in [0, 1]")
                changes[key] = number
            else:
                changes[key] = str(value)
        return dataclasses.replace(self, **changes)


@dataclass
class CloroTask:
    id: str
    key: str | None
    task_type: str
    prompt: str
    country: str
    include: dict[str, bool]
    priority: int
    created_wall: datetime
    created: float  # service clock
    started: float  # leaves QUEUED
    done: float  # reaches COMPLETED or FAILED
    fails: bool
    refusal: bool
    credits: int
    fetched: int = 0  # result bodies served (GET with response of a COMPLETED task)
    webhook_url: str | None = None  # research §2.1 "Submit": webhook?:{url}
    hook_attempts: int = 0
    hook_next: float = 0.0  # service clock: the next delivery attempt
    hook_done: bool = False

    def status(self, now: float) -> str:
        if now < self.started:
            return "QUEUED"
        if now < self.done:
            return "PROCESSING"
        return "FAILED" if self.fails else "COMPLETED"


def _iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CloroService:
    def __init__(self, seed: int, profile: Mapping[str, Any] | None = None) -> None:
        self.seed = seed
        self.initial = CloroProfile().with_overrides(profile or {})
        self.write: persist.Write | None = None  # the --state-file journal, when there is one
        self.reset()

    def reset(self) -> None:
        self.profile = self.initial
        self.offset = 0.0
        self.tasks: dict[str, CloroTask] = {}
        # research §2.1 "Idempotency": keys are unique across the account; the key stays bound
        # until the task record is deleted ~24 h after creation (skills/track-prompts-async).
        self.by_key: dict[str, str] = {}
        self.submit_calls: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()
        self.created: dict[str, list[str]] = defaultdict(list)  # key -> task ids, ever
        self.expired: dict[str, CloroTask] = {}  # deleted by retention, kept for the counts
        self.cleared: dict[str, CloroTask] = {}  # dropped by DELETE /v1/async/queue
        self.requests: Counter[str] = Counter()
        self.hooks: Counter[str] = Counter()  # webhook attempts: sent, lost, duplicate, failed
        self.seq = 0

    def now(self) -> float:
        return time.monotonic() + self.offset

    def wall(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    # ------------------------------------------------------------------ wiring
    def mount(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.post(PREFIX + "/v1/async/task", self.create_task),
                web.get(PREFIX + "/v1/async/task/{task_id}", self.get_task),
                web.delete(PREFIX + "/v1/async/queue", self.clear_queue),
                web.get(PREFIX + "/v1/async/status", self.queue_status),
                web.get(PREFIX + "/html/{task_id}", self.html),
                web.post("/_control/services/cloro/profile", self.control_profile),
                web.post("/_control/services/cloro/advance", self.control_advance),
                web.get("/_control/services/cloro/stats", self.control_stats),
                web.post("/_control/services/cloro/reset", self.control_reset),
            ]
        )
        app.on_startup.append(self._start_hooks)
        app.on_cleanup.append(self._stop_hooks)

    # ------------------------------------------------------------------ webhooks
    async def _start_hooks(self, app: web.Application) -> None:
        self._hook_task = asyncio.create_task(self._hook_loop())

    async def _stop_hooks(self, app: web.Application) -> None:
        self._hook_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._hook_task

    async def _hook_loop(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            while True:
                await asyncio.sleep(0.05)
                now = self.now()
                due = [
                    t
                    for t in list(self.tasks.values())
                    if t.webhook_url
                    and not t.hook_done
                    and t.hook_attempts < 5
                    and t.status(now) in ("COMPLETED", "FAILED")
                    and now >= t.hook_next
                ]
                for task in due:
                    await self._deliver(session, task, now)

    async def _deliver(self, session: Any, task: CloroTask, now: float) -> None:
        """research §2.1 "Webhook": a POST on a terminal state, acknowledged by any 2xx, retried
        5 times at ~2, 4, 8, 16 minutes; X-Cloro-Webhook-Id changes with every attempt. The body
        is the task as a poll shows it without ``response`` (inf.: the receiver polls for it)."""
        task.hook_attempts += 1
        draw = f"{task.id}#{task.hook_attempts}"
        task.hook_next = now + 120.0 * 2 ** (task.hook_attempts - 1)
        if unit(self.seed, draw, "hook-lost") < self.profile.webhook_lost_rate:
            self.hooks["lost"] += 1
            return
        status = task.status(now)
        body = {"task": self._summary(task, now), "credits": self._credits(task, status)}
        copies = 2 if unit(self.seed, draw, "hook-dup") < self.profile.webhook_duplicate_rate else 1
        for _ in range(copies):
            try:
                async with session.post(
                    str(task.webhook_url),
                    json=body,
                    headers={"X-Cloro-Webhook-Id": str(uuid.uuid4())},
                    timeout=aiohttp_timeout(),
                ) as resp:
                    ok = 200 <= resp.status < 300
            except Exception:
                ok = False
            self.hooks["sent" if ok else "failed"] += 1
            if ok:
                task.hook_done = True
        if copies == 2:
            self.hooks["duplicate"] += 1

    # ------------------------------------------------------------------ envelope
    def _error(
        self, status: int, code: str, message: str, details: Any = None, kind: str = ""
    ) -> web.Response:
        # research §2.1 "Errors": real HTTP statuses, body {success:false, error:{code, ...}}.
        self.requests[f"{kind}:{status}"] += 1
        err: dict[str, Any] = {"code": code, "message": message, "timestamp": _iso(self.wall())}
        if details is not None:
            err["details"] = details
        return web.json_response({"success": False, "error": err}, status=status)

    def _auth(self, request: web.Request, kind: str) -> web.Response | None:
        header = request.headers.get("Authorization")
        if not header:
            return self._error(401, "MISSING_API_KEY", "Missing API key", kind=kind)
        # research §2.1 "Auth": `Authorization: Bearer <key>`; a lowercase `bearer` returns 401.
        if not header.startswith("Bearer ") or not header[7:].strip():
            return self._error(401, "INVALID_API_KEY_FORMAT", "Invalid API key format", kind=kind)
        if header[7:].strip() != self.profile.api_key:
            return self._error(
                401, "INVALID_OR_EXPIRED_API_KEY", "Invalid or expired API key", kind=kind
            )
        return None

    def _expire(self, now: float) -> None:
        """research §2.1 "Errors" (404 after 24 h) and skills/track-prompts-async ("finished
        tasks are deleted about 24 hours after creation"): the record and its key go."""
        for tid in [
            t.id for t in self.tasks.values() if now >= t.created + self.profile.retention_s
        ]:
            task = self.tasks.pop(tid)
            self.expired[tid] = task
            if task.key is not None and self.by_key.get(task.key) == tid:
                del self.by_key[task.key]

    def _summary(self, task: CloroTask, now: float) -> dict[str, Any]:
        status = task.status(now)
        terminal = status in ("COMPLETED", "FAILED")
        return {
            "id": task.id,
            "taskType": task.task_type,
            "status": status,
            "priority": task.priority,
            "createdAt": _iso(task.created_wall),
            # research §2.1 "Poll": latencyMs excludes time spent queued; null until terminal.
            "latencyMs": int((task.done - task.started) * 1000) if terminal else None,
            "idempotencyKey": task.key,
        }

    @staticmethod
    def _credits(task: CloroTask, status: str) -> dict[str, Any]:
        # research §2.1 "Poll": creditsCharged null until terminal, 0 if FAILED; billed on
        # COMPLETED only (§2.6 "Billing moments").
        charged: int | None = None
        if status == "COMPLETED":
            charged = task.credits
        elif status == "FAILED":
            charged = 0
        return {"creditsToCharge": task.credits, "creditsCharged": charged}

    # ------------------------------------------------------------------ vendor API
    async def create_task(self, request: web.Request) -> web.Response:
        kind = "submit"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        try:
            body = json.loads(await request.read())
        except ValueError:
            return self._error(400, "VALIDATION_ERROR", "Request body is not JSON", kind=kind)
        problems = self._validate(body)
        if problems:
            return self._error(
                400, "VALIDATION_ERROR", "Request validation failed", problems, kind=kind
            )
        now = self.now()
        self._expire(now)
        key = body.get("idempotencyKey")
        count_key = key if key is not None else "-"
        self.submit_calls[count_key] += 1
        draw = f"{count_key}#{self.submit_calls[count_key]}"
        prof = self.profile
        if unit(self.seed, draw, "cloro-429") < prof.rate_limited_rate:
            # research §2.1 "Limits": no Retry-After on 429.
            return self._error(429, "RATE_LIMIT_EXCEEDED", "API key rate limit exceeded", kind=kind)
        if key is not None and key in self.by_key:
            # research §2.1 "Idempotency": 409 RESOURCE_ALREADY_EXISTS with details{field, value};
            # the body names the key, not the task (openapi IdempotencyConflictError).
            self.conflicts[key] += 1
            return self._error(
                409,
                "RESOURCE_ALREADY_EXISTS",
                "Task already exists",
                {"field": "idempotencyKey", "value": key},
                kind=kind,
            )
        task = self._new_task(body, key, now)
        self.requests[f"{kind}:200"] += 1
        if unit(self.seed, draw, "cloro-lost") < prof.lost_rate:
            # Created upstream, but the client never hears so (R12's "uncertain").
            self.requests[f"{kind}:lost"] += 1
            await asyncio.sleep(0)
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=599)
        # research §2.1 "Submit": 200 with {task:{id, status:QUEUED, ...}, credits:{..., null}}.
        return web.json_response(
            {
                "success": True,
                "task": self._summary(task, now),
                "credits": self._credits(task, "QUEUED"),
            }
        )

    def _validate(self, body: Any) -> list[dict[str, str]]:
        if not isinstance(body, dict):
            return [{"field": "(body)", "message": "expected a JSON object"}]
        problems = [
            {"field": name, "message": "Unrecognized key"}
            for name in sorted(set(body) - _TOP_FIELDS)
        ]
        if body.get("taskType") not in TASK_TYPES:
            problems.append({"field": "taskType", "message": f"must be one of {list(TASK_TYPES)}"})
        priority = body.get("priority", 1)
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 10:
            problems.append({"field": "priority", "message": "must be an integer 1-10"})
        key = body.get("idempotencyKey")
        if key is not None and (not isinstance(key, str) or not key):
            problems.append({"field": "idempotencyKey", "message": "must be a non-empty string"})
        payload = body.get("payload")
        if not isinstance(payload, dict):
            problems.append({"field": "payload", "message": "required object"})
            return problems
        prompt = payload.get("prompt")
        # research §2.1 "Submit": prompt 1-10,000 chars; country required, uppercase ISO-2.
        if not isinstance(prompt, str) or not 1 <= len(prompt) <= 10_000:
            problems.append({"field": "payload.prompt", "message": "must be 1-10000 characters"})
        country = payload.get("country")
        if not isinstance(country, str) or not _COUNTRY.match(country):
            problems.append(
                {"field": "payload.country", "message": "required, an uppercase ISO-2 code"}
            )
        include = payload.get("include", {})
        if not isinstance(include, dict) or any(not isinstance(v, bool) for v in include.values()):
            problems.append({"field": "payload.include", "message": "an object of booleans"})
        return problems

    def _new_task(self, body: Mapping[str, Any], key: str | None, now: float) -> CloroTask:
        self.seq += 1
        tid = str(uuid.uuid4())  # research §2.1 "Submit": id (uuid)
        salt = f"{key or tid}|{self.seq}"
        prof = self.profile
        qlo, qhi = prof.queued_s
        plo, phi = prof.processing_s
        started = now + qlo + (qhi - qlo) * unit(self.seed, salt, "queued")
        payload = body["payload"]
        include = {str(k): bool(v) for k, v in (payload.get("include") or {}).items()}
        credits = CREDITS[body["taskType"]]
        if body["taskType"] == "CHATGPT" and include.get("shopping"):
            credits += SHOPPING_SURCHARGE
        task = CloroTask(
            id=tid,
            key=key,
            task_type=str(body["taskType"]),
            prompt=str(payload["prompt"]),
            country=str(payload["country"]),
            include=include,
            priority=int(body.get("priority", 1)),
            created_wall=self.wall(),
            created=now,
            started=started,
            done=started + plo + (phi - plo) * unit(self.seed, salt, "processing"),
            fails=unit(self.seed, salt, "fail") < prof.fail_rate,
            refusal=unit(self.seed, salt, "refusal") < prof.refusal_rate,
            credits=credits,
            webhook_url=(body.get("webhook") or {}).get("url"),
        )
        self._index(task)
        self.journal({"op": "task", **persist.dump(task, *_TASK_TIMES)})
        return task

    def _index(self, task: CloroTask) -> None:
        self.tasks[task.id] = task
        if task.key is not None:
            self.by_key[task.key] = task.id
        self.created[task.key or "-"].append(task.id)

    async def get_task(self, request: web.Request) -> web.Response:
        kind = "poll"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        now = self.now()
        self._expire(now)
        task = self.tasks.get(request.match_info["task_id"])
        if task is None:
            # research §2.1 "Errors": RESOURCE_NOT_FOUND, also once a task passes retention.
            return self._error(
                404,
                "RESOURCE_NOT_FOUND",
                "Task not found",
                {"id": request.match_info["task_id"]},
                kind=kind,
            )
        status = task.status(now)
        out: dict[str, Any] = {
            "task": self._summary(task, now),
            "credits": self._credits(task, status),
        }
        if status == "COMPLETED":
            out["response"] = self._result(task, request)
            task.fetched += 1
        elif status == "FAILED":
            # research §2.1 "Errors": 500 "Maximum retries exceeded" (after server-side retries).
            out["response"] = {
                "error": {"code": "INTERNAL_SERVER_ERROR", "message": "Maximum retries exceeded"}
            }
        self.requests[f"{kind}:200"] += 1
        return web.json_response(out)

    def _result(self, task: CloroTask, request: web.Request) -> dict[str, Any]:
        """research §2.1 "ChatGPT result fields": text, markdown, sources[{position, url, label,
        description}], searchQueries (the fan-out), model, shoppingCards, html (a URL)."""
        model = MODELS.get(task.task_type, task.task_type.lower())
        if task.refusal:
            # research §2.1 "Gotchas": empty sources and under ~160 characters; still billed.
            return {
                "text": "I'm sorry, but I can't help with that request.",
                "markdown": "I'm sorry, but I can't help with that request.",
                "sources": [],
                "searchQueries": [],
                "model": model,
                "shoppingCards": [],
            }
        prof = Profile(
            platform=f"cloro-{task.task_type.lower()}",
            devices=("web",),
            regions=(task.country.lower(),),
            modes=("standard",),
            screenshot_supported=False,
            cancellable=False,
            prices=PriceList("cloro-sim", "USD", {"standard": 1}),
        )
        ans = generate_answer(self.seed, task.key or task.id, task.prompt, prof)
        sources = [
            {
                "position": i + 1,
                "url": c.url,
                "label": c.title,
                "description": f"{c.title} ...",
            }
            for i, c in enumerate(ans.citations)
        ]
        queries = [task.prompt[:80], f"{task.prompt[:60]} {task.country.lower()} 2026"]
        result: dict[str, Any] = {
            "text": ans.answer,
            "sources": sources,
            "model": model,
            "shoppingCards": (
                [{"title": "Sample product", "price": "$9.99", "url": "https://shop.example/p/1"}]
                if task.include.get("shopping")
                else []
            ),
        }
        if task.include.get("markdown", True):
            result["markdown"] = ans.answer
        if task.include.get("searchQueries", True):
            result["searchQueries"] = queries
        if task.include.get("html"):
            base = f"{request.scheme}://{request.host}{PREFIX}"
            result["html"] = f"{base}/html/{task.id}"
        return result

    async def html(self, request: web.Request) -> web.Response:
        """The rendered page behind ``html``: gone once html_expiry_s passed since completion."""
        task = self.tasks.get(request.match_info["task_id"])
        now = self.now()
        if task is None or task.status(now) != "COMPLETED":
            return web.Response(status=404, text="not found")
        if now >= task.done + self.profile.html_expiry_s:
            return web.Response(status=403, text="Request has expired")
        return web.Response(
            text=f"<html><body><p>{task.prompt}</p></body></html>", content_type="text/html"
        )

    async def clear_queue(self, request: web.Request) -> web.Response:
        """research §2.1 "Cancel": drops every QUEUED task of the organisation; PROCESSING tasks
        keep running; there is no per-task cancel."""
        denied = self._auth(request, "cancel")
        if denied is not None:
            return denied
        now = self.now()
        queued = [t for t in self.tasks.values() if t.status(now) == "QUEUED"]
        self.journal({"op": "clear", "ids": [t.id for t in queued]})
        for task in queued:
            del self.tasks[task.id]
            self.cleared[task.id] = task
            if task.key is not None and self.by_key.get(task.key) == task.id:
                del self.by_key[task.key]
        self.requests["cancel:200"] += 1
        return web.json_response({"success": True, "cleared": len(queued)})

    async def queue_status(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "status")
        if denied is not None:
            return denied
        now = self.now()
        by_status = Counter(t.status(now) for t in self.tasks.values())
        prio = Counter(t.priority for t in self.tasks.values() if t.status(now) == "QUEUED")
        return web.json_response(
            {
                "queuedTasks": by_status["QUEUED"],
                "processingTasks": by_status["PROCESSING"],
                "priorityBreakdown": [
                    {"priority": p, "count": n} for p, n in sorted(prio.items(), reverse=True)
                ],
                "concurrency": None,
            }
        )

    # ------------------------------------------------------------------ control
    def stats(self) -> dict[str, Any]:
        """Per idempotency key: submits, tasks created, tasks billed (COMPLETED), credits
        charged, result bodies served and 409s; judged by tests instead of our database."""
        now = self.now()
        every = {**self.expired, **self.cleared, **self.tasks}
        keys: dict[str, dict[str, int]] = {}
        for key, calls in self.submit_calls.items():
            ids = self.created.get(key, [])
            done = [every[i] for i in ids if i in every]
            billed = [t for t in done if i_completed(t, now) and t.id not in self.cleared]
            keys[key] = {
                "submit_calls": calls,
                "tasks_created": len(ids),
                "tasks_billed": len(billed),
                "credits_charged": sum(t.credits for t in billed),
                "results_fetched": sum(t.fetched for t in done),
                "conflicts": self.conflicts.get(key, 0),
            }
        return {
            "keys": keys,
            "tasks": len(self.tasks),
            "max_tasks_per_key": max((v["tasks_created"] for v in keys.values()), default=0),
            "credits_charged": sum(v["credits_charged"] for v in keys.values()),
            "requests": dict(sorted(self.requests.items())),
            "expired": len(self.expired),
            "cleared": len(self.cleared),
            "webhooks": dict(sorted(self.hooks.items())),
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
        out.pop("api_key")
        return web.json_response(out)

    async def control_advance(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read() or b"{}")
        seconds = float(body.get("seconds", 0))
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
            task = persist.load(CloroTask, record, **_TIMES_KW, now=self.now(), wall=self.wall())
            self._index(task)
            self.submit_calls[task.key or "-"] += 1
        elif op == "clear":
            for tid in record["ids"]:
                task = self.tasks.pop(tid, None)
                if task is not None:
                    self.cleared[tid] = task
                    if task.key is not None and self.by_key.get(task.key) == tid:
                        del self.by_key[task.key]


_TASK_TIMES = ("created", "created_wall", ("started", "done"))
_TIMES_KW: dict[str, Any] = {
    "anchor": "created",
    "anchor_wall": "created_wall",
    "clocks": ("started", "done"),
}


def aiohttp_timeout() -> Any:
    import aiohttp

    return aiohttp.ClientTimeout(total=10)


def i_completed(task: CloroTask, now: float) -> bool:
    return task.status(now) == "COMPLETED"


__all__ = ["CREDITS", "CloroProfile", "CloroService", "CloroTask"]
