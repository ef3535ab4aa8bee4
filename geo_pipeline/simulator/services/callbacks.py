"""Completion callbacks of the imitated services that have them besides cloro (whose webhooks
live in cloro.py): DataForSEO's ``pingback_url`` / ``postback_url`` and Bright Data's ``notify``.

Each service names what is due (a task that reached its end and asked for a callback); this loop
sends each once, on the service's clock, and imitates the two delivery pathologies a receiver
must survive: a delivery that never arrives (``lost``) and one that arrives twice
(``duplicate``). Neither vendor documents redelivery (inf.): a lost callback is lost, and the
client's polling is what still completes the task. Counts per outcome are in the service's
stats under ``callbacks``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from geo_pipeline.simulator.answers import unit


@dataclass(frozen=True)
class Delivery:
    ident: str  # the task / snapshot id (the draw's salt)
    method: str  # GET (pingback) or POST (postback, notify)
    url: str
    body: Any = None  # JSON body of a POST


class CallbackLoop:
    """Send what ``due()`` returns, once each; ``rates()`` gives (lost, duplicate)."""

    def __init__(
        self,
        seed: int,
        due: Callable[[], list[Delivery]],
        rates: Callable[[], tuple[float, float]],
    ) -> None:
        self.seed = seed
        self.due = due
        self.rates = rates
        self.counts: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None

    def mount(self, app: web.Application) -> None:
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)

    async def _start(self, app: web.Application) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _stop(self, app: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while True:
                await asyncio.sleep(0.05)
                for delivery in self.due():
                    await self.send(session, delivery)

    async def send(self, session: Any, d: Delivery) -> None:
        lost_rate, dup_rate = self.rates()
        if unit(self.seed, d.ident, "callback-lost") < lost_rate:
            self.counts["lost"] += 1
            return
        copies = 2 if unit(self.seed, d.ident, "callback-dup") < dup_rate else 1
        if copies == 2:
            self.counts["duplicate"] += 1
        for _ in range(copies):
            try:
                async with session.request(d.method, d.url, json=d.body) as resp:
                    ok = 200 <= resp.status < 300
            except Exception:
                ok = False
            self.counts["sent" if ok else "failed"] += 1

    def stats(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))

    def reset(self) -> None:
        self.counts.clear()


__all__ = ["CallbackLoop", "Delivery"]
