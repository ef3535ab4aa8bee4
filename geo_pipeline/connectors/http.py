"""HTTP plumbing shared by the connectors: one error mapping for every protocol (R13, R12, D4).

The one distinction everything else rests on: did the request leave? A failure to *connect*
means it did not, so a retry cannot duplicate work (``TransientError``). A timeout or a dropped
connection *after* the request was written means it may have been accepted
(``AcceptanceUnknown``): the caller must look upstream before sending anything again.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from geo_pipeline.connectors.base import (
    AcceptanceUnknown,
    ConnectorError,
    HttpExchange,
    InvalidParams,
    NoPermission,
    NotFound,
    RateLimited,
    TransientError,
)
from geo_pipeline.settings import settings

TRANSPORT_ENV = "GEO_HTTP_TRANSPORT"
DEFAULT_TIMEOUT = httpx.Timeout(connect=3.0, read=30.0, write=10.0, pool=10.0)
DEFAULT_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=128)
UNREACHABLE_LOG_EVERY_S = 10.0  # one warning per platform origin this often, with a count

log = logging.getLogger("geo_pipeline.connectors")
_unreachable: dict[str, tuple[float, int]] = {}  # origin -> (last warning, failures since)


class LeanAsyncClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` without the per-request machinery connectors never use: no cookie
    jar (platform APIs authenticate with headers), no auth flows, no redirect following (a 3xx
    is a status to classify, never followed), no event hooks. ``send`` hands the request
    straight to the transport; requests, responses, per-request timeouts and httpx's typed
    exceptions are unchanged. Measured by bench/throughput.py --mode http: httpx's send
    pipeline was about a fifth of a worker's CPU per request."""

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = None,
        follow_redirects: Any = None,
    ) -> httpx.Response:
        del auth, follow_redirects  # connectors pass neither; both stay off
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        if "timeout" not in request.extensions:
            request.extensions["timeout"] = self.timeout.as_dict()
        transport = self._transport_for_url(request.url)
        response = await transport.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response


def new_client(
    *, timeout: httpx.Timeout | None = None, limits: httpx.Limits | None = None
) -> httpx.AsyncClient:
    """The one pooled client a process shares between connectors (D8: bounded pool). Its wire
    work is done by aiohttp (connectors.transport: ~5x less CPU per request than httpcore on
    these machines); ``GEO_HTTP_TRANSPORT=httpcore`` keeps httpx's own transport."""
    limits = limits or DEFAULT_LIMITS
    transport = None
    if settings().http_transport != "httpcore":
        from geo_pipeline.connectors.transport import AiohttpTransport

        transport = AiohttpTransport(max_connections=limits.max_connections or 256)
    return LeanAsyncClient(timeout=timeout or DEFAULT_TIMEOUT, limits=limits, transport=transport)


def exchange_of(resp: httpx.Response) -> HttpExchange:
    """The exchange a response came in, as sent and received (headers in wire order), for the
    evidence's WARC request/response records; the evidence layer redacts secrets (D2)."""
    req = resp.request
    version = resp.extensions.get("http_version", b"HTTP/1.1")
    return HttpExchange(
        method=req.method,
        url=str(req.url),
        request_headers=_pairs(req.headers.raw),
        request_body=req.content if req.stream is not None else b"",
        status=resp.status_code,
        reason=resp.reason_phrase,
        response_headers=_pairs(resp.headers.raw),
        http_version=version.decode("ascii") if isinstance(version, bytes) else str(version),
    )


def _pairs(raw: list[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    return tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in raw)


def timeout_from(options: Mapping[str, Any], name: str, default_read: float) -> httpx.Timeout:
    """Per-request timeout: ``options[name]`` seconds for the read, the defaults for the rest."""
    read = float(options.get(name, default_read))
    return httpx.Timeout(connect=min(3.0, read), read=read, write=10.0, pool=10.0)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: either delta-seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def origin(url: str) -> tuple[str, str, int] | None:
    """(``scheme://host:port``, host, port) of a URL; None without a host. Only the origin of a
    platform's URL is ever logged or recorded: a path or a query could carry a key."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}", parts.hostname, port


def _could_not_connect(exc: httpx.HTTPError, what: str) -> TransientError:
    """The error says which platform URL did not answer and why (issue 30: a bare 'transient'
    named neither); a warning says so too, once per origin every UNREACHABLE_LOG_EVERY_S."""
    try:
        where = origin(str(exc.request.url))
    except RuntimeError:  # an exception raised without its request
        where = None
    url = where[0] if where else "the platform"
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if where is not None:
        now = time.monotonic()
        last, failures = _unreachable.get(url, (float("-inf"), 0))
        failures += 1
        if now - last >= UNREACHABLE_LOG_EVERY_S:
            log.warning(
                "platform unreachable",
                extra={"url": url, "error": cause, "call": what, "failures": failures},
            )
            _unreachable[url] = (now, 0)
        else:
            _unreachable[url] = (last, failures)
    return TransientError(f"{what}: could not connect to {url} ({cause})")


def transport_error(exc: httpx.HTTPError, *, sent_means_unknown: bool, what: str) -> ConnectorError:
    """Map an httpx transport failure. ``sent_means_unknown`` is True for a submit: after the
    request left, silence is not a 'no' (R12); for reads it is just a transient failure."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return _could_not_connect(exc, what)
    if sent_means_unknown and isinstance(
        exc,
        httpx.ReadTimeout
        | httpx.WriteTimeout
        | httpx.ReadError
        | httpx.WriteError
        | httpx.RemoteProtocolError,
    ):
        return AcceptanceUnknown(
            f"{what}: no response after the request was sent ({type(exc).__name__}); "
            "it may have been accepted"
        )
    return TransientError(f"{what}: {type(exc).__name__}")


def status_error(
    resp: httpx.Response,
    *,
    what: str,
    message: str | None = None,
    not_found_is_missing: bool = False,
) -> ConnectorError:
    """Map a non-success HTTP status to the typed errors (R13)."""
    status = resp.status_code
    text = message or _short(resp)
    raw = resp.content
    if status == 429:
        return RateLimited(
            f"{what}: rate limited: {text}",
            status=status,
            retry_after_s=parse_retry_after(resp.headers.get("Retry-After")),
            raw=raw,
        )
    if status in (401, 403):
        return NoPermission(f"{what}: {status} {text}", status=status, raw=raw)
    if status == 404 and not_found_is_missing:
        return NotFound(f"{what}: {text}", status=status, raw=raw)
    if status in (400, 404, 405, 413, 415, 422):
        return InvalidParams(f"{what}: {status} {text}", status=status, raw=raw)
    return TransientError(f"{what}: HTTP {status} {text}", status=status, raw=raw)


def _short(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or body["error"])[:200]
    return str(body)[:200]
