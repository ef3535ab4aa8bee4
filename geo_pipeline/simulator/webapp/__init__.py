"""The simulator's consumer chat web apps, one per platform profile at ``/ui/<platform>/``, for the
browser lane (issue #32) to run offline.

Each app has a login wall with a session cookie, a chat page whose script streams the platform's
own SSE frame shape (frames.py), a stop button while streaming, citation cards, a history sidebar
and desktop/mobile layouts (pages.py). Faults are set per platform at runtime with
``POST /ui/_control/faults/<platform>`` (WebFaults: captcha page, login expiry, changed layout,
truncated or slow stream, rate-limit page). What each account did is counted
(``GET /ui/_control/counts``): ``sends`` is every question that reached the completion endpoint
with a valid session -- a test judges "no further sends from a suspended account" from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from geo_pipeline.simulator.answers import generate_answer, is_chinese
from geo_pipeline.simulator.profiles import Profile
from geo_pipeline.simulator.webapp.frames import Turn, encode
from geo_pipeline.simulator.webapp.pages import (
    UIS,
    captcha_page,
    chat_page,
    login_page,
    rate_limited_page,
)

COOKIE = "sim_session"


class FaultError(ValueError):
    pass


@dataclass(frozen=True)
class WebFaults:
    """The faults of one platform's web app (all off by default).

    - ``captcha_after``: an account that has had this many answers sees the captcha page (and its
      sends are refused with 403) -- the risk-control interstitial that froze accounts in the
      research (section 3, Yuanbao: three accounts frozen); ``captcha_accounts`` at once. Both
      set: only the listed accounts, after that many answers (risk control flags one account,
      not the app: research section 3, Yuanbao's accounts were frozen one by one). Once shown,
      the page stays for that account (a frozen account does not thaw by itself, inf.).
    - ``expire_after``: the account's session expires once after this many answers: its cookie
      no longer opens the chat (the login wall with "登录": LLM Sentry and geo_client2's
      ``CheckLoginStatus``, research section 3) and the completion endpoint refuses it (401;
      Yuanbao's error 23000 "login expired", research section 3); ``expire_accounts`` at once.
      A fresh login (a new session cookie) works again.
    - ``layout``: ``changed`` -- the composer was redesigned, no known selector matches (the
      collectors find the input and toggles by selector and text, LLM Sentry and geo_client2 in
      research section 3; a redesign breaks them: geo_client2 keeps a DOM tier and a page
      refresh as fallbacks for exactly that, inf.). The login wall and the history stay.
    - ``truncate``: the stream closes about half way, before the app's end marker.
    - ``chunk_delay_s``: a pause before each frame (a slow stream).
    - ``rate_limited``: the page says "请求过于频繁" (HTTP 429), with ``Retry-After:
      rate_limited_retry_s`` when that is set (HTTP's own hint, RFC 9110 section 10.2.3; what
      the real apps send on their rate-limit pages is not documented in the research: inf.).
    """

    captcha_after: int | None = None
    captcha_accounts: tuple[str, ...] = ()
    expire_after: int | None = None
    expire_accounts: tuple[str, ...] = ()
    layout: str = "default"
    truncate: bool = False
    chunk_delay_s: float = 0.0
    rate_limited: bool = False
    rate_limited_retry_s: int | None = 60

    def with_overrides(self, platform: str, data: Mapping[str, Any]) -> WebFaults:
        known = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in data.items():
            where = f"faults.{platform}.{key}"
            if key not in known:
                raise FaultError(f"{where}: unknown fault; allowed: {sorted(known)}")
            if key in ("captcha_after", "expire_after", "rate_limited_retry_s"):
                if value is not None and (not isinstance(value, int) or value < 0):
                    raise FaultError(f"{where}: {value!r} is not null or an integer >= 0")
            elif key in ("captcha_accounts", "expire_accounts"):
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise FaultError(f"{where}: {value!r} is not a list of account ids")
                value = tuple(value)
            elif key == "layout":
                if value not in ("default", "changed"):
                    raise FaultError(f"{where}: {value!r}; allowed: 'default' or 'changed'")
            elif key in ("truncate", "rate_limited"):
                if not isinstance(value, bool):
                    raise FaultError(f"{where}: {value!r} is not a boolean")
            elif key == "chunk_delay_s":
                if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                    raise FaultError(f"{where}: {value!r} is not a number >= 0")
                value = float(value)
            changes[key] = value
        return dataclasses.replace(self, **changes)


@dataclass
class WebState:
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)  # token -> (platform, acct)
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    conversations: dict[tuple[str, str], list[dict[str, Any]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    faults: dict[str, WebFaults] = field(default_factory=dict)
    expired_once: set[tuple[str, str]] = field(default_factory=set)
    # Streams being answered per account now: the most ever seen at once is counted as
    # ``max_concurrent`` (one account = one conversation at a time, judged here).
    streaming: Counter[tuple[str, str]] = field(default_factory=Counter)

    def reset(self) -> None:
        self.streaming.clear()
        self.sessions.clear()
        self.counts.clear()
        self.conversations.clear()
        self.faults.clear()
        self.expired_once.clear()


class WebApp:
    def __init__(self, profiles: Callable[[], Mapping[str, Profile]], seed: int):
        self._profiles = profiles
        self.seed = seed
        self.state = WebState()

    # ------------------------------------------------------------------ helpers
    def _platform(self, request: web.Request) -> str:
        platform = request.match_info["platform"]
        if platform not in UIS or platform not in self._profiles():
            raise web.HTTPNotFound(text=f"no web app for platform {platform!r}")
        return platform

    def _faults(self, platform: str) -> WebFaults:
        return self.state.faults.get(platform, WebFaults())

    def _account(self, request: web.Request, platform: str) -> str | None:
        """The logged-in account of this request's session cookie, or None (login wall).
        A login-expiry fault invalidates the account's sessions here, once."""
        hit = self.state.sessions.get(request.cookies.get(COOKIE, ""))
        if hit is None or hit[0] != platform:
            return None
        account = hit[1]
        faults = self._faults(platform)
        answered = self.state.counts[(platform, account, "answered")]
        due = account in faults.expire_accounts or (
            faults.expire_after is not None and answered >= faults.expire_after
        )
        if due and (platform, account) not in self.state.expired_once:
            self.state.expired_once.add((platform, account))
            for token, who in list(self.state.sessions.items()):
                if who == (platform, account):
                    del self.state.sessions[token]
            self.state.counts[(platform, account, "expired")] += 1
            return None
        return account

    def _captcha(self, platform: str, account: str) -> bool:
        faults = self._faults(platform)
        answered = self.state.counts[(platform, account, "answered")]
        if faults.captcha_accounts and faults.captcha_after is not None:
            return account in faults.captcha_accounts and answered >= faults.captcha_after
        return account in faults.captcha_accounts or (
            faults.captcha_after is not None and answered >= faults.captcha_after
        )

    @staticmethod
    def _html(text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")

    # ------------------------------------------------------------------ pages
    async def page(self, request: web.Request) -> web.Response:
        platform = self._platform(request)
        ui = UIS[platform]
        account = self._account(request, platform)
        if account is None:
            self.state.counts[(platform, "-", "login_wall")] += 1
            return self._html(login_page(platform, ui))
        if self._captcha(platform, account):
            self.state.counts[(platform, account, "captcha_shown")] += 1
            return self._html(captcha_page(ui))
        faults = self._faults(platform)
        if faults.rate_limited:
            self.state.counts[(platform, account, "rate_limited_shown")] += 1
            resp = self._html(rate_limited_page(ui), 429)
            if faults.rate_limited_retry_s is not None:
                resp.headers["Retry-After"] = str(faults.rate_limited_retry_s)
            return resp
        self.state.counts[(platform, account, "page_loads")] += 1
        conversation = None
        cid = request.match_info.get("cid")
        if cid:
            found = [c for c in self.state.conversations[(platform, account)] if c["id"] == cid]
            if not found:
                raise web.HTTPNotFound(text="no such conversation")
            conversation = found[0]
        return self._html(
            chat_page(
                platform, ui, account, changed=faults.layout == "changed", conversation=conversation
            )
        )

    async def login_form(self, request: web.Request) -> web.Response:
        platform = self._platform(request)
        return self._html(login_page(platform, UIS[platform]))

    async def login(self, request: web.Request) -> web.Response:
        """A person logs in (the simulator takes any non-empty account id, no password)."""
        platform = self._platform(request)
        form = await request.post()
        account = str(form.get("account") or "").strip()
        if not account:
            return self._html(login_page(platform, UIS[platform]), 400)
        token = secrets.token_urlsafe(18)
        self.state.sessions[token] = (platform, account)
        self.state.counts[(platform, account, "logins")] += 1
        resp = web.HTTPFound(f"/ui/{platform}/")
        # A persistent cookie (30 days), as the real apps set: a browser profile keeps it.
        resp.set_cookie(
            COOKIE,
            token,
            path=f"/ui/{platform}/",
            httponly=True,
            samesite="Lax",
            max_age=30 * 86400,
        )
        raise resp

    async def conversations(self, request: web.Request) -> web.Response:
        platform = self._platform(request)
        account = self._account(request, platform)
        if account is None:
            return web.json_response({"code": "login_required"}, status=401)
        items = [
            {"id": c["id"], "title": c["question"], "created_at": c["created_at"]}
            for c in reversed(self.state.conversations[(platform, account)])
        ]
        return web.json_response(items)

    # ------------------------------------------------------------------ the stream
    async def stream(self, request: web.Request) -> web.StreamResponse:
        platform = self._platform(request)
        account = self._account(request, platform)
        if account is None:
            self.state.counts[(platform, "-", "refused_login")] += 1
            return web.json_response({"code": "login_required"}, status=401)
        if self._captcha(platform, account):
            self.state.counts[(platform, account, "refused_captcha")] += 1
            return web.json_response({"code": "risk_control"}, status=403)
        try:
            body = json.loads(await request.read() or b"{}")
            question = str(body["prompt"])
            search = bool(body.get("search_enabled"))
            cid = str(body.get("conversation_id") or request.match_info.get("cid") or "")
        except (ValueError, KeyError, TypeError):
            return web.json_response({"code": "bad_request"}, status=400)
        n = self.state.counts[(platform, account, "sends")] + 1
        self.state.counts[(platform, account, "sends")] += 1
        profile = self._profiles()[platform]
        if not search:
            profile = dataclasses.replace(profile, citations_range=(0, 0))
        gen = generate_answer(self.seed, f"web:{platform}:{account}:{n}", question, profile)
        zh = is_chinese(question, profile.language)
        queries = (question, question + (" 推荐" if zh else " reviews")) if search else ()
        turn = Turn(2 * n, question, gen.answer, gen.citations if search else (), queries, search)
        faults = self._faults(platform)
        # The conversation exists once the question is taken, before any answer: Kimi creates
        # the chat (POST /api/chat) before it streams (research section 3); DeepSeek's web app
        # creates its chat session first too (inf.). A client that goes away mid-answer leaves
        # the conversation in the history, with what the server generated (inf.).
        self.state.conversations[(platform, account)].append(
            {
                "id": cid or f"c{n}",
                "question": question,
                "answer": gen.answer,
                "created_at": datetime.now(UTC).isoformat(),
            }
        )
        who = (platform, account)
        self.state.streaming[who] += 1
        peak = (platform, account, "max_concurrent")
        self.state.counts[peak] = max(self.state.counts[peak], self.state.streaming[who])
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await resp.prepare(request)
            for chunk in encode(platform, turn, cut=faults.truncate):
                if faults.chunk_delay_s:
                    await asyncio.sleep(faults.chunk_delay_s)
                await resp.write(chunk)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.state.counts[(platform, account, "aborted")] += 1
            raise
        finally:
            self.state.streaming[who] -= 1
        self.state.counts[(platform, account, "answered")] += 1
        return resp

    # ------------------------------------------------------------------ control
    async def control_counts(self, request: web.Request) -> web.Response:
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (platform, account, kind), value in sorted(self.state.counts.items()):
            out.setdefault(platform, {}).setdefault(account, {})[kind] = value
        return web.json_response(out)

    async def control_faults(self, request: web.Request) -> web.Response:
        platform = request.match_info["platform"]
        if platform not in UIS:
            return web.json_response(
                {"error": f"no web app for {platform!r}; known: {sorted(UIS)}"}, status=404
            )
        try:
            data = json.loads(await request.read() or b"{}")
            if not isinstance(data, dict):
                raise FaultError(f"faults.{platform}: the body must be a JSON object")
            self.state.faults[platform] = self._faults(platform).with_overrides(platform, data)
        except (ValueError, FaultError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(dataclasses.asdict(self.state.faults[platform]))

    async def control_reset(self, request: web.Request) -> web.Response:
        self.state.reset()
        return web.json_response({"reset": True})


def mount(app: web.Application, profiles: Callable[[], Mapping[str, Profile]], seed: int) -> WebApp:
    """Add the web apps' routes to the simulator's application."""
    webapp = WebApp(profiles, seed)
    app.add_routes(
        [
            web.get("/ui/_control/counts", webapp.control_counts),
            web.post("/ui/_control/faults/{platform}", webapp.control_faults),
            web.post("/ui/_control/reset", webapp.control_reset),
            web.get("/ui/{platform}/", webapp.page),
            web.get("/ui/{platform}/c/{cid}", webapp.page),
            web.get("/ui/{platform}/login", webapp.login_form),
            web.post("/ui/{platform}/login", webapp.login),
            web.get("/ui/{platform}/api/conversations", webapp.conversations),
            web.post("/ui/{platform:deepseek}/api/v0/chat/completion", webapp.stream),
            web.post("/ui/{platform:doubao}/samantha/chat/completion", webapp.stream),
            web.post("/ui/{platform:kimi}/api/chat/{cid}/completion/stream", webapp.stream),
        ]
    )
    return webapp
