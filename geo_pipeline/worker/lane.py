"""One platform's lane: its stream intake, its claims, its room and its limiters (R8-R11).

The lane reads its collect stream through the consumer group (XREADGROUP with a bounded BLOCK:
no busy polling) and claims due samples from PostgreSQL in batches, fairly across tenants.
Stream entries are wake-up hints (R8): PostgreSQL decides what is due, so a lost or trimmed
entry delays work but never loses it, and a flood from one tenant cannot hold back another
(R10). A claimed sample runs as an ``Attempt`` task of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from geo_pipeline.connectors.base import Connector
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.domain.retry import dead_letter_due
from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import DEAD_LETTERS, IN_FLIGHT, QUEUE_WAIT
from geo_pipeline.runtime.crash import crashpoint
from geo_pipeline.store import execution as ex
from geo_pipeline.store import tenancy
from geo_pipeline.streams import consumer as sc
from geo_pipeline.streams.keys import GROUP, collect_stream, screenshot_stream, stream_key
from geo_pipeline.streams.ratelimit import SharedRateLimiter
from geo_pipeline.worker.context import Context
from geo_pipeline.worker.leases import Held
from geo_pipeline.worker.tenant_limits import TenantSubmitLimits

log = logging.getLogger("geo_pipeline.worker")


class Lane:
    """One platform: its stream, its room, its limiters, its connector."""

    def __init__(
        self,
        ctx: Context,
        platform: str,
        caps: Capabilities,
        connector: Connector,
        start: Callable[[Lane, Held], asyncio.Task[None]],
        in_flight: Callable[[], int],
    ):
        self.c = ctx
        self.platform = platform
        self.caps = caps
        self.connector = connector
        # The service calls back on completion (worker/callbacks.py): poll as a safety net.
        self.callbacks_on = bool(getattr(connector, "callbacks_on", False))
        entry = getattr(connector, "entry", None)
        self.protocol = str(getattr(entry, "protocol", "") or platform)
        self._start = start  # runs one claimed sample (the runner wires in Attempt)
        self._in_flight = in_flight
        self.key = stream_key(ctx.ns, collect_stream(platform))
        self.held: dict[str, Held] = {}
        self.wake = asyncio.Event()
        self.room_free = asyncio.Event()
        self.inbox: list[sc.Entry] = []
        rl = caps.rate_limits
        self.submit_limit = SharedRateLimiter(
            ctx.redis, ctx.ns, platform, "submit", rl.submit_per_second
        )
        self.poll_limit = SharedRateLimiter(ctx.redis, ctx.ns, platform, "poll", rl.poll_per_second)
        # Each tenant's own submit cap on this platform, if it has one (R10).
        self.tenant_limits = TenantSubmitLimits(
            ctx.redis, ctx.ns, [platform], lambda ps: ctx.db(tenancy.platform_limits, ps)
        )
        self.calls = asyncio.Semaphore(ctx.s.max_concurrent_calls)
        # Screenshots have their own stream, limiter and call budget: never starve text (R10).
        self.shot_key = stream_key(ctx.ns, screenshot_stream(platform))
        self.shot_limit = SharedRateLimiter(
            ctx.redis, ctx.ns, platform, "screenshot", rl.screenshot_per_second
        )
        self.shot_calls = asyncio.Semaphore(max(1, ctx.s.max_concurrent_calls // 4))
        # New submissions claimed but still waiting for a submit token (submit_horizon_s).
        self.submit_budget = max(1, int(rl.submit_per_second * ctx.s.submit_horizon_s))
        self.submit_waiting = 0
        self.budget_limited = False

    def room(self) -> int:
        return self.c.s.max_in_flight - len(self.held)

    def submit_started(self, h: Held) -> None:
        """``h`` got its submit token (or will not submit): its place in the budget is free."""
        if not h.awaits_submit:
            return
        h.awaits_submit = False
        self.submit_waiting -= 1
        if self.budget_limited and self.submit_waiting <= self.submit_budget // 2:
            self.budget_limited = False
            self.wake.set()

    async def acquire_submit(self, h: Held) -> None:
        """Wait for a submit token: the tenant's own cap first (waiting on it takes nothing
        from the platform's bucket, so other tenants' submits go on), then the platform's."""
        await self.tenant_limits.acquire(h.row["tenant_id"], self.platform)
        await self.submit_limit.acquire()

    def release(self, h: Held) -> None:
        """Forget ``h`` -- only ``h``: a newer claim of the same sample keeps its entry."""
        if self.held.get(h.sample_id) is h:
            del self.held[h.sample_id]

    def sample_done(self) -> None:
        IN_FLIGHT.set(self._in_flight())
        self.room_free.set()
        self.wake.set()

    # ------------------------------------------------------------------ intake
    async def reader(self) -> None:
        """Blocking reads of the lane's stream (D3); entries wake the claimer."""
        s = self.c.s
        while not self.c.stopping.is_set():
            if self.room() <= 0 or len(self.inbox) >= s.claim_batch * 4:
                self.room_free.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.room_free.wait(), 1.0)
                continue
            try:
                reply = await self.c.redis.xreadgroup(
                    GROUP, self.c.consumer, {self.key: ">"}, count=s.claim_batch, block=s.block_ms
                )
            except Exception as exc:
                if "NOGROUP" in str(exc):  # the stream was deleted: recreate, carry on
                    await sc.ensure_group(self.c.redis, self.key)
                    self.wake.set()
                    continue
                log.warning("stream read failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            entries = sc.read_entries(self.key, reply)
            if entries:
                crashpoint("after_read_before_claim")
                self.inbox.extend(entries)
                self.wake.set()

    async def claimer(self) -> None:
        """Claim due work whenever woken (entries, freed room, a retry coming due) or every
        ``idle_claim_s``; keep claiming while batches come back full."""
        while not self.c.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.c.s.idle_claim_s)
            self.wake.clear()
            if self.c.stopping.is_set():
                break
            try:
                while not self.c.stopping.is_set():
                    if not await self.claim_round():
                        break
            except Exception:
                log.exception("claim round failed")
                await asyncio.sleep(0.5)

    async def claim_round(self) -> bool:
        c, s = self.c, self.c.s
        entries, self.inbox = self.inbox, []
        budget = self.submit_budget - self.submit_waiting
        want = min(self.room(), s.claim_batch, budget)
        self.budget_limited = budget < min(self.room(), s.claim_batch)
        rows: list[dict[str, Any]] = []
        # The local lease deadline counts from BEFORE the claim: the database's lease started
        # somewhere inside the call, never earlier.
        t0 = time.monotonic()
        if want > 0:
            rows = await c.db(
                ex.claim_fair,
                owner=c.id,
                platforms=[self.platform],
                want=want,
                lease_s=s.lease_s,
                lookup_platforms=c.recoverable_platforms,
                aging_s=s.aging_s,
                retention_s={self.platform: self.caps.result_retention_s},
            )
        deadline = t0 + s.lease_s - s.lease_margin_s
        now = time.monotonic()
        fresh: list[Held] = []
        for row in rows:
            h = Held(row, now, deadline)
            old = self.held.get(h.sample_id)
            if old is not None:
                # Our own earlier claim of this sample expired and we claimed it again: the old
                # task is stale; stop it, so one sample never runs twice in one process.
                old.lost = True
                if old.task is not None and not old.task.done():
                    old.task.cancel()
                h.entries.extend(old.entries)
                self.submit_started(old)
            if row["was"] == "planned":
                h.awaits_submit = True
                self.submit_waiting += 1
            self.held[h.sample_id] = h
            fresh.append(h)
            QUEUE_WAIT.labels(self.platform).observe(max(0.0, float(row["queue_wait_s"])))
        c.report["claimed"] += len(rows)
        IN_FLIGHT.set(self._in_flight())
        if rows and log.isEnabledFor(logging.INFO):  # D6, one event per claim batch
            event(
                log,
                "samples.started",
                worker=c.id,
                platform=self.platform,
                count=len(rows),
                samples=[{"sample_id": r["sample_id"], "attempt_no": r["attempt_no"],
                          "token": r["fencing_token"]} for r in rows],
            )  # fmt: skip
        for e in entries:
            h2 = self.held.get(e.sample_id or "")
            if h2 is not None:
                h2.entries.append((e.stream, e.message_id))
            else:  # already processed, held elsewhere, or not due: the database decides
                c.acks.submit((e.stream, e.message_id))
        for h in fresh:
            h.task = self._start(self, h)
        return want > 0 and len(rows) >= want

    # ------------------------------------------------------------------ reclaim (R9)
    async def reclaimer(self) -> None:
        """Take over entries idle too long (their worker died); dead-letter the ones delivered
        too often. Their samples come back through claims, never blind re-submission."""
        while not self.c.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.c.stopping.wait(), self.c.s.reclaim_every_s)
            if self.c.stopping.is_set():
                return
            try:
                await self.reclaim_once()
            except Exception as exc:
                if "NOGROUP" in str(exc):
                    await sc.ensure_group(self.c.redis, self.key)
                else:
                    log.exception("reclaim failed")

    async def reclaim_once(self) -> int:
        c = self.c
        got = await sc.autoclaim(c.redis, self.key, c.consumer, c.s.reclaim_idle_ms)
        if got.deleted:  # Redis 6.2 leaves deleted ids in the PEL; ack them away
            await c.redis.xack(self.key, GROUP, *got.deleted)
        if not got.entries:
            return 0
        counts = await sc.delivery_counts(c.redis, self.key, [e.message_id for e in got.entries])
        keep: list[sc.Entry] = []
        for e in got.entries:
            n = counts.get(e.message_id, 1)
            if dead_letter_due(n, c.s.max_deliveries):
                await sc.move_to_dead(c.redis, c.ns, e, n, "max_deliveries")
                await c.db(
                    ex.record_dead_letter,
                    stream=e.stream,
                    message_id=e.message_id,
                    event_id=e.fields.get("event_id"),
                    sample_id=e.sample_id,
                    deliveries=n,
                    reason="max_deliveries",
                )
                DEAD_LETTERS.labels(e.stream).inc()
                c.report["dead_lettered"] += 1
            else:
                keep.append(e)
        if keep:
            self.inbox.extend(keep)
            self.wake.set()
        return len(got.entries)
