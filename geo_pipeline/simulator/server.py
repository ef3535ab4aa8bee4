"""The platform simulator: one aiohttp server that imitates every simulated platform at once.

It exists so the demo, the tests and the benchmarks run offline against a real HTTP peer with the
behaviours that make the execution chain hard (docs/design.md section 1): late answers, lost
responses after acceptance (R12), rate limits with Retry-After, transient 5xx and poll failures
(R13),
screenshots that arrive later than the text or never (R6, R21), bad and hostile answers (R19, R22),
and daily fee statements with discrepancies for reconciliation (R23). The exact API is in
docs/simulator.md; ``create_app`` builds it, ``serve`` runs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from geo_pipeline.simulator.answers import generate_answer, unit
from geo_pipeline.simulator.journal import Journal
from geo_pipeline.simulator.profiles import Profile, ProfileError, SimulatorConfig
from geo_pipeline.simulator.protocols import (
    STATS_LABEL,
    auth_key,
    error_body,
    question_of,
    response_id,
    success_body,
    tokens,
)
from geo_pipeline.simulator.screenshots import render_png
from geo_pipeline.simulator.services import mount_services
from geo_pipeline.simulator.state import SimState, Task, TokenBucket
from geo_pipeline.simulator.webapp import mount as mount_web_apps

try:  # orjson roughly halves the cost of a response; the standard library is the fallback.
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - depends on the machine

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=_dumps(obj), status=status, content_type="application/json", headers=headers
    )


def _error(code: int, etype: str, message: str, **extra: Any) -> web.Response:
    headers = extra.pop("headers", None)
    return _json({"error": {"type": etype, "message": message, **extra}}, code, headers)


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _short_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()


class Simulator:
    """The server's behaviour, separate from aiohttp's wiring so tests can read it in one place."""

    def __init__(self, config: SimulatorConfig):
        self.seed = config.seed
        self.initial = dict(config.profiles)
        self.profiles: dict[str, Profile] = dict(config.profiles)
        self.state = SimState()
        self.rng = random.Random(config.seed)
        # Paid synchronous calls for the usage/cost APIs: (protocol, model, finished, minor).
        self.sync_costs: list[tuple[str, str, datetime, int]] = []
        self.unparseable_served: set[str] = set()
        self.journal: Journal | None = None  # --state-file: what a restart replays
        self.services: list[Any] = []  # answer-scraping services (simulator.services)

    # ------------------------------------------------------------------ helpers
    def _count(self, platform: str, kind: str, status: int) -> None:
        self.state.requests[f"{platform}:{kind}:{status}"] += 1

    def _injected(self, platform: str, name: str, ident: str) -> None:
        """A fault drawn once per task (answer, screenshot, statement line): counted once."""
        self.state.injected[f"{platform}:{name}"].add(ident)

    def _answer_fault(self, platform: str, kind: str, ident: str) -> None:
        if kind != "normal":
            self._injected(platform, "answer_hostile" if kind == "hostile" else "answer_bad", ident)

    def _fault(self, platform: str, name: str) -> None:
        self.state.faults[f"{platform}:{name}"] += 1

    @staticmethod
    def _auth_error(request: web.Request, prof: Profile) -> tuple[int, str] | None:
        if not prof.require_auth:
            return None
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            return 401, "missing bearer token"
        if header[7:].strip() != (prof.api_key or ""):
            return 403, "the API key is not allowed to use this platform"
        return None

    def _task(self, request: web.Request, kind: str) -> tuple[str, Profile, Task] | web.Response:
        """The platform, its profile and the task a /tasks/{id}... request names, or the error
        response to send: 404 (counted under ``kind``) for an unknown platform or task, or the
        authentication error."""
        platform = request.match_info["platform"]
        prof = self.profiles.get(platform)
        task = self.state.tasks.get(request.match_info["task_id"])
        if prof is None or task is None or task.platform != platform:
            self._count(platform, kind, 404)
            return _error(404, "not_found", "no such task")
        auth = self._auth_error(request, prof)
        if auth is not None:
            return _error(auth[0], "permission_denied", auth[1])
        return platform, prof, task

    def _retry_after(self, prof: Profile, platform: str, now: float) -> float | None:
        """Seconds to wait when this submit is rate limited, else None."""
        if prof.submit_rate_per_s:
            bucket = self.state.buckets.get(platform)
            if bucket is None or bucket.rate != prof.submit_rate_per_s:
                bucket = TokenBucket(prof.submit_rate_per_s, prof.submit_burst, prof.submit_burst)
                self.state.buckets[platform] = bucket
            wait = bucket.take(now)
            if wait > 0:
                return max(wait, 0.001)
        return None

    def _new_task(self, prof: Profile, key: str, body: Mapping[str, Any], now: float) -> Task:
        seed = self.seed
        lo, hi = prof.completion_s
        duration = lo + (hi - lo) * unit(seed, key, "duration")
        wants_shot = bool(body.get("screenshot"))
        if not wants_shot:
            shot = "not_requested"
        elif not prof.screenshot_supported:
            shot = "unsupported"
        elif unit(seed, key, "shot_never") < prof.screenshot_never_rate:
            shot = "never"
        elif unit(seed, key, "shot_late") < prof.screenshot_late_rate:
            shot = "late"
        else:
            shot = "available"
        slo, shi = prof.screenshot_delay_s
        shot_delay = (slo + (shi - slo) * unit(seed, key, "shot_delay")) if shot == "late" else 0.0
        task = Task(
            task_id=self.state.next_id(prof.platform),
            platform=prof.platform,
            key=key,
            question=str(body["question"]),
            device=str(body["device"]),
            region=str(body["region"]),
            mode=str(body["mode"]),
            tenant=str(body.get("tenant") or ""),
            screenshot_requested=wants_shot,
            accepted_at=SimState.now_utc(),
            t0=now,
            done_at=now + duration,
            fails=unit(seed, key, "fail") < prof.upstream_failure_rate,
            shot=shot,
            shot_ready_at=now + duration + shot_delay,
        )
        rlo, rhi = prof.register_delay_s
        task.visible_at = now + rlo + (rhi - rlo) * unit(seed, key, "register_delay")
        self.state.tasks[task.task_id] = task
        self.state.by_key[(prof.platform, key)] = task.task_id
        self.state.tasks_created[(prof.platform, key)] += 1
        self.state.created[(prof.platform, key)].append(task.task_id)
        if shot in ("late", "never"):
            self._injected(prof.platform, f"screenshot_{shot}", task.task_id)
        if self.journal is not None:
            self.journal.task(task)
        return task

    async def _lose_response(self, request: web.Request, prof: Profile) -> web.Response:
        """The task exists but the client never hears so (the R12 'uncertain' case)."""
        if prof.lost_mode == "hold":
            await asyncio.sleep(prof.lost_hold_s)
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=599)  # never reaches the client: the connection is gone

    def _screenshot_state(self, task: Task, now: float) -> dict[str, str]:
        status = task.status(now)
        if task.shot == "not_requested":
            return {"status": "unavailable", "reason": "not_requested"}
        if task.shot == "unsupported":
            return {"status": "unavailable", "reason": "unsupported"}
        if status == "failed" or task.shot == "never":
            return {"status": "unavailable", "reason": "capture_failed"}
        if status != "completed" or now < task.shot_ready_at:
            return {"status": "pending"}
        return {"status": "available"}

    # ------------------------------------------------------------------ task API
    async def submit(self, request: web.Request) -> web.Response:
        platform = request.match_info["platform"]
        prof = self.profiles.get(platform)
        if prof is None:
            return _error(404, "not_found", f"unknown platform {platform!r}")
        auth = self._auth_error(request, prof)
        if auth is not None:
            self._count(platform, "submit", auth[0])
            return _error(auth[0], "permission_denied", auth[1])
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self._count(platform, "submit", 400)
            return _error(400, "invalid_request", "the body must be a JSON object")
        key = request.headers.get("Idempotency-Key", "").strip()
        if not key:
            self._count(platform, "submit", 400)
            return _error(400, "invalid_request", "the Idempotency-Key header is required")
        self.state.submit_calls[(platform, key)] += 1
        # Faults are drawn per (key, call number): a retry of the same key gets a fresh draw,
        # and a rerun with the same seed sees the same sequence.
        draw_key = f"{key}#{self.state.submit_calls[(platform, key)]}"
        seed = self.seed

        if unit(seed, draw_key, "perm") < prof.permission_error_rate:
            self._fault(platform, "permission")
            self._count(platform, "submit", 403)
            return _error(403, "permission_denied", "this account may not use the requested mode")
        problems = []
        question = body.get("question")
        if not isinstance(question, str) or not question.strip():
            problems.append("question must be a non-empty string")
        for name, allowed in (
            ("device", prof.devices),
            ("region", prof.regions),
            ("mode", prof.modes),
        ):
            if body.get(name) not in allowed:
                problems.append(f"{name} must be one of {list(allowed)}, got {body.get(name)!r}")
        if not problems and unit(seed, draw_key, "invalid") < prof.invalid_params_rate:
            self._fault(platform, "invalid_params")
            problems.append("simulated: the platform rejected a parameter")
        if problems:
            self._count(platform, "submit", 400)
            return _error(400, "invalid_request", "; ".join(problems))

        now = time.monotonic()
        wait = self._retry_after(prof, platform, now)
        if wait is None and unit(seed, draw_key, "429") < prof.rate_limited_rate:
            wait = prof.retry_after_s
        if wait is not None:
            self._fault(platform, "rate_limited")
            self._count(platform, "submit", 429)
            seconds = max(1, int(wait + 0.999)) if wait >= 1 else wait
            return _error(
                429, "rate_limited", "too many requests", headers={"Retry-After": f"{seconds:g}"}
            )
        if unit(seed, draw_key, "5xx") < prof.transient_rate:
            status = (500, 502, 503)[int(unit(seed, draw_key, "5xx_kind") * 3)]
            self._fault(platform, "transient")
            self._count(platform, "submit", status)
            return _error(status, "server_error", "simulated transient failure")

        existing = self.state.by_key.get((platform, key))
        if existing is not None:
            task = self.state.tasks[existing]
            self._count(platform, "submit", 200)
            return _json(
                {
                    "task_id": task.task_id,
                    "status": "accepted",
                    "accepted_at": _iso(task.accepted_at),
                }
            )
        task = self._new_task(prof, key, body, now)
        lo, hi = prof.accept_delay_s
        if hi > 0:
            await asyncio.sleep(lo + (hi - lo) * unit(seed, draw_key, "accept_delay"))
        if unit(seed, draw_key, "lost") < prof.response_lost_rate:
            self._fault(platform, "response_lost")
            self._count(platform, "submit", 599)
            return await self._lose_response(request, prof)
        self._count(platform, "submit", 202)
        return _json(
            {"task_id": task.task_id, "status": "accepted", "accepted_at": _iso(task.accepted_at)},
            202,
        )

    async def lookup(self, request: web.Request) -> web.Response:
        platform = request.match_info["platform"]
        prof = self.profiles.get(platform)
        if prof is None:
            return _error(404, "not_found", f"unknown platform {platform!r}")
        auth = self._auth_error(request, prof)
        if auth is not None:
            return _error(auth[0], "permission_denied", auth[1])
        key = request.query.get("idempotency_key", "")
        task_id = self.state.by_key.get((platform, key))
        now = time.monotonic()
        task = self.state.tasks[task_id] if task_id is not None else None
        if task is not None and now < task.visible_at:
            # Created, but the lookup index has not caught up yet (register_delay_s).
            self._fault(platform, "lookup_lagged")
            task = None
        if task is None:
            self._count(platform, "lookup", 404)
            return _error(404, "not_found", "no task was accepted with this idempotency key")
        self._count(platform, "lookup", 200)
        return _json(
            {
                "task_id": task.task_id,
                "status": task.status(now),
                "accepted_at": _iso(task.accepted_at),
            }
        )

    async def poll(self, request: web.Request) -> web.Response:
        found = self._task(request, "poll")
        if isinstance(found, web.Response):
            return found
        platform, prof, task = found
        if prof.poll_error_rate and self.rng.random() < prof.poll_error_rate:
            self._fault(platform, "poll_error")
            self._count(platform, "poll", 503)
            return _error(503, "server_error", "simulated poll failure")
        now = time.monotonic()
        status = task.status(now)
        if status == "completed" and request.query.get("include") == "result":
            # The finished task's status with its result, as task APIs that return the output
            # with the status do (e.g. DashScope's task query): one request instead of two.
            self._count(platform, "poll", 200)
            return self._completed_result(prof, task, now)
        out: dict[str, Any] = {"task_id": task.task_id, "status": status}
        err = task.error(now)
        if err:
            out["error"] = err
        self._count(platform, "poll", 200)
        return _json(out)

    def _result_core(self, prof: Profile, task: Task) -> dict[str, Any]:
        # Regenerated on each fetch (deterministic, ~50 us) rather than held: a long benchmark
        # keeps hundreds of thousands of tasks in memory.
        ans = generate_answer(self.seed, task.key, task.question, prof)
        self._answer_fault(prof.platform, ans.kind, task.task_id)
        tokens_in, tokens_out = tokens(task.question, ans.answer)
        return {
            "task_id": task.task_id,
            "status": "completed",
            "answer": ans.answer,
            "citations": [{"id": c.id, "url": c.url, "title": c.title} for c in ans.citations],
            "search_results": [{"url": c.url, "title": c.title} for c in ans.search_results],
            "truncated": ans.truncated,
            "usage": {
                "deep_thinking": task.mode == "deep_thinking",
                "web_search": task.mode == "web_search",
                # Request-level usage, as real engines report it (recorded with the attempt).
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "web_search_requests": 1 if task.mode == "web_search" else 0,
            },
            "completed_at": _iso(task.finished_wallclock()),
        }

    async def result(self, request: web.Request) -> web.Response:
        found = self._task(request, "result")
        if isinstance(found, web.Response):
            return found
        platform, prof, task = found
        now = time.monotonic()
        status = task.status(now)
        if status != "completed":
            self._count(platform, "result", 409)
            return _error(409, "not_completed", f"task is {status}", status=status)
        self._count(platform, "result", 200)
        return self._completed_result(prof, task, now)

    def _completed_result(self, prof: Profile, task: Task, now: float) -> web.Response:
        """A completed task's result body (the result endpoint's, and a poll's that asks for
        it), with the unparseable fault applied."""
        if unit(self.seed, task.key, "unparseable") < prof.unparseable_rate:
            if task.task_id not in self.unparseable_served:  # one fault per task, however read
                self.unparseable_served.add(task.task_id)
                self._fault(task.platform, "unparseable")
            # A body cut mid-stream, as a broken gateway returns it: the connector must keep it raw.
            full = _dumps(self._result_core(prof, task))
            return web.Response(body=full[: len(full) // 2], content_type="application/json")
        body = self._result_core(prof, task)
        body["screenshot"] = self._screenshot_state(task, now)
        return _json(body)

    async def screenshot(self, request: web.Request) -> web.Response:
        found = self._task(request, "screenshot")
        if isinstance(found, web.Response):
            return found
        platform, _, task = found
        now = time.monotonic()
        state = self._screenshot_state(task, now)
        if state["status"] == "pending":
            self._count(platform, "screenshot", 202)
            wait = max(task.shot_ready_at - now, 0.1)
            return _json(
                {"status": "pending"}, 202, headers={"Retry-After": f"{min(wait, 60.0):.2f}"}
            )
        if state["status"] == "unavailable":
            code = 410 if state["reason"] == "capture_failed" else 404
            self._count(platform, "screenshot", code)
            return _error(
                code, "unavailable", "no screenshot for this task", reason=state["reason"]
            )
        if task.png is None:
            task.png = render_png(task.task_id, task.platform, task.question)
        self._count(platform, "screenshot", 200)
        return web.Response(body=task.png, content_type="image/png")

    async def cancel(self, request: web.Request) -> web.Response:
        found = self._task(request, "cancel")
        if isinstance(found, web.Response):
            return found
        platform, prof, task = found
        now = time.monotonic()
        self._count(platform, "cancel", 200)
        if not prof.cancellable:
            return _json({"cancelled": False, "reason": "platform does not support cancellation"})
        if task.status(now) in ("completed", "failed"):
            return _json({"cancelled": False, "reason": "task already finished"})
        task.cancelled_at = now
        if self.journal is not None:
            self.journal.cancel(task)
        return _json({"cancelled": True})

    async def prices(self, request: web.Request) -> web.Response:
        platform = request.match_info["platform"]
        prof = self.profiles.get(platform)
        if prof is None:
            return _error(404, "not_found", f"unknown platform {platform!r}")
        p = prof.prices
        self._count(platform, "prices", 200)
        return _json(
            {
                "platform": platform,
                "version": p.version,
                "currency": p.currency,
                "base": p.base,
                "deep_thinking": p.deep_thinking,
                "web_search": p.web_search,
                "screenshot": p.screenshot,
                "retry_fee_rule": p.retry_fee_rule,
            }
        )

    def statement_lines(self, prof: Profile, day: date) -> list[dict[str, Any]]:
        """The platform's fee statement for one UTC day: one line per charged item of each task
        whose work finished that day, priced from the profile's price list and honouring its
        retry_fee_rule (R15); then the configured discrepancies are applied (R23)."""
        p = prof.prices
        now = time.monotonic()
        tasks = sorted(
            (t for t in self.state.tasks.values() if t.platform == prof.platform),
            key=lambda t: (t.t0, t.task_id),
        )
        first_of_sample: set[str] = set()
        lines: list[dict[str, Any]] = []
        seed = self.seed
        for t in tasks:
            sample = t.key.rsplit(":", 1)[0]
            is_first = sample not in first_of_sample
            first_of_sample.add(sample)
            if now < t.done_at or (t.cancelled_at is not None and t.cancelled_at < t.done_at):
                continue  # unfinished or cancelled upstream in time: nothing charged (yet)
            finished = t.finished_wallclock()
            if finished.date() != day:
                continue
            if p.retry_fee_rule == "free" and not is_first:
                continue
            if p.retry_fee_rule == "free_after_failure" and t.fails:
                continue
            items = [("base", p.base.get(t.mode, next(iter(p.base.values()), 0)))]
            if not t.fails:
                if t.mode == "deep_thinking" and p.deep_thinking:
                    items.append(("deep_thinking", p.deep_thinking))
                if t.mode == "web_search" and p.web_search:
                    items.append(("web_search", p.web_search))
                if t.shot in ("available", "late") and p.screenshot:
                    items.append(("screenshot", p.screenshot))
            for item, amount in items:
                salt = f"{t.task_id}|{item}"
                if unit(seed, salt, "missing") < prof.statement_missing_line_rate:
                    continue
                if unit(seed, salt, "mismatch") < prof.statement_amount_mismatch_rate:
                    amount += 1 + int(unit(seed, salt, "delta") * 5)
                    self._injected(prof.platform, "statement_mismatch", salt)
                lines.append(
                    {
                        "upstream_id": t.task_id,
                        "item": item,
                        "amount_minor": amount,
                        "currency": p.currency,
                        "price_version": p.version,
                        "charged_at": _iso(finished),
                    }
                )
            if unit(seed, t.task_id, "extra") < prof.statement_extra_line_rate:
                lines.append(
                    {
                        "upstream_id": "unknown-" + _short_hash(t.task_id),
                        "item": "base",
                        "amount_minor": p.base.get("standard", next(iter(p.base.values()), 0)),
                        "currency": p.currency,
                        "price_version": p.version,
                        "charged_at": _iso(finished),
                    }
                )
        return lines

    async def statement(self, request: web.Request) -> web.Response:
        platform = request.match_info["platform"]
        prof = self.profiles.get(platform)
        if prof is None:
            return _error(404, "not_found", f"unknown platform {platform!r}")
        auth = self._auth_error(request, prof)
        if auth is not None:
            return _error(auth[0], "permission_denied", auth[1])
        try:
            day = date.fromisoformat(request.match_info["day"])
        except ValueError:
            return _error(400, "invalid_request", "the statement date is YYYY-MM-DD")
        self._count(platform, "statement", 200)
        return _json(
            {
                "platform": platform,
                "date": day.isoformat(),
                "currency": prof.prices.currency,
                "lines": self.statement_lines(prof, day),
            }
        )

    # ------------------------------------------------------------------ OpenAI-compatible
    async def chat_completions(self, request: web.Request) -> web.Response:
        """``POST /openai/v1/chat/completions``: the model name selects the platform profile."""
        return await self.sync_call(request, "openai_chat")

    def _sync_handler(self, protocol: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            return await self.sync_call(request, protocol)

        return handler

    def _record_sync(self, created: list[str], protocol: str, key: str, *, paid: bool) -> None:
        """Remember one synchronous call's upstream task under the response id the client reads
        (the connector names the attempt by it). Two calls with one key answer with the same id,
        so a repeat is told apart by a ``#n`` suffix; tasks_created counts them either way."""
        rid = response_id(protocol, key)
        if created:
            rid = f"{rid}#{len(created) + 1}"
        created.append(rid)
        self.state.sync_paid[rid] = paid

    async def sync_call(self, request: web.Request, protocol: str) -> web.Response:
        """One synchronous engine call in ``protocol``'s documented shapes (protocols.py). The
        model name (in the body, or Gemini's URL path) selects the platform profile; faults are
        drawn per (Idempotency-Key or body hash, call number) like the task API's."""

        def fail(kind: str, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
            status, body = error_body(protocol, kind, message)
            return _json(body, status, headers)

        raw = await request.read()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            return fail("bad_request", "We could not parse the JSON body")
        if protocol == "gemini":
            model, _, _action = request.match_info["model_action"].partition(":")
        else:
            model = str(body.get("model") or "")
        prof = self.profiles.get(model)
        if prof is None:
            return fail("model_not_found", f"The model `{model}` does not exist")
        platform = f"{STATS_LABEL.get(protocol, protocol)}/{model}"
        if prof.require_auth:
            given = auth_key(protocol, request.headers)
            if not given or given != (prof.api_key or ""):
                self._count(platform, "chat", 401)
                return fail("unauthenticated", "Incorrect API key provided")
        question = question_of(protocol, body)
        if not question.strip():
            self._count(platform, "chat", 400)
            return fail("bad_request", "the request contains no user message")
        key = request.headers.get("Idempotency-Key") or hashlib.sha256(raw).hexdigest()[:24]
        self.state.submit_calls[(platform, key)] += 1
        draw_key = f"{key}#{self.state.submit_calls[(platform, key)]}"
        seed = self.seed
        if unit(seed, draw_key, "perm") < prof.permission_error_rate:
            self._fault(platform, "permission")
            self._count(platform, "chat", 403)
            return fail("permission", "You are not allowed to sample from this model")
        if unit(seed, draw_key, "invalid") < prof.invalid_params_rate:
            self._fault(platform, "invalid_params")
            self._count(platform, "chat", 400)
            return fail("bad_request", "Invalid value for 'temperature'")
        if unit(seed, draw_key, "429") < prof.rate_limited_rate:
            self._fault(platform, "rate_limited")
            self._count(platform, "chat", 429)
            return fail(
                "rate_limited",
                "Rate limit reached for requests",
                {"Retry-After": f"{max(prof.retry_after_s, 0.0):g}"},
            )
        if unit(seed, draw_key, "5xx") < prof.transient_rate:
            self._fault(platform, "transient")
            self._count(platform, "chat", 500)
            return fail("server", "The server had an error while processing your request")
        # From here on the platform has done (and, for a paid API, charged) the work.
        # Recorded now, not after the delay: a client that gives up while the answer is being
        # generated does not stop the platform from finishing (and billing) it.
        self.state.tasks_created[(platform, key)] += 1
        errored = unit(seed, draw_key, "err200") < prof.error_in_200_rate
        self._record_sync(self.state.created[(platform, key)], protocol, key, paid=not errored)
        if not errored:
            # Billed like the task API's answers: the standard base price of the model's list.
            p = prof.prices
            price = p.base.get("standard", next(iter(p.base.values()), 0))
            self.sync_costs.append((protocol, model, datetime.now(UTC), price))
        if self.journal is not None:
            rid = self.state.created[(platform, key)][-1]
            cost = None if errored else self.sync_costs[-1]
            self.journal.sync(platform, key, rid, not errored, cost)
        lo, hi = prof.completion_s
        delay = lo + (hi - lo) * unit(seed, draw_key, "duration")
        alo, ahi = prof.accept_delay_s
        delay += alo + (ahi - alo) * unit(seed, draw_key, "accept_delay")
        if delay > 0:
            await asyncio.sleep(delay)
        if unit(seed, draw_key, "lost") < prof.response_lost_rate:
            self._fault(platform, "response_lost")
            self._count(platform, "chat", 599)
            return await self._lose_response(request, prof)
        ans = generate_answer(seed, key, question, prof)
        self._answer_fault(platform, ans.kind, key)
        self._count(platform, "chat", 200)
        if errored:
            self._fault(platform, "error_in_200")
            if unit(seed, draw_key, "err200_kind") < 0.5:
                # An error object with status 200, as some gateways answer.
                return _json(error_body(protocol, "server", "The upstream model failed")[1])
            filtered = success_body(
                protocol, ans, model=model, key=key, question=question, failure="filtered"
            )
            return _json(filtered)
        return _json(success_body(protocol, ans, model=model, key=key, question=question))

    # ------------------------------------------------------------------ usage / cost APIs
    def _day_costs(
        self, protocols: tuple[str, ...], start: datetime, end: datetime
    ) -> dict[date, dict[str, int]]:
        """Paid synchronous calls of ``protocols`` in [start, end), summed per UTC day and model
        (minor units of each model's price list)."""
        days: dict[date, dict[str, int]] = {}
        for protocol, model, at, minor in self.sync_costs:
            if protocol in protocols and start <= at < end:
                per_model = days.setdefault(at.date(), {})
                per_model[model] = per_model.get(model, 0) + minor
        return days

    def _currency(self, model: str) -> str:
        prof = self.profiles.get(model)
        return prof.prices.currency if prof is not None else "USD"

    async def openai_costs(self, request: web.Request) -> web.Response:
        """``GET /openai/v1/organization/costs``: OpenAI's organization costs in its documented
        page of daily buckets, ``group_by=line_item`` (``"{model}, answers"``), the amount in
        major units as a JSON number with a lowercase currency."""
        q = request.query
        try:
            start = datetime.fromtimestamp(int(q["start_time"]), UTC)
            end = datetime.fromtimestamp(int(q.get("end_time") or 4102444800), UTC)
        except (KeyError, ValueError):
            status, body = error_body("openai_chat", "bad_request", "start_time is required")
            return _json(body, status)
        self._count("openai", "costs", 200)
        data = []
        openai = ("openai_chat", "openai_responses")
        for day, per_model in sorted(self._day_costs(openai, start, end).items()):
            t0 = datetime.combine(day, datetime.min.time(), UTC)
            data.append(
                {
                    "object": "bucket",
                    "start_time": int(t0.timestamp()),
                    "end_time": int(t0.timestamp()) + 86400,
                    "results": [
                        {
                            "object": "organization.costs.result",
                            "amount": {"value": minor / 100, "currency": self._currency(m).lower()},
                            "line_item": f"{m}, answers",
                            "project_id": None,
                        }
                        for m, minor in sorted(per_model.items())
                    ],
                }
            )
        return _json({"object": "page", "data": data, "has_more": False, "next_page": None})

    async def anthropic_cost_report(self, request: web.Request) -> web.Response:
        """``GET /anthropic/v1/organizations/cost_report``: Anthropic's cost report in its
        documented shape, daily buckets grouped by description, each ``amount`` a decimal string
        in the currency's lowest units."""
        q = request.query
        try:
            start = datetime.fromisoformat(q["starting_at"].replace("Z", "+00:00"))
            end_text = q.get("ending_at")
            end = (
                datetime.fromisoformat(end_text.replace("Z", "+00:00"))
                if end_text
                else datetime(2100, 1, 1, tzinfo=UTC)
            )
        except (KeyError, ValueError):
            status, body = error_body("anthropic", "bad_request", "starting_at is required")
            return _json(body, status)
        self._count("anthropic", "cost_report", 200)
        data = []
        for day, per_model in sorted(self._day_costs(("anthropic",), start, end).items()):
            t0 = datetime.combine(day, datetime.min.time(), UTC)
            data.append(
                {
                    "starting_at": _iso(t0),
                    "ending_at": _iso(t0 + timedelta(days=1)),
                    "results": [
                        {
                            "currency": self._currency(m),
                            "amount": f"{minor}.00",
                            "workspace_id": None,
                            "description": f"{m} answers",
                            "cost_type": "tokens",
                            "context_window": None,
                            "model": m,
                            "service_tier": "standard",
                            "token_type": None,
                        }
                        for m, minor in sorted(per_model.items())
                    ],
                }
            )
        return _json({"data": data, "has_more": False, "next_page": None})

    # ------------------------------------------------------------------ control
    async def control_profiles(self, request: web.Request) -> web.Response:
        platform = request.match_info["platform"]
        try:
            overrides = json.loads(await request.read() or b"{}")
            if not isinstance(overrides, dict):
                raise ValueError("the body must be a JSON object of profile keys")
            names = list(self.profiles) if platform == "*" else [platform]
            updated = {}
            for name in names:
                if name not in self.profiles:
                    return _error(404, "not_found", f"unknown platform {name!r}")
                updated[name] = self.profiles[name].with_overrides(overrides)
        except (ValueError, ProfileError) as exc:
            return _error(400, "invalid_request", str(exc))
        self.profiles.update(updated)
        return _json({name: p.as_dict() for name, p in updated.items()})

    async def control_get_profiles(self, request: web.Request) -> web.Response:
        return _json(
            {"seed": self.seed, "profiles": {n: p.as_dict() for n, p in self.profiles.items()}}
        )

    async def control_stats(self, request: web.Request) -> web.Response:
        include_keys = request.query.get("keys", "1") not in ("0", "false", "no")
        include_tasks = request.query.get("tasks", "0") not in ("0", "false", "no")
        return _json(self.state.stats(include_keys, request.query.get("platform"), include_tasks))

    async def control_reset(self, request: web.Request) -> web.Response:
        """Forget every task and counter and restore the start-up profiles."""
        self.state.reset()
        self.sync_costs.clear()
        if self.journal is not None:
            self.journal.reset()
        self.profiles = dict(self.initial)
        self.rng = random.Random(self.seed)
        for service in self.services:
            service.reset()
        return _json({"reset": True})

    async def health(self, request: web.Request) -> web.Response:
        # The pid says which simulator answered: a port freed by one that died can be taken by
        # another process before the supervisor's restart binds it.
        return _json({"ok": True, "platforms": sorted(self.profiles), "pid": os.getpid()})


STATE_KEY: web.AppKey[Simulator] = web.AppKey("sim")


def create_app(config: SimulatorConfig, state_file: Path | None = None) -> web.Application:
    sim = Simulator(config)
    if state_file is not None:
        sim.journal = Journal(state_file)
        sim.journal.replay(sim.state, sim.sync_costs)
    app = web.Application(client_max_size=1024**2)
    app[STATE_KEY] = sim
    sim.services = mount_services(app, config.seed, config.services, sim.journal)  # cloro, ...
    app.add_routes(
        [
            web.post("/v1/{platform}/tasks", sim.submit),
            web.get("/v1/{platform}/tasks", sim.lookup),
            web.get("/v1/{platform}/tasks/{task_id}", sim.poll),
            web.get("/v1/{platform}/tasks/{task_id}/result", sim.result),
            web.get("/v1/{platform}/tasks/{task_id}/screenshot", sim.screenshot),
            web.post("/v1/{platform}/tasks/{task_id}/cancel", sim.cancel),
            web.get("/v1/{platform}/statements/{day}", sim.statement),
            web.get("/v1/{platform}/prices", sim.prices),
            web.post("/openai/v1/chat/completions", sim.chat_completions),
            web.post("/openai/v1/responses", sim._sync_handler("openai_responses")),
            web.post("/perplexity/chat/completions", sim._sync_handler("perplexity")),
            web.post("/gemini/v1beta/models/{model_action}", sim._sync_handler("gemini")),
            web.post("/anthropic/v1/messages", sim._sync_handler("anthropic")),
            web.get("/openai/v1/organization/costs", sim.openai_costs),
            web.get("/anthropic/v1/organizations/cost_report", sim.anthropic_cost_report),
            web.post("/_control/profiles/{platform}", sim.control_profiles),
            web.get("/_control/profiles", sim.control_get_profiles),
            web.get("/_control/stats", sim.control_stats),
            web.post("/_control/reset", sim.control_reset),
            web.get("/_control/health", sim.health),
        ]
    )
    # The consumer chat web apps of the browser lane (/ui/<platform>/, issue #32).
    mount_web_apps(app, lambda: sim.profiles, sim.seed)
    return app


async def serve(
    config: SimulatorConfig,
    host: str = "127.0.0.1",
    port: int = 8765,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    state_file: Path | None = None,
) -> Simulator:
    """Run until cancelled or ``stop`` is set; returns the simulator (its counters, for a stop
    report). ``on_ready`` gets the base URL once the socket listens (port 0 picks a free port,
    which is how the test fixture avoids port races)."""
    app = create_app(config, state_file)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    if on_ready is not None:
        on_ready(f"http://{host}:{bound}")
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()
    return app[STATE_KEY]


def run(
    config: SimulatorConfig,
    host: str,
    port: int,
    on_ready: Callable[[str], None],
    state_file: Path | None = None,
) -> Simulator | None:
    """Blocking entry point for the CLI: uvloop when installed (about 1.5x the throughput).
    SIGTERM or SIGINT stops it; returns the simulator for the stop report."""
    try:
        import uvloop

        runner: Callable[[Awaitable[Simulator]], Simulator] = uvloop.run  # type: ignore[assignment]
    except ImportError:  # pragma: no cover - depends on the machine
        runner = asyncio.run  # type: ignore[assignment]

    async def until_signalled() -> Simulator:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(config, host, port, on_ready, stop, state_file)

    try:
        return runner(until_signalled())
    except KeyboardInterrupt:
        return None
