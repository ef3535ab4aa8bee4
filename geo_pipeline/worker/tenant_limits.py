"""Per-tenant submit caps per platform (R10), shared by every worker through Redis.

A platform's own limiter protects the platform; these protect tenants from each other: one
customer's 100,000-sample run may not take all of an engine's quota while another's daily
monitor waits. The caps live in ``geo.tenant_platform_limits`` (``geo-pipeline tenants limit``)
and are re-read every ``refresh_s``, so a changed cap reaches running workers within seconds.
Each (tenant, platform) has its own token bucket in Redis, so ten workers together hold the cap.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from geo_pipeline.store.tenancy import PlatformLimit
from geo_pipeline.streams.ratelimit import SharedRateLimiter

log = logging.getLogger("geo_pipeline.worker")

Loader = Callable[[list[str]], Awaitable[dict[tuple[str, str], PlatformLimit]]]


def tenant_op(tenant: str) -> str:
    """The rate-limit operation name of a tenant's submits (its Redis key names both)."""
    return f"submit:tenant:{tenant}"


class TenantSubmitLimits:
    def __init__(
        self, redis: Any, ns: str, platforms: list[str], load: Loader, refresh_s: float = 5.0
    ) -> None:
        self._redis = redis
        self._ns = ns
        self._platforms = list(platforms)
        self._load = load
        self.refresh_s = refresh_s
        self._limits: dict[tuple[str, str], PlatformLimit] = {}
        self._limiters: dict[tuple[str, str], tuple[PlatformLimit, SharedRateLimiter]] = {}
        self._loaded_at = -float("inf")
        self._lock = asyncio.Lock()

    async def _fresh(self) -> None:
        if time.monotonic() - self._loaded_at < self.refresh_s:
            return
        async with self._lock:
            if time.monotonic() - self._loaded_at < self.refresh_s:
                return
            try:
                self._limits = await self._load(self._platforms)
            except Exception as exc:
                # Keep the caps we had: a database hiccup must not lift every tenant's cap.
                log.warning("tenant submit caps not reloaded: %s", exc)
            self._loaded_at = time.monotonic()

    async def acquire(self, tenant: str, platform: str) -> None:
        """Wait until ``tenant`` may submit once more on ``platform`` (no cap: at once)."""
        await self._fresh()
        limit = self._limits.get((tenant, platform))
        if limit is None:
            return
        held = self._limiters.get((tenant, platform))
        if held is None or held[0] != limit:
            limiter = SharedRateLimiter(
                self._redis,
                self._ns,
                platform,
                tenant_op(tenant),
                limit.submits_per_second,
                burst=limit.burst,
            )
            held = (limit, limiter)
            self._limiters[(tenant, platform)] = held
        await held[1].acquire()
