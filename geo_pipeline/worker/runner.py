"""The asyncio worker (R8-R15, D3, D4): one process, thousands of samples in flight.

This module only wires the rooms together:
- ``lane``: per platform, the stream intake and the fair, batched claims;
- ``attempt``: one claimed sample from send to its fenced end (and what leaves the process);
- ``leases``: what the worker holds, self-fencing deadlines, batched renewal;
- ``screenshots``: late screenshots on a lane of their own;
- ``context`` and ``batcher``: the shared services and the group-committed writes.

Database calls run in threads on a bounded sync pool (D8); the database is the bottleneck, so
claims, send marks, acceptances, completions and renewals are batched (docs/design.md section 7).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Mapping

from geo_pipeline.connectors.base import Connector
from geo_pipeline.domain import urls
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.flows import complete
from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import IN_FLIGHT
from geo_pipeline.streams import consumer as sc
from geo_pipeline.worker.attempt import Attempt
from geo_pipeline.worker.callbacks import listen
from geo_pipeline.worker.context import Context
from geo_pipeline.worker.lane import Lane
from geo_pipeline.worker.leases import Held, renewer
from geo_pipeline.worker.platform_wait import PlatformGate
from geo_pipeline.worker.screenshots import screenshots
from geo_pipeline.worker.settings import UNCERTAIN_PARK_S, WorkerSettings, default_worker_id

__all__ = ["UNCERTAIN_PARK_S", "Worker", "WorkerSettings", "default_worker_id"]

log = logging.getLogger("geo_pipeline.worker")


# The cyclic collector's first threshold in a started worker (CPython's default: 700). A sample
# allocates a few thousand objects and frees nearly all of them by reference counting, so at 700
# the worker ran a young collection every few samples, each also scanning every object the
# in-flight samples hold: the collecting thread's CPU was 0.24 ms per sample with evidence off
# and 0.29 with every answer archived as WARC, 8-10 % of the workers' CPU; at 20,000, 0.05-0.06
# (bench/throughput.py --mode http --samples 2000, gc_ms_per_sample, issue 33).
# At 20,000 a young collection still came every second or two of a worker, sooner than its
# samples and their evidence live (a sample's coroutines, its answer's records and placed index
# until the completion batch commits): nearly all of them were scanned, promoted and scanned
# again by the next generation, and the frees of older objects (the URL normaliser's bounded
# caches, evicting) let the young list grow to twice the threshold. At 100,000 most of them are
# freed before a collection sees them: 0.045-0.069 -> 0.011 ms per sample with S3 evidence,
# 0.016-0.019 -> 0.005 with it off (bench/throughput.py --mode http --repeat 1, 20,000 samples,
# gc_ms_per_sample_by_gen: the young generation's 0.037-0.055 -> 0.006, the next one's 0.0085
# -> 0.0003; the rest is the start-up's full collection; 0.021 at 50,000), the workers' peak
# RSS the same (148-152 MB); 5,000 samples in flight with S3 evidence: 0.12 core, 142 MB (137
# at 20,000). Memory held by cycles waits longer: a young generation of at most ~100,000
# objects, and the workers make ~0.1 cyclic object a sample (test_worker_collector counts the
# bound).
GC_GEN0_THRESHOLD = 100_000


def quiet_collector(gen0: int = GC_GEN0_THRESHOLD) -> None:
    """Once, when a worker process has started (``Worker(on_started=quiet_collector)`` from
    the process's entry point: it changes the whole process's collector). Everything the
    start-up made (modules, the URL rules, pools) lives as long as the worker, so it goes out
    of the collector's sight (a full collection scans only what the samples made since: each
    one was ~0.07-0.1 s of a worker's CPU), and young collections run every ``gen0`` net
    allocations instead of 700."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 1), gen1, gen2)


class Worker:
    """Run with ``await Worker(...).run()``; ``stop()`` (SIGTERM) stops claiming, lets held
    samples finish for ``drain_timeout_s``, hands the rest back (running -> queued) and returns
    a report of what it held."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        db_url: str,
        redis: object,
        ns: str,
        capabilities: Mapping[str, Capabilities],
        connectors: Mapping[str, Connector],
        archive: object = None,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        """``on_started`` runs once the start-up is done (pools open, URL rules loaded, groups
        made), before the first claim: the worker process's entry points pass
        ``quiet_collector`` there. The collector is the process's, not the worker's: a Worker
        run in another process (tests, the demo) leaves it alone."""
        self.s = settings
        self.on_started = on_started
        self.ctx = Context(
            settings,
            db_url=db_url,
            redis=redis,
            ns=ns,
            archive=archive,
            recoverable_platforms=[p for p, c in capabilities.items() if c.recoverable],
        )
        self.id = settings.worker_id
        self.lanes = {
            p: Lane(self.ctx, p, capabilities[p], connectors[p], self._start, self.held_count)
            for p in settings.platforms
        }

    # The archive may be set after construction (tests, the demo's wiring).
    @property
    def archive(self) -> object:
        return self.ctx.archive

    @archive.setter
    def archive(self, value: object) -> None:
        self.ctx.archive = value

    @property
    def stopping(self) -> asyncio.Event:
        return self.ctx.stopping

    @property
    def report(self) -> dict[str, int]:
        return self.ctx.report

    def _start(self, lane: Lane, h: Held) -> asyncio.Task[None]:
        return asyncio.create_task(Attempt(self.ctx, lane, h).run(), name=f"sample:{h.sample_id}")

    def held(self) -> list[Held]:
        return [h for lane in self.lanes.values() for h in lane.held.values()]

    def held_count(self) -> int:
        return sum(len(lane.held) for lane in self.lanes.values())

    def stop(self) -> None:
        self.ctx.stopping.set()

    async def run(self) -> dict[str, int]:
        ctx = self.ctx
        await asyncio.to_thread(ctx.open)
        try:
            shots = ctx.archive is not None
            if shots:  # answers will be recorded: their citations' URL rules, loaded now
                await asyncio.to_thread(urls.warm)
            for lane in self.lanes.values():
                await sc.ensure_group(ctx.redis, lane.key)
                if lane.caps.screenshot and shots:
                    await sc.ensure_group(ctx.redis, lane.shot_key)
            if self.on_started is not None:
                self.on_started()
            tasks = []
            gate = PlatformGate(self.s.platform_urls, self.s.platform_wait_s)
            for lane in self.lanes.values():
                claims = gate.gated(lane.platform, lane.claimer)
                tasks += [asyncio.create_task(lane.reader()), asyncio.create_task(claims)]
                tasks.append(asyncio.create_task(lane.reclaimer()))
                if lane.caps.screenshot and shots:
                    tasks.append(asyncio.create_task(screenshots(ctx, lane)))
            tasks.append(asyncio.create_task(renewer(ctx, self.held)))
            if any(lane.callbacks_on for lane in self.lanes.values()):
                tasks.append(asyncio.create_task(listen(ctx.db_url, ctx.wakes, ctx.stopping)))
            event(log, "worker.started", worker=self.id, platforms=list(self.lanes))
            await ctx.stopping.wait()
            for lane in self.lanes.values():
                lane.wake.set()
                lane.room_free.set()
            await self._drain()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await ctx.finishes.drain()
            await ctx.acks.drain()
        finally:
            await asyncio.to_thread(ctx.close)
        event(log, "worker.stopped", worker=self.id, **ctx.report)
        return ctx.report

    async def _drain(self) -> None:
        """SIGTERM: wait for held samples to finish, then hand the rest back (R11). A sample
        whose last write is already on its way is waited for, never raced by a hand-back."""
        deadline = time.monotonic() + self.s.drain_timeout_s
        while self.held_count() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        leftovers = self.held()
        for h in leftovers:
            if h.task is not None and not h.ending:
                h.task.cancel()
        running = [h.task for h in leftovers if h.task is not None]
        if running:
            await asyncio.wait(running, timeout=self.s.lease_s)
        # Acceptances still queued are written before the hand-back: the next worker then
        # follows the upstream task instead of looking it up.
        await self.ctx.drain_writes()
        await self.ctx.finishes.drain()
        back = [h for h in leftovers if self.lanes[h.row["platform"]].held.get(h.sample_id) is h]
        if back:
            items = [
                complete.Finish(
                    h.sample_id,
                    h.token,
                    "queued",
                    reason="handed_back",
                    accept=h.acceptance_unconfirmed(),
                    upstream_id=h.upstream_id,
                )
                for h in back
            ]
            res = await self.ctx.db(complete.finish_batch, owner=self.id, items=items)
            self.ctx.log_ended(items, res.done)
            self.ctx.report["handed_back"] += len(res.done)
            for h in back:
                for e in h.entries:
                    self.ctx.acks.submit(e)
                self.lanes[h.row["platform"]].release(h)
        IN_FLIGHT.set(self.held_count())
