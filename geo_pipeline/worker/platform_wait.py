"""A lane claims only once its platform answers (bounded): a worker started beside the
simulator, or beside a platform that is still starting, would otherwise spend the first
attempt of every sample it claims on a refused connection (issue 30: 24 of 50 first attempts of
the README's recipe failed as a bare ``transient``).

Reachable means a TCP connection to the platform's host and port opens. Each origin is probed
once for all the lanes that share it; the worker says where it is waiting (the URL and the
error), repeats that every ``PROGRESS_S`` while it waits, says when the platform answered, and
after ``wait_s`` claims anyway with a warning (its failures are then retried like any other
transient error, and each connection failure names the URL: connectors/http.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from geo_pipeline.connectors.http import origin
from geo_pipeline.observability.logs import event

log = logging.getLogger("geo_pipeline.worker")

PROGRESS_S = 10.0  # a waiting line this often
RETRY_S = 0.25  # between connection attempts
CONNECT_TIMEOUT_S = 2.0


async def _connect(host: str, port: int) -> str | None:
    """None when a connection opens, else why not."""
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), timeout=CONNECT_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return None


class PlatformGate:
    """``await gate.ready(platform)`` returns once the platform's origin answered or ``wait_s``
    passed. Platforms without a URL (an in-process stand-in) are ready at once."""

    def __init__(
        self,
        urls: Mapping[str, str],
        wait_s: float,
        *,
        connect: Callable[[str, int], Awaitable[str | None]] = _connect,
    ) -> None:
        self.wait_s = wait_s
        self._connect = connect
        self._origin: dict[str, tuple[str, str, int]] = {}
        for platform, url in urls.items():
            o = origin(url)
            if o is not None:
                self._origin[platform] = o
        self._probes: dict[str, asyncio.Task[bool]] = {}

    def platforms_of(self, url: str) -> list[str]:
        return sorted(p for p, o in self._origin.items() if o[0] == url)

    async def ready(self, platform: str) -> bool:
        """True when the platform answered, False when the wait ran out (or there was none)."""
        o = self._origin.get(platform)
        if o is None or self.wait_s <= 0:
            return o is None
        probe = self._probes.get(o[0])
        if probe is None:
            probe = asyncio.create_task(self._probe(*o), name=f"platform-wait:{o[0]}")
            self._probes[o[0]] = probe
        return await asyncio.shield(probe)

    async def _probe(self, url: str, host: str, port: int) -> bool:
        t0 = time.monotonic()
        next_line = t0
        platforms = self.platforms_of(url)
        while True:
            error = await self._connect(host, port)
            waited = round(time.monotonic() - t0, 1)
            if error is None:
                event(
                    log, "worker.platform_reachable", url=url, platforms=platforms, waited_s=waited
                )
                return True
            if time.monotonic() - t0 >= self.wait_s:
                log.warning(
                    "worker.platform_unreachable",
                    extra={
                        "url": url,
                        "platforms": platforms,
                        "error": error,
                        "waited_s": waited,
                        "then": "claiming anyway; each failed attempt is retried",
                    },
                )
                return False
            if time.monotonic() >= next_line:
                event(
                    log,
                    "worker.platform_waiting",
                    url=url,
                    platforms=platforms,
                    error=error,
                    waited_s=waited,
                    wait_s=self.wait_s,
                )
                next_line = time.monotonic() + PROGRESS_S
            await asyncio.sleep(RETRY_S)

    async def gated(self, platform: str, claimer: Callable[[], Awaitable[None]]) -> None:
        """The lane's claim loop, started once its platform is ready."""
        await self.ready(platform)
        await claimer()
