"""Rate limits shared by every worker through Redis (R10, R14): one token bucket per platform
and operation (submit, poll, screenshot), refilled by Redis time in a Lua script, so ten
workers together never exceed what the platform allows.

A worker takes tokens in small batches and hands them out locally: one Redis round trip per
``batch`` calls instead of one per call. The batch is what the limit allows in 20 ms (at least
one, at most 100), so a 5 req/s limit is still taken one token at a time while a 5,000 req/s
one costs a round trip per 100 calls. The cost is that up to ``batch`` tokens may sit unused
in a dying worker, which only makes the limit stricter, never looser.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from geo_pipeline.streams.keys import rate_key

# KEYS[1] bucket; ARGV: rate/s, burst, wanted. Returns {granted, wait_ms}.
TOKEN_BUCKET_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil then tokens = burst; ts = now end
tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], 60000)
local wait = 0
if granted < 1 then wait = math.ceil((1 - tokens) * 1000 / rate) end
return {granted, wait}
"""


class SharedRateLimiter:
    """``await limiter.acquire()`` waits until one call of this (platform, op) may go out."""

    def __init__(
        self,
        redis: Any,
        ns: str,
        platform: str,
        op: str,
        rate_per_s: float,
        burst: float | None = None,
        batch: int | None = None,
    ) -> None:
        self._redis = redis
        self.key = rate_key(ns, platform, op)
        self.rate = max(0.001, float(rate_per_s))
        self.burst = float(burst if burst is not None else max(1.0, self.rate))
        if batch is None:
            batch = int(self.rate * 0.02)
        self.batch = max(1, min(batch, 100, int(self.burst)))
        self._local = 0
        self._local_until = 0.0
        self._lock = asyncio.Lock()
        self._script: Any = None

    async def _take(self, want: int) -> tuple[int, float]:
        if self._script is None:
            self._script = self._redis.register_script(TOKEN_BUCKET_LUA)
        granted, wait_ms = await self._script(keys=[self.key], args=[self.rate, self.burst, want])
        return int(granted), int(wait_ms) / 1000.0

    async def acquire(self) -> None:
        while True:
            # Locally held tokens expire after a second so a quiet worker cannot bank them.
            if self._local > 0 and time.monotonic() < self._local_until:
                self._local -= 1
                return
            async with self._lock:
                if self._local > 0 and time.monotonic() < self._local_until:
                    continue
                granted, wait_s = await self._take(self.batch)
                if granted > 0:
                    self._local = granted
                    self._local_until = time.monotonic() + 1.0
                    continue
            await asyncio.sleep(max(0.001, wait_s))
