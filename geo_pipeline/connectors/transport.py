"""An httpx transport that moves the bytes with aiohttp.

Why: measured on these 2-core machines (bench/simulator.py --via connector, and a plain
sequential GET loop), httpx's default transport (httpcore + anyio + h11) costs about 1 ms of CPU
per request, five times aiohttp's client; the execution core needs thousands of requests per
second. Connectors keep the ``httpx.AsyncClient`` API (requests, responses, per-request timeouts,
typed exceptions); only the wire work changes. ``GEO_HTTP_TRANSPORT=httpcore`` switches back.

The exceptions keep httpx's meaning, which the R12 classification depends on
(connectors.http.transport_error): nothing sent -> ``ConnectError``/``ConnectTimeout``; sent and
then silence or a dropped connection -> ``ReadTimeout``/``RemoteProtocolError``/``ReadError``.
"""

from __future__ import annotations

import aiohttp
import httpx


def _timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    t = request.extensions.get("timeout") or {}
    connect = t.get("connect")
    pool = t.get("pool")
    # aiohttp's "connect" covers waiting for a pooled connection and opening it.
    wait = None if connect is None and pool is None else (connect or 0.0) + (pool or 0.0)
    return aiohttp.ClientTimeout(
        total=None, connect=wait, sock_connect=connect, sock_read=t.get("read")
    )


class AiohttpTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, max_connections: int = 256, keepalive_s: float = 30.0):
        self._max = max_connections
        self._keepalive = keepalive_s
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max,
                limit_per_host=0,
                keepalive_timeout=self._keepalive,
                ttl_dns_cache=300,
            )
            # httpx decodes Content-Encoding itself; aiohttp hands over the bytes as received.
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._get_session()
        body = await request.aread()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        try:
            async with session.request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                timeout=_timeout(request),
                allow_redirects=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            ) as resp:
                content = await resp.read()
                status = resp.status
                raw_headers = list(resp.raw_headers)
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timeout", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.SocketTimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timeout", request=request) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise httpx.RemoteProtocolError(
                str(exc) or "server disconnected", request=request
            ) from exc
        except (aiohttp.ClientOSError, aiohttp.ClientPayloadError) as exc:
            raise httpx.ReadError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        except TimeoutError as exc:  # a timeout aiohttp did not classify: treat as read
            raise httpx.ReadTimeout("timeout", request=request) from exc
        return httpx.Response(
            status,
            headers=raw_headers,
            content=content,
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
