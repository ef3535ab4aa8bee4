"""What the browser lane knows of one consumer chat app (one module per platform holds its
``SPEC``), the devices and regions it emulates, and its failure classes (R13).

A frame parser turns the raw captured stream into a ``ParsedAnswer`` (text, citations with the
position of their ``[n]`` marker, the search queries the engine ran, ``truncated`` when the
app's end marker never came); it raises ``Unparseable`` with the raw bytes when nothing in the
stream is the app's shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from geo_pipeline.connectors.base import (
    Citation,
    ConnectorError,
    InvalidParams,
    Unavailable,
)
from geo_pipeline.connectors.parsers import ParsedAnswer


# --------------------------------------------------------------------------- failure classes
class NeedsLogin(Unavailable):
    """A login wall: the account's session expired. Its samples wait (not failed, not charged)
    until a person logs in again (``geo-pipeline accounts login``)."""

    cause = "needs_login"


class AccountSuspended(Unavailable):
    """A captcha or risk-control page: the account is suspended at once (no retry storm); other
    accounts continue."""

    cause = "account_suspended"


class InvalidCapability(Unavailable):
    """The page changed so the question cannot be sent (a selector no longer matches): nothing
    was sent, nothing is charged; an operator must update the platform's selectors."""

    cause = "invalid_capability"


class PageChanged(InvalidCapability):
    """The app's page no longer has the controls its module's selectors name (the composer, the
    send button, the search toggle): the layout changed. Nothing was sent, nothing is charged;
    the account is fine. A page that is still rendering is waited for (``page_ready_s``) before
    this is said. The sample waits once (RetryPolicy.max_layout_waits), then ends ``failed``
    with ``unavailable:layout_changed:waits_spent``: a changed page does not change back by
    itself, and re-asking forever would only load the page again and again. The account records
    the change (an operations alert per platform) until a send succeeds again."""

    cause = "layout_changed"


class PageRateLimited(Unavailable):
    """The app's page says "too many requests" for this account: nothing was sent. The account
    cools down for the page's hint (``retry_after_s``: its ``Retry-After``, else 10 minutes) and
    the sample waits as long; other accounts carry on. Never a plain ``RateLimited``, whose
    budget would fail the sample after a few tries while a person's pacing is what is asked."""

    cause = "rate_limited"


class InQuietHours(Unavailable):
    """Inside the lane's quiet hours no account sends (a person sleeps); ``retry_after_s`` is
    when the window ends."""

    cause = "quiet_hours"


class NoAccountReady(Unavailable):
    """No account of the platform may send now (all leased, pacing, cooling down or logged out);
    ``retry_after_s`` says when one may."""

    cause = "no_account"


BROWSER_ERRORS: tuple[type[ConnectorError], ...] = (
    NeedsLogin,
    AccountSuspended,
    InvalidCapability,
    PageChanged,
    PageRateLimited,
    InQuietHours,
    NoAccountReady,
)


# --------------------------------------------------------------------------- the app
Parser = Callable[[bytes], ParsedAnswer]


@dataclass(frozen=True)
class PlatformSpec:
    """Selectors (CSS, Playwright syntax) and the stream of one app. ``page_path`` is where a
    fresh conversation opens (relative to the registry's ``base_url``)."""

    platform: str
    page_path: str
    stream_url: re.Pattern[str]  # the completion request whose SSE body is the answer
    input: str
    send: str
    search_toggle: str  # found by role and text, clicked only when its state differs
    stop: str  # shown while an answer streams
    answer: str  # DOM fallback: the rendered answer
    citation_links: str  # DOM fallback: citation cards
    history_links: str  # the conversation-history sidebar
    login_markers: tuple[str, ...]
    captcha_markers: tuple[str, ...]
    rate_limit_markers: tuple[str, ...]
    own_domains: tuple[str, ...]  # dropped from DOM-fallback citations (the app's own links)
    parse: Parser


# --------------------------------------------------------------------------- devices, regions
@dataclass(frozen=True)
class DeviceProfile:
    """The emulation of one plan device: viewport (CSS px), device pixel ratio, user agent,
    mobile meta-viewport and touch."""

    name: str
    width: int
    height: int
    scale: float
    mobile: bool
    touch: bool
    user_agent: str

    def key(self) -> tuple[Any, ...]:
        return (self.width, self.height, self.scale, self.mobile, self.touch, self.user_agent)


@dataclass(frozen=True)
class RegionProfile:
    name: str
    locale: str
    timezone: str
    latitude: float
    longitude: float
    proxy_env: str | None = None  # the variable holding this region's proxy URL (D2)

    def key(self) -> tuple[Any, ...]:
        return (self.locale, self.timezone, self.latitude, self.longitude, self.proxy_env)


_CHROME = "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0"
DEVICES: dict[str, DeviceProfile] = {
    "desktop": DeviceProfile(
        "desktop",
        1366,
        768,
        1.0,
        False,
        False,
        f"Mozilla/5.0 (Windows NT 10.0; Win64; x64) {_CHROME} Safari/537.36",
    ),
    # An Android phone (Chromium is what drives it, so an Android Chrome UA stays consistent).
    "mobile": DeviceProfile(
        "mobile",
        360,
        780,
        3.0,
        True,
        True,
        f"Mozilla/5.0 (Linux; Android 14; Pixel 7) {_CHROME} Mobile Safari/537.36",
    ),
}
REGIONS: dict[str, RegionProfile] = {
    "cn": RegionProfile("cn", "zh-CN", "Asia/Shanghai", 31.2304, 121.4737),
    "global": RegionProfile("global", "en-US", "America/Los_Angeles", 37.7749, -122.4194),
}


def device_profile(name: str, options: Mapping[str, Any]) -> DeviceProfile:
    """A device of the registry entry: ``options.devices.<name>`` overrides the built-in one."""
    base = DEVICES.get(name)
    spec = (options.get("devices") or {}).get(name)
    if spec is None:
        if base is None:
            raise InvalidParams(
                f"device {name!r} has no emulation; built in: {sorted(DEVICES)} "
                "(or give options.devices.<name>: width, height, scale, mobile, touch, user_agent)"
            )
        return base
    try:
        return DeviceProfile(
            name,
            int(spec.get("width", base.width if base else 0)),
            int(spec.get("height", base.height if base else 0)),
            float(spec.get("scale", base.scale if base else 1.0)),
            bool(spec.get("mobile", base.mobile if base else False)),
            bool(spec.get("touch", base.touch if base else False)),
            str(spec.get("user_agent", base.user_agent if base else "")),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidParams(f"options.devices.{name}: {spec!r} ({exc})") from exc


def region_profile(name: str, options: Mapping[str, Any]) -> RegionProfile:
    base = REGIONS.get(name)
    spec = (options.get("regions") or {}).get(name)
    if spec is None:
        if base is None:
            raise InvalidParams(
                f"region {name!r} has no locale/timezone/geolocation; built in: {sorted(REGIONS)}"
                " (or give options.regions.<name>: locale, timezone, latitude, longitude)"
            )
        return base
    try:
        return RegionProfile(
            name,
            str(spec.get("locale", base.locale if base else "")),
            str(spec.get("timezone", base.timezone if base else "")),
            float(spec.get("latitude", base.latitude if base else 0.0)),
            float(spec.get("longitude", base.longitude if base else 0.0)),
            spec.get("proxy_env"),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidParams(f"options.regions.{name}: {spec!r} ({exc})") from exc


# --------------------------------------------------------------------------- SSE helpers
def sse_events(raw: bytes) -> Iterator[tuple[str | None, Any]]:
    """(event name, decoded JSON data) of each SSE event; a ``data:`` that is not JSON is
    yielded as its text."""
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        event: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if not data and event is None:
            continue
        joined = "\n".join(data)
        try:
            yield event, json.loads(joined)
        except ValueError:
            yield event, joined


def cited(text: str, results: list[tuple[int, str, str | None]]) -> tuple[Citation, ...]:
    """Citations from (index, url, title): *cited* with the span of the first ``[index]`` marker
    in the answer text, *retrieved* when the text never points at it."""
    out = []
    seen: set[tuple[int, str]] = set()
    for index, url, title in results:
        if (index, url) in seen or not url:
            continue
        seen.add((index, url))
        marker = f"[{index}]"
        at = text.find(marker)
        out.append(
            Citation(
                url=url,
                relation="cited" if at >= 0 else "retrieved",
                id=str(index),
                title=title,
                span_start=at if at >= 0 else None,
                span_end=at + len(marker) if at >= 0 else None,
            )
        )
    return tuple(out)
