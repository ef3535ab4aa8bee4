"""The ``browser`` protocol (issue #32): Playwright driving Chromium (Debian's, by path) like a
person, for consumer chat apps no API or scraping service covers.

One persistent browser context per account (profile directory per platform and account), with the
plan's device emulated (viewport, device pixel ratio, user agent, touch) and the region's locale,
timezone, geolocation and optional proxy. ``submit`` leases an account, opens a fresh
conversation, sets the search mode only if it differs, types the question, sends it, captures the
answer's SSE stream from the network (CDP ``Network.getResponseBody`` once the response finished
loading -- page-side capture truncated large citation packets, research section 3) with its
request and response headers (the exchange, archived as WARC request/response records), waits for
completion (stream closed, no stop button, text stable across two polls), then takes a full-page
screenshot at native resolution and the page HTML. The DOM is the fallback when no stream was
captured. The capture is held in memory under the upstream id (``Acceptance.inline_result`` holds
the raw stream); ``fetch_evidence`` parses it with the platform's frame parser.

Failure classes (R13): login wall -> ``NeedsLogin`` (account ``needs_login``, nothing charged);
captcha or risk page -> ``AccountSuspended`` (account ``suspended``); the question cannot be sent
(a selector no longer matches once the page had ``page_ready_s`` to render) -> ``PageChanged``
(the account records it, an alert per platform); anything failing after the send click ->
``AcceptanceUnknown`` (R12); an unparseable stream -> ``Unparseable`` with the raw bytes (review,
never re-ask).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
    Attachment,
    CancelResult,
    Citation,
    ConnectorError,
    Evidence,
    FeeStatement,
    HttpExchange,
    NoStatementApi,
    NotFound,
    PollResult,
    SubmitRequest,
    TransientError,
    check_request,
)
from geo_pipeline.connectors.browser import deepseek, doubao, kimi
from geo_pipeline.connectors.browser.accounts import (
    AccountLease,
    AccountSource,
    LocalAccounts,
    Outcome,
    Pacing,
    QuietHours,
)
from geo_pipeline.connectors.browser.spec import (
    AccountSuspended,
    DeviceProfile,
    InQuietHours,
    InvalidCapability,
    NeedsLogin,
    NoAccountReady,
    PageChanged,
    PageRateLimited,
    PlatformSpec,
    RegionProfile,
    device_profile,
    region_profile,
)
from geo_pipeline.connectors.parsers import ParsedAnswer
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.settings import settings, variable

log = logging.getLogger("geo_pipeline.connectors.browser")

SPECS: dict[str, PlatformSpec] = {s.platform: s for s in (deepseek.SPEC, doubao.SPEC, kimi.SPEC)}
DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-blink-features=AutomationControlled")


def chromium_path(options: Any = None) -> str:
    """The Chromium binary: ``options.chromium``, else ``GEO_CHROMIUM``, else Debian's path."""
    opt = (options or {}).get("chromium") if options is not None else None
    return str(opt or variable("GEO_CHROMIUM") or DEFAULT_CHROMIUM)


def profiles_root(options: Any = None) -> Path:
    """Where the per-account browser profiles live: ``options.profiles_dir``, else
    ``GEO_BROWSER_PROFILES``, else ``~/.local/share/geo_pipeline/browser-profiles``."""
    opt = (options or {}).get("profiles_dir") if options is not None else None
    root = opt or variable("GEO_BROWSER_PROFILES")
    return Path(root) if root else Path.home() / ".local/share/geo_pipeline/browser-profiles"


@dataclass
class Capture:
    """One answer as the browser saw it."""

    account_id: str
    raw: bytes  # the SSE body exactly as received (b"" when only the DOM was read)
    raw_mime: str
    html: bytes
    png: bytes | None
    dom_text: str
    dom_citations: tuple[Citation, ...]
    captured_at: datetime
    meta: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    exchange: HttpExchange | None = None  # the stream's request and response (raw is its body)


@dataclass
class _Stream:
    url: str
    status: int
    mime: str
    charset: str | None = None
    finished: bool = False
    failed: str | None = None
    reason: str = ""
    headers: tuple[tuple[str, str], ...] = ()


def _header_pairs(headers: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """CDP's header object as pairs; a repeated header comes joined by newlines."""
    return tuple((str(k), v) for k, vs in headers.items() for v in str(vs).split("\n"))


def _post_body(request: dict[str, Any]) -> bytes:
    """The request's body as CDP reports it (``postDataEntries`` bytes, else ``postData``)."""
    entries = request.get("postDataEntries") or []
    if entries:
        return b"".join(base64.b64decode(e.get("bytes") or "") for e in entries)
    return str(request.get("postData") or "").encode()


def stream_exchange(request: dict[str, Any] | None, stream: _Stream) -> HttpExchange | None:
    """The stream's HTTP exchange as the browser sent and received it (the evidence layer
    redacts credential headers before a byte is archived, D2); None without its request."""
    if request is None:
        return None
    return HttpExchange(
        method=str(request.get("method") or "GET"), url=stream.url,
        request_headers=_header_pairs(request.get("headers") or {}),
        request_body=_post_body(request), status=stream.status, reason=stream.reason,
        response_headers=stream.headers,
    )  # fmt: skip


@dataclass
class _Live:
    key: tuple[Any, ...]
    context: Any  # playwright BrowserContext


def body_bytes(text: str, charset: str | None) -> bytes:
    """The bytes of a text body CDP returned decoded. With a declared charset, encoded back
    with it. Without one Chromium decoded it as windows-1252 (bytes 0x80-0x9f it cannot map
    stay code points U+0080-U+009F), so that is reversed -- which fails on any character above
    U+00FF that windows-1252 lacks, i.e. a body that was decoded as UTF-8 after all."""
    if charset:
        try:
            return text.encode(charset)
        except (LookupError, UnicodeEncodeError):
            pass
    out = bytearray()
    for ch in text:
        code = ord(ch)
        if (code < 0x100 and not 0x80 <= code <= 0x9F) or code in _C1_UNMAPPED:
            out.append(code)
            continue
        try:
            out += ch.encode("cp1252")
        except UnicodeEncodeError:
            return text.encode("utf-8")
    return bytes(out)


# A rate-limit page without a usable Retry-After: the account cools down this long.
RATE_LIMIT_DEFAULT_S = 600.0


def retry_after_s(response: Any) -> float:
    """The page's own retry hint: its ``Retry-After`` header in seconds or as an HTTP date
    (RFC 9110 section 10.2.3), else ``RATE_LIMIT_DEFAULT_S``."""
    value = None
    if response is not None:
        try:
            value = (response.headers or {}).get("retry-after")
        except Exception:
            value = None
    if value:
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            from email.utils import parsedate_to_datetime

            return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
        except (TypeError, ValueError):
            pass
    return RATE_LIMIT_DEFAULT_S


def proxy_settings(url: str) -> dict[str, str]:
    """Playwright's proxy of a region from its variable's URL. Chromium's proxy server takes no
    credentials in the URL (``http://user:pass@host:port`` would be refused by the proxy with
    407), so a user and password in it are passed apart, percent-decoded; never logged (D2)."""
    from urllib.parse import unquote

    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        raise InvalidCapability(
            "a region's proxy must be a URL like http://host:port or socks5://host:port "
            "(user and password may be in it: http://user:password@host:port)"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    out = {"server": f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")}
    if parts.username:
        out["username"] = unquote(parts.username)
        out["password"] = unquote(parts.password or "")
    return out


# The five bytes windows-1252 leaves undefined; Chromium keeps them as C1 code points.
_C1_UNMAPPED = frozenset((0x81, 0x8D, 0x8F, 0x90, 0x9D))


class BrowserConnector:
    """The connector of one ``protocol: browser`` registry entry."""

    def __init__(
        self,
        entry: PlatformEntry,
        accounts: AccountSource | None = None,
        *,
        spec: PlatformSpec | None = None,
    ):
        self.platform = entry.platform
        self.entry = entry
        opts = entry.options
        app = str(opts.get("app") or entry.platform)
        if spec is None and app not in SPECS:
            raise ValueError(
                f"platforms.{entry.platform}.options.app: {app!r} has no browser module; "
                f"known: {sorted(SPECS)}"
            )
        self.spec = spec or SPECS[app]
        self.base = entry.base_url.rstrip("/")
        self.page_url = self.base + str(opts.get("page_path") or self.spec.page_path)
        self.chromium = chromium_path(opts)
        self.headless = bool(opts.get("headless", True))
        self.answer_timeout_s = float(opts.get("answer_timeout_s", 120.0))
        self.stable_poll_s = float(opts.get("stable_poll_s", 2.0))
        # A single-page app renders its composer after the document loads: this long at most
        # before a missing composer means the page changed.
        self.page_ready_s = float(opts.get("page_ready_s", 10.0))
        self.type_delay_ms = float(opts.get("type_delay_ms", 40.0))
        self.max_contexts = int(opts.get("max_contexts", 4))
        self.accounts: AccountSource = accounts or LocalAccounts(
            {entry.platform: [str(a) for a in opts.get("accounts") or []]},
            profiles_root(opts),
            Pacing(float(opts.get("min_gap_s", 5.0)), float(opts.get("jitter_s", 5.0))),
            int(opts.get("daily_budget", 50)),
        )
        self._caps = dataclasses.replace(
            entry.capabilities,
            screenshot=True,
            idempotency_keys=False,  # a re-send is a second question in the account's history
            # An unknown outcome is looked up in the sending account's history (``lookup``).
            lookup_by_key=True,
            cancellable=False,
            asynchronous=False,
        )
        env = settings()
        self.quiet = QuietHours.parse(
            opts.get("quiet_hours", env.browser_quiet_hours),
            str(opts.get("quiet_tz") or env.browser_quiet_tz),
            where=f"platforms.{entry.platform}.options.quiet_hours",
        )
        # Called while the app is answering, nothing captured yet (the worker's crash point).
        self.answering: Callable[[], None] | None = None
        self._pw: Any = None
        self._pw_cm: Any = None
        self._contexts: OrderedDict[str, _Live] = OrderedDict()
        self._held: OrderedDict[str, Capture] = OrderedDict()
        self._held_cap = int(opts.get("inline_cache", 200))
        self._start_lock = asyncio.Lock()

    def capabilities(self) -> Capabilities:
        return self._caps

    # ------------------------------------------------------------------ browser lifecycle
    async def _playwright(self) -> Any:
        async with self._start_lock:
            if self._pw is None:
                from playwright.async_api import async_playwright

                self._pw_cm = async_playwright()
                self._pw = await self._pw_cm.start()
        return self._pw

    async def _context(self, lease: AccountLease, device: DeviceProfile, region: RegionProfile):  # type: ignore[no-untyped-def]
        key = (device.key(), region.key())
        live = self._contexts.get(lease.account_id)
        if live is not None and live.key == key:
            self._contexts.move_to_end(lease.account_id)
            return live.context
        if live is not None:  # another device or region: relaunch the same profile
            await self._close_context(lease.account_id)
        while len(self._contexts) >= self.max_contexts:
            await self._close_context(next(iter(self._contexts)))
        pw = await self._playwright()
        lease.profile_dir.mkdir(parents=True, exist_ok=True)
        # A crashed browser leaves its singleton locks behind; the account lease guarantees no
        # other browser uses this profile now, so they are stale (geo_client2 clears them too).
        for name in ("SingletonLock", "SingletonCookie", "SingletonSocket"):
            (lease.profile_dir / name).unlink(missing_ok=True)
        proxy = None
        if region.proxy_env:
            server = variable(region.proxy_env)
            if not server:
                raise InvalidCapability(
                    f"{self.platform}: region {region.name!r} needs a proxy: set {region.proxy_env}"
                )
            proxy = proxy_settings(server)
        context = await pw.chromium.launch_persistent_context(
            str(lease.profile_dir),
            executable_path=self.chromium,
            headless=self.headless,
            args=list(CHROMIUM_ARGS),
            viewport={"width": device.width, "height": device.height},
            device_scale_factor=device.scale,
            is_mobile=device.mobile,
            has_touch=device.touch,
            user_agent=device.user_agent,
            locale=region.locale,
            timezone_id=region.timezone,
            geolocation={"latitude": region.latitude, "longitude": region.longitude},
            permissions=["geolocation"],
            proxy=proxy,
        )
        self._contexts[lease.account_id] = _Live(key, context)
        return context

    async def _close_context(self, account_id: str) -> None:
        live = self._contexts.pop(account_id, None)
        if live is not None:
            try:
                await live.context.close()
            except Exception as exc:  # a crashed browser: nothing left to close
                log.warning(
                    "%s: closing the browser of %s failed: %s", self.platform, account_id, exc
                )

    async def aclose(self) -> None:
        for account_id in list(self._contexts):
            await self._close_context(account_id)
        if self._pw_cm is not None:
            await self._pw_cm.__aexit__(None, None, None)
            self._pw = self._pw_cm = None

    # ------------------------------------------------------------------ submit = capture
    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self._caps, request)
        device = device_profile(request.device, self.entry.options)
        region = region_profile(request.region, self.entry.options)
        quiet_s = self.quiet.wait_s(datetime.now(UTC)) if self.quiet else 0.0
        if quiet_s:
            raise InQuietHours(
                f"{self.platform}: quiet hours; no account sends for {quiet_s:.0f} s",
                retry_after_s=quiet_s,
            )
        lease = await self.accounts.acquire(self.platform)
        outcome: Outcome = "not_sent"
        cool_s: float | None = None
        detail: str | None = None
        keep = asyncio.create_task(self._keep(lease))
        try:
            capture, outcome = await self._capture(lease, request, device, region)
        except PageRateLimited as exc:
            outcome, cool_s = "rate_limited", exc.retry_after_s
            raise
        except NeedsLogin:
            outcome = "needs_login"
            raise
        except AccountSuspended:
            outcome = "suspended"
            raise
        except PageChanged as exc:
            outcome, detail = "page_changed", str(exc)
            raise
        except AcceptanceUnknown:
            outcome = "sent"
            raise
        finally:
            keep.cancel()
            if outcome in ("needs_login", "suspended"):
                # The account leaves the pool until a person acts: its browser is closed, so
                # the profile is free for `accounts login` and the next lease reads the fresh
                # login from disk (a running browser keeps its own cookies in memory).
                await self._close_context(lease.account_id)
            await self.accounts.release(lease, outcome, cool_s, detail)
        upstream_id = f"{self.platform}:{lease.account_id}:{request.idempotency_key}"
        self._hold(upstream_id, capture)
        return Acceptance(upstream_id, capture.captured_at, inline_result=capture.raw)

    def _hold(self, upstream_id: str, capture: Capture) -> None:
        self._held[upstream_id] = capture
        self._held.move_to_end(upstream_id)
        while len(self._held) > self._held_cap:
            self._held.popitem(last=False)

    async def _keep(self, lease: AccountLease) -> None:
        """Renew the account's lease while a capture runs (a third of the lease at a time), so
        a short lease is safe for a slow answer and a dead worker's lease still runs out."""
        lease_s = float(getattr(self.accounts, "lease_s", 0.0) or 0.0)
        if lease_s <= 0:
            return
        while True:
            await asyncio.sleep(lease_s / 3)
            try:
                if not await self.accounts.renew(lease):
                    log.warning(
                        "%s: the lease of account %s was lost during a capture",
                        self.platform,
                        lease.account_id,
                    )
                    return
            except Exception as exc:  # the database away: the next renewal tries again
                log.warning("%s: renewing account %s: %s", self.platform, lease.account_id, exc)

    async def _present(self, page: Any, selectors: tuple[str, ...]) -> bool:
        for selector in selectors:
            if await page.locator(selector).count():
                return True
        return False

    async def _classify_page(self, page: Any, lease: AccountLease, response: Any = None) -> None:
        """Why the question cannot be asked on this page, as the failure class (R13)."""
        spec = self.spec
        who = f"{self.platform} account {lease.account_id}"
        if await self._present(page, spec.captcha_markers):
            raise AccountSuspended(f"{who}: a captcha / risk-control page; account suspended")
        if await self._present(page, spec.login_markers):
            raise NeedsLogin(f"{who}: the login wall; a person must log in again")
        if await self._present(page, spec.rate_limit_markers):
            hint = retry_after_s(response)
            raise PageRateLimited(
                f"{who}: the page says too many requests; the account cools down for "
                f"{hint:g} s ({'its Retry-After' if hint != RATE_LIMIT_DEFAULT_S else 'no hint'})",
                retry_after_s=hint,
            )

    async def _capture(
        self,
        lease: AccountLease,
        request: SubmitRequest,
        device: DeviceProfile,
        region: RegionProfile,
    ) -> tuple[Capture, Outcome]:
        spec = self.spec
        who = f"{self.platform} account {lease.account_id}"
        context = await self._context(lease, device, region)
        page = context.pages[0] if context.pages else await context.new_page()
        cdp = await context.new_cdp_session(page)
        streams: dict[str, _Stream] = {}
        sent: dict[str, dict[str, Any]] = {}  # the stream requests, by request id

        def on_request(params: dict[str, Any]) -> None:
            req = params.get("request") or {}
            if spec.stream_url.search(urlsplit(str(req.get("url") or "")).path):
                sent[str(params.get("requestId") or "")] = req

        def on_response(params: dict[str, Any]) -> None:
            resp = params.get("response") or {}
            url = str(resp.get("url") or "")
            if spec.stream_url.search(urlsplit(url).path):
                headers = {str(k).lower(): str(v) for k, v in (resp.get("headers") or {}).items()}
                ctype = headers.get("content-type", "")
                charset = (
                    ctype.split("charset=", 1)[1].split(";")[0].strip()
                    if "charset=" in ctype
                    else None
                )
                streams[params["requestId"]] = _Stream(
                    url, int(resp.get("status") or 0), str(resp.get("mimeType") or ""), charset,
                    reason=str(resp.get("statusText") or ""),
                    headers=_header_pairs(resp.get("headers") or {}),
                )  # fmt: skip

        def on_finished(params: dict[str, Any]) -> None:
            s = streams.get(params.get("requestId", ""))
            if s is not None:
                s.finished = True

        def on_failed(params: dict[str, Any]) -> None:
            s = streams.get(params.get("requestId", ""))
            if s is not None:
                s.failed = str(params.get("errorText") or "failed")

        cdp.on("Network.requestWillBeSent", on_request)
        cdp.on("Network.responseReceived", on_response)
        cdp.on("Network.loadingFinished", on_finished)
        cdp.on("Network.loadingFailed", on_failed)
        await cdp.send(
            "Network.enable",
            {"maxTotalBufferSize": 64 * 1024**2, "maxResourceBufferSize": 32 * 1024**2},
        )
        try:
            # ---------------------------------------------------------- before the send
            try:
                loaded = await page.goto(self.page_url, wait_until="domcontentloaded")
            except Exception as exc:
                raise TransientError(f"{who}: the page did not load: {exc}") from exc
            await self._classify_page(page, lease, loaded)
            box = page.locator(spec.input)
            send = page.locator(spec.send)
            if not await self._rendered(page, box, send):
                await self._classify_page(page, lease)  # a wall drawn by the page's script
                raise PageChanged(
                    f"{who}: the page layout changed: no chat input ({spec.input}) or send "
                    f"button ({spec.send}) after {self.page_ready_s:g} s; nothing was sent"
                )
            await self._set_search(page, request.mode == "web_search", who)
            await box.first.click()
            await page.keyboard.type(request.question, delay=self.type_delay_ms)
            # The send journal, under the lease, before the click (R12): after a crash the next
            # worker knows which account may have asked and looks in its history.
            if not await self.accounts.note_send(
                lease, request.idempotency_key, request.question, device.name, region.name
            ):
                raise NoAccountReady(f"{who}: the account's lease was lost before the send")
            await send.first.click()
            sent_at = datetime.now(UTC)
        except ConnectorError:
            raise
        except Exception as exc:
            raise TransientError(f"{who}: before the send: {exc}") from exc
        # ---------------------------------------------------------- after the send (R12)
        try:
            rid, stream = await self._await_stream(streams, who)
            if stream is not None and stream.status in (401, 403):
                await page.wait_for_load_state("domcontentloaded")
                await self._classify_page(page, lease)
                raise (NeedsLogin if stream.status == 401 else AccountSuspended)(
                    f"{who}: the send was refused (HTTP {stream.status})"
                )
            raw = b""
            exchange = None
            warnings: list[str] = []
            if rid is not None and stream is not None and stream.failed is None:
                body = await cdp.send("Network.getResponseBody", {"requestId": rid})
                raw = (
                    base64.b64decode(body["body"])
                    if body.get("base64Encoded")
                    else body_bytes(str(body["body"]), stream.charset)
                )
                exchange = stream_exchange(sent.get(rid), stream) if raw else None
            elif stream is not None and stream.failed:
                warnings.append(f"STREAM_FAILED: {stream.failed}"[:200])
            if not raw:
                warnings.append("DOM_FALLBACK")
            dom_text = await self._await_stable(page)
            dom_citations = await self._dom_citations(page)
            png = await page.screenshot(full_page=True, type="png")
            html = (await page.content()).encode()
            # The address the page was at when captured (after redirects and the app's own
            # navigation): the base its links resolve against, where the archive puts it.
            page_url = str(page.url or "") or self.page_url
        except ConnectorError:
            raise
        except Exception as exc:
            raise AcceptanceUnknown(
                f"{who}: failed after the send click ({exc}); look it up in the account's "
                "history before any re-send"
            ) from exc
        finally:
            try:
                await cdp.detach()
            except Exception:
                pass
        meta = {
            "account": lease.account_id,
            "device": device.name,
            "viewport": f"{device.width}x{device.height}",
            "device_scale_factor": f"{device.scale:g}",
            "user_agent": device.user_agent,
            "mobile": str(device.mobile).lower(),
            "region": region.name,
            "locale": region.locale,
            "timezone": region.timezone,
            "geolocation": f"{region.latitude},{region.longitude}",
            "proxy": "yes" if region.proxy_env else "no",
            "sent_at": sent_at.isoformat(),
            "page_url": page_url,
        }
        capture = Capture(
            account_id=lease.account_id,
            raw=raw,
            raw_mime="text/event-stream" if raw else "text/html",
            html=html,
            png=png,
            dom_text=dom_text,
            dom_citations=dom_citations,
            captured_at=datetime.now(UTC),
            meta=meta,
            warnings=tuple(warnings),
            exchange=exchange,
        )
        return capture, "sent"

    async def _rendered(self, page: Any, box: Any, send: Any) -> bool:
        """The composer and its send button, once the page's script has drawn them (up to
        ``page_ready_s``); False: they are not there, the layout changed."""
        try:
            await box.first.wait_for(state="attached", timeout=self.page_ready_s * 1000)
            await send.first.wait_for(state="attached", timeout=self.page_ready_s * 1000)
        except Exception:
            return bool(await box.count() and await send.count())
        return True

    async def _set_search(self, page: Any, want: bool, who: str) -> None:
        """The search toggle, found by role and text, clicked only when its state differs."""
        toggle = page.locator(self.spec.search_toggle)
        if not await toggle.count():
            if want:
                raise PageChanged(
                    f"{who}: the page layout changed: no search toggle "
                    f"({self.spec.search_toggle}); nothing was sent"
                )
            return
        on = (await toggle.first.get_attribute("aria-pressed")) == "true"
        if on != want:
            await toggle.first.click()

    async def _await_stream(
        self, streams: dict[str, _Stream], who: str
    ) -> tuple[str | None, _Stream | None]:
        """The answer's stream once it finished loading (or failed). None when no stream
        request was seen in time (the DOM is read instead)."""
        deadline = time.monotonic() + self.answer_timeout_s
        while time.monotonic() < deadline:
            if streams and self.answering is not None:  # the app took the question
                self.answering()
            for rid, s in streams.items():
                if s.finished or s.failed or s.status in (401, 403):
                    if s.status in (401, 403) and not (s.finished or s.failed):
                        await asyncio.sleep(0.05)
                    return rid, s
            await asyncio.sleep(0.05)
        return None, None

    async def _await_stable(self, page: Any) -> str:
        """Completion: no stop button and the answer text unchanged across two polls
        (LLM Sentry's rule, research section 3)."""
        answer = page.locator(self.spec.answer)
        stop = page.locator(self.spec.stop)
        deadline = time.monotonic() + self.answer_timeout_s
        last: str | None = None
        while time.monotonic() < deadline:
            text = await answer.first.inner_text() if await answer.count() else ""
            if not await stop.count() and text == last:
                return text
            last = text
            await asyncio.sleep(self.stable_poll_s)
        raise TransientError(f"{self.platform}: the answer did not settle in time")

    async def _dom_citations(self, page: Any) -> tuple[Citation, ...]:
        """The citation cards as rendered, the app's own domains dropped (LLM Sentry's
        fallback)."""
        out: list[Citation] = []
        links = page.locator(self.spec.citation_links)
        for i in range(await links.count()):
            link = links.nth(i)
            href = await link.get_attribute("href") or ""
            host = urlsplit(href).hostname or ""
            if not href.startswith("http") or any(
                host == d or host.endswith("." + d) for d in self.spec.own_domains
            ):
                continue
            out.append(
                Citation(
                    url=href,
                    id=await link.get_attribute("data-index"),
                    title=(await link.inner_text()).strip() or None,
                )
            )
        return tuple(out)

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        """R12 for a consumer app: was this key's question sent? The send journal names the
        account that was about to send it; that account's history sidebar is searched for the
        question's exact text. The journal's sends of the same question by that account, newest
        first, pair one to one with the sidebar's matching conversations, newest first: when the
        counts agree this key's conversation is the one at its place, re-opened and captured
        from the page (DOM, screenshot, HTML; the stream is gone). None: never journalled, or no
        such conversation in the history (nothing landed). Counts that disagree cannot decide:
        ``TransientError`` (the worker keeps the sample uncertain, never re-sends)."""
        record = await self.accounts.sent(self.platform, idempotency_key)
        if record is None:
            return None  # the send click was never reached
        lease = await self.accounts.acquire_account(self.platform, record.account_id)
        try:
            hrefs = await self.history_matches(lease, record.question, record.device, record.region)
            mine = record.same_question_keys.index(idempotency_key)
            if not hrefs:
                return None
            if len(hrefs) != len(record.same_question_keys):
                raise TransientError(
                    f"{self.platform} account {record.account_id}: its history shows "
                    f"{len(hrefs)} conversation(s) of this question, the send journal "
                    f"{len(record.same_question_keys)}: which one is this attempt's cannot be "
                    "decided; review (never re-sent)"
                )
            capture = await self._recapture(
                lease,
                hrefs[mine],
                device_profile(record.device, self.entry.options),
                region_profile(record.region, self.entry.options),
            )
        finally:
            await self.accounts.release(lease, "not_sent")
        upstream_id = f"{self.platform}:{record.account_id}:{idempotency_key}"
        self._hold(upstream_id, capture)
        return Acceptance(upstream_id, capture.captured_at)

    async def history_matches(
        self, lease: AccountLease, question: str, device: str = "desktop", region: str = "cn"
    ) -> list[str]:
        """The addresses of the account's past conversations titled exactly ``question``, in
        the sidebar's order (newest first). The caller holds the account's lease. A page that
        is not the chat (login wall, captcha) raises its failure class: the look-up cannot
        decide."""
        context = await self._context(
            lease,
            device_profile(device, self.entry.options),
            region_profile(region, self.entry.options),
        )
        page = context.pages[0] if context.pages else await context.new_page()
        loaded = await page.goto(self.page_url, wait_until="domcontentloaded")
        await self._classify_page(page, lease, loaded)
        links = page.locator(self.spec.history_links)
        try:  # the sidebar is filled by the page's script
            await links.first.wait_for(state="attached", timeout=self.stable_poll_s * 2000 + 2000)
        except Exception:
            return []
        wanted = " ".join(question.split())
        out = []
        for i in range(await links.count()):
            link = links.nth(i)
            if " ".join((await link.text_content() or "").split()) == wanted:
                href = await link.get_attribute("href") or ""
                out.append(href if "://" in href else self.base + href)
        return out

    async def find_in_history(
        self, lease: AccountLease, question: str, device: str = "desktop", region: str = "cn"
    ) -> str | None:
        """The newest conversation titled exactly ``question`` in the account's history, or
        None when the sidebar has none."""
        found = await self.history_matches(lease, question, device, region)
        return found[0] if found else None

    async def _recapture(
        self, lease: AccountLease, href: str, device: DeviceProfile, region: RegionProfile
    ) -> Capture:
        """A past conversation re-opened from the history and captured as the page shows it."""
        context = await self._context(lease, device, region)
        page = context.pages[0] if context.pages else await context.new_page()
        loaded = await page.goto(href, wait_until="domcontentloaded")
        await self._classify_page(page, lease, loaded)
        dom_text = await self._await_stable(page)
        dom_citations = await self._dom_citations(page)
        png = await page.screenshot(full_page=True, type="png")
        html = (await page.content()).encode()
        return Capture(
            account_id=lease.account_id,
            raw=b"",
            raw_mime="text/html",
            html=html,
            png=png,
            dom_text=dom_text,
            dom_citations=dom_citations,
            captured_at=datetime.now(UTC),
            meta={
                "account": lease.account_id,
                "device": device.name,
                "viewport": f"{device.width}x{device.height}",
                "device_scale_factor": f"{device.scale:g}",
                "user_agent": device.user_agent,
                "mobile": str(device.mobile).lower(),
                "region": region.name,
                "locale": region.locale,
                "timezone": region.timezone,
                "geolocation": f"{region.latitude},{region.longitude}",
                "proxy": "yes" if region.proxy_env else "no",
                "page_url": href,
                "recovered_from": "history",
            },
            warnings=("RECOVERED_FROM_HISTORY", "DOM_FALLBACK"),
        )

    # ------------------------------------------------------------------ the rest of the contract
    def _capture_of(self, upstream_id: str) -> Capture:
        try:
            return self._held[upstream_id]
        except KeyError:
            raise NotFound(f"{self.platform}: no capture held for {upstream_id}") from None

    async def poll(self, upstream_id: str) -> PollResult:
        self._capture_of(upstream_id)
        return PollResult("completed", upstream_id)

    def parse(self, capture: Capture) -> ParsedAnswer:
        """The stream parsed by the platform's frame parser; the DOM when no stream was
        captured. Raises ``Unparseable`` (raw kept) when the stream is not the app's shape."""
        if capture.raw:
            return self.spec.parse(capture.raw)
        return ParsedAnswer(capture.dom_text, capture.dom_citations)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        capture = self._capture_of(upstream_id)
        parsed = self.parse(capture)
        shot = (
            Attachment("screenshot", "available", data=capture.png, mime_type="image/png")
            if capture.png
            else Attachment("screenshot", "unavailable", reason="the page could not be captured")
        )
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=parsed.answer_text,
            raw_body=capture.raw or capture.html,
            raw_mime_type=capture.raw_mime,
            captured_at=capture.captured_at,
            citations=parsed.citations,
            screenshot=shot if request.screenshot else None,
            warnings=capture.warnings + parsed.warnings,
            provider_truncated=parsed.truncated,
            web_search_used=parsed.web_search_used,
            screenshot_used=bool(request.screenshot and capture.png),
            search_queries=parsed.search_queries,
            page_html=capture.html,
            capture=dict(capture.meta),
            exchange=capture.exchange,
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        capture = self._capture_of(upstream_id)
        if capture.png is None:
            return Attachment("screenshot", "unavailable", reason="not captured")
        return Attachment("screenshot", "available", data=capture.png, mime_type="image/png")

    async def cancel(self, upstream_id: str) -> CancelResult:
        return CancelResult(
            upstream_cancelled=False, detail="a browser capture finishes within submit"
        )

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        raise NoStatementApi(f"{self.platform}: a consumer chat app publishes no fee statement")


async def import_storage_state(chromium: str, profile: Path, cookies: list[dict[str, Any]]) -> int:
    """Put a person's exported login (Playwright storage-state ``cookies``) into an account's
    persistent profile, where the browser keeps it; returns how many cookies. The values are
    never logged or stored anywhere else (D2)."""
    from playwright.async_api import async_playwright

    profile.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(profile), executable_path=chromium, headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            await context.add_cookies(cookies)  # type: ignore[arg-type]
        finally:
            await context.close()
    return len(cookies)
