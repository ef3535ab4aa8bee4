"""The asyncio worker (R8-R15, D3, D4): one process, thousands of samples in flight.

Per platform a *lane* reads its collect stream through the consumer group (XREADGROUP with a
bounded BLOCK: no busy polling) and claims due samples from PostgreSQL in batches, fairly across
tenants. Stream entries are wake-up hints that name a sample (R8): PostgreSQL decides what is
due, so a lost or trimmed entry delays work but never loses it, and a flood from one tenant
cannot hold back another (R10).

A claimed sample runs as its own task: submit (acceptance record committed first) -> poll with
an interval that grows with task age -> fetch evidence -> archive -> one fenced completion
transaction (result, transitions, attempt, ledger charge, completion outbox row) -> XACK.
Claims, acceptances, completions and lease renewals are batched: the database is the bottleneck
(DESIGN.md section 7). Database calls run in threads on a bounded sync pool (D8).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from psycopg_pool import ConnectionPool

from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.connectors.base import (
    Acceptance,
    Connector,
    ConnectorError,
    Evidence,
    SubmitRequest,
)
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.domain.retry import (
    ErrorFacts,
    PollSchedule,
    RetryPolicy,
    classify,
    dead_letter_due,
    poll_interval,
)
from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import (
    ACCEPT_LATENCY,
    EXECUTION_TIME,
    IN_FLIGHT,
    PROCESSED,
    QUEUE_WAIT,
    RETRIES,
    STALE_WRITES,
)
from geo_pipeline.store import db as dbmod
from geo_pipeline.store import execution as ex
from geo_pipeline.streams import consumer as sc
from geo_pipeline.streams.keys import GROUP, collect_stream, screenshot_stream, stream_key
from geo_pipeline.streams.ratelimit import SharedRateLimiter
from geo_pipeline.worker.crash import crashpoint
from geo_pipeline.worker.evidence_bridge import archive_for_completion

log = logging.getLogger("geo_pipeline.worker")

# An uncertain sample of a platform without lookup waits for an operator (R12): park it.
UNCERTAIN_PARK_S = 7 * 24 * 3600.0


def default_worker_id() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerSettings:
    platforms: Sequence[str]
    worker_id: str = field(default_factory=default_worker_id)
    lease_s: float = 30.0
    renew_every_s: float | None = None  # default lease / 3
    claim_batch: int = 200
    max_in_flight: int = 5000  # per lane (platform): a slow platform never eats another's room
    block_ms: int = 1000
    idle_claim_s: float = 1.0  # an idle lane still asks PostgreSQL this often (sweeper backup)
    reclaim_idle_ms: int = 30_000
    reclaim_every_s: float = 5.0
    max_deliveries: int = 5
    flush_s: float = 0.005  # batching window for completion writes
    # On platforms that can look a request up by its idempotency key, an upstream acceptance
    # is written within this window, or with the attempt's end if that comes first (one write
    # instead of two). A crash inside the window leaves the acceptance record at 'sending' and
    # recovery looks the request up (R9, R12). Platforms without lookup get flush_s: there an
    # unrecorded acceptance would need an operator.
    accept_defer_s: float = 1.0
    batch_max: int = 500
    finish_concurrency: int = 2  # completion batches in flight (evidence inserts overlap)
    aging_s: float = 60.0
    poll: PollSchedule = field(default_factory=PollSchedule)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    drain_timeout_s: float = 10.0
    db_pool_size: int = 6
    lookup_tries: int = 3
    # Upstream calls in flight per platform: waiting happens here, not inside the HTTP client's
    # connection pool (whose pool timeout would turn a long queue into false transient errors).
    max_concurrent_calls: int = 64
    screenshot_retry_s: float = 2.0  # a pending screenshot is asked for again after this
    # Claim no more new submissions than the platform's submit rate admits in this many
    # seconds: a sample claimed but waiting for a rate-limit token holds its place, so a large
    # tenant's backlog would queue here in arrival order and the fair choice made in
    # PostgreSQL would be lost (R10).
    submit_horizon_s: float = 0.5


@dataclass
class Held:
    """A sample this worker holds a lease on, with the stream entries to ack when done."""

    row: dict[str, Any]
    claimed_at: float
    entries: list[tuple[str, str]] = field(default_factory=list)  # (stream key, message id)
    # An acceptance queued for writing but not yet confirmed written (see accept_defer_s).
    accept: asyncio.Future[bool] | None = None
    lost: bool = False
    cancelled: bool = False
    task: asyncio.Task[None] | None = None
    awaits_submit: bool = False  # counted in Lane.submit_waiting until it has its token

    @property
    def sample_id(self) -> str:
        return str(self.row["sample_id"])

    @property
    def token(self) -> int:
        return int(self.row["fencing_token"])


T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    """Group commit: collects items for ``window_s`` (or ``max_items``) and runs ONE call for the
    batch; each caller awaits its own item's result. At most ``concurrency`` calls run at once;
    items arriving meanwhile form the next batch, which starts as soon as a call returns. Turns
    thousands of tiny transactions into a few large ones and keeps batches of one run from
    queueing behind each other's row locks (e.g. the run's billing account)."""

    def __init__(
        self,
        run: Callable[[list[T]], Awaitable[Mapping[int, R]]],
        window_s: float,
        max_items: int,
        concurrency: int = 1,
    ) -> None:
        self._run = run
        self._window = window_s
        self._max = max_items
        self._concurrency = concurrency
        self._running = 0
        self._items: list[tuple[T, asyncio.Future[R]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, item: T) -> asyncio.Future[R]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._items.append((item, fut))
        if self._running >= self._concurrency:
            return fut  # picked up when a running call returns
        if len(self._items) >= self._max:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        return fut

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items or self._running >= self._concurrency:
            return
        batch, self._items = self._items[: self._max], self._items[self._max :]
        self._running += 1
        task = asyncio.get_running_loop().create_task(self._go(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _go(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([b[0] for b in batch])
        except BaseException as exc:  # every waiter learns of the failure
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        else:
            for i, (_, fut) in enumerate(batch):
                if not fut.done():
                    fut.set_result(results[i])
        finally:
            self._running -= 1
            if self._items:  # they waited for us already: no second window
                self._flush()

    def withdraw(self, fut: asyncio.Future[R]) -> T | None:
        """Take back an item that has not been handed to a call yet (its future is cancelled);
        None if it is already being written or done."""
        for i, (item, f) in enumerate(self._items):
            if f is fut:
                del self._items[i]
                fut.cancel()
                if not self._items and self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                return item
        return None

    async def drain(self) -> None:
        self._flush()
        while self._tasks or self._items:
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            else:
                self._flush()
                await asyncio.sleep(0)


class Lane:
    """One platform: its stream, its room, its limiters, its connector."""

    def __init__(self, worker: Worker, platform: str, caps: Capabilities, connector: Connector):
        self.w = worker
        self.platform = platform
        self.caps = caps
        self.connector = connector
        self.key = stream_key(worker.ns, collect_stream(platform))
        self.held: dict[str, Held] = {}
        self.wake = asyncio.Event()
        self.room_free = asyncio.Event()
        self.inbox: list[sc.Entry] = []
        rl = caps.rate_limits
        self.submit_limit = SharedRateLimiter(
            worker.redis, worker.ns, platform, "submit", rl.submit_per_second
        )
        self.poll_limit = SharedRateLimiter(
            worker.redis, worker.ns, platform, "poll", rl.poll_per_second
        )
        self.calls = asyncio.Semaphore(worker.s.max_concurrent_calls)
        # Screenshots have their own stream, limiter and call budget: never starve text (R10).
        self.shot_key = stream_key(worker.ns, screenshot_stream(platform))
        self.shot_limit = SharedRateLimiter(
            worker.redis, worker.ns, platform, "screenshot", rl.screenshot_per_second
        )
        self.shot_calls = asyncio.Semaphore(max(1, worker.s.max_concurrent_calls // 4))
        # New submissions claimed but still waiting for a submit token (submit_horizon_s).
        rate = caps.rate_limits.submit_per_second
        self.submit_budget = max(1, int(rate * worker.s.submit_horizon_s))
        self.submit_waiting = 0
        self.budget_limited = False

    def room(self) -> int:
        return self.w.s.max_in_flight - len(self.held)

    def submit_started(self, h: Held) -> None:
        """``h`` got its submit token (or will not submit): its place in the budget is free."""
        if not h.awaits_submit:
            return
        h.awaits_submit = False
        self.submit_waiting -= 1
        if self.budget_limited and self.submit_waiting <= self.submit_budget // 2:
            self.budget_limited = False
            self.wake.set()


class Worker:
    """Run with ``await Worker(...).run()``; ``stop()`` (SIGTERM) stops claiming, lets held
    samples finish for ``drain_timeout_s``, hands the rest back (running -> queued) and returns
    a report of what it held."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        db_url: str,
        redis: Any,
        ns: str,
        capabilities: Mapping[str, Capabilities],
        connectors: Mapping[str, Connector],
        archive: Any = None,
    ) -> None:
        self.s = settings
        self.db_url = db_url
        self.redis = redis
        self.ns = ns
        self.caps = capabilities
        self.archive = archive
        self.id = settings.worker_id
        self.consumer = self.id.replace(":", "-")
        self.pool: ConnectionPool[dbmod.Conn] | None = None
        self.lanes = {p: Lane(self, p, capabilities[p], connectors[p]) for p in settings.platforms}
        self.lookup_platforms = [p for p, c in capabilities.items() if c.lookup_by_key]
        self.stopping = asyncio.Event()
        self.accepts: Batcher[ex.AcceptanceRecord, bool] = Batcher(
            self._accept_batch, settings.flush_s, settings.batch_max
        )
        self.accepts_deferred: Batcher[ex.AcceptanceRecord, bool] = Batcher(
            self._accept_batch, settings.accept_defer_s, settings.batch_max * 4
        )
        self.finishes: Batcher[ex.Finish, str | None] = Batcher(
            self._finish_batch, settings.flush_s, settings.batch_max, settings.finish_concurrency
        )
        self.acks: Batcher[tuple[str, str], bool] = Batcher(self._ack_batch, settings.flush_s, 5000)
        self.report: dict[str, int] = {
            "claimed": 0,
            "completed": 0,
            "failed": 0,
            "retried": 0,
            "handed_back": 0,
            "stale": 0,
            "lost": 0,
            "uncertain": 0,
            "dead_lettered": 0,
        }
        self._db_threads = ThreadPoolExecutor(settings.db_pool_size + 2, "geo-db")

    # ------------------------------------------------------------------ db helpers
    async def db(self, fn: Callable[..., R], *args: Any, **kw: Any) -> R:
        assert self.pool is not None
        pool = self.pool

        def call() -> R:
            with pool.connection() as conn:
                return fn(conn, *args, **kw)

        # Database calls get threads of their own: evidence uploads (default executor) must
        # never queue a completion batch or a lease renewal behind them.
        return await asyncio.get_running_loop().run_in_executor(self._db_threads, call)

    async def _accept_batch(self, items: list[ex.AcceptanceRecord]) -> dict[int, bool]:
        done = await self.db(ex.record_acceptances, owner=self.id, items=items)
        return {i: it.sample_id in done for i, it in enumerate(items)}

    async def _finish_batch(self, items: list[ex.Finish]) -> dict[int, str | None]:
        try:
            res = await self.db(ex.finish_batch, owner=self.id, items=items)
            self._log_ended(items, res.done)
        except Exception:
            if len(items) == 1:
                raise
            # One bad item must not sink its neighbours: write them one by one.
            log.exception("finish batch failed; retrying one by one")
            out: dict[int, str | None] = {}
            for i, it in enumerate(items):
                try:
                    r = await self.db(ex.finish_batch, owner=self.id, items=[it])
                    out[i] = r.done.get(it.sample_id)
                except Exception:
                    log.exception("finish failed", extra={"sample_id": it.sample_id})
                    out[i] = None
            return out
        return {i: res.done.get(it.sample_id) for i, it in enumerate(items)}

    def _log_ended(self, items: Sequence[ex.Finish], done: Mapping[str, str]) -> None:
        """D6: one structured event per completion batch, naming every sample with its state
        and reason (batched, so a log service is not sent thousands of lines a second)."""
        if not items or not log.isEnabledFor(logging.INFO):
            return
        event(
            log,
            "samples.ended",
            worker=self.id,
            count=len(done),
            stale=len(items) - len(done),
            samples=[
                {"sample_id": i.sample_id, "state": done.get(i.sample_id, "stale"),
                 "reason": i.reason, "outcome": i.outcome}
                for i in items
            ],
        )  # fmt: skip

    async def _ack_batch(self, items: list[tuple[str, str]]) -> dict[int, bool]:
        by_stream: dict[str, list[str]] = {}
        for key, mid in items:
            by_stream.setdefault(key, []).append(mid)
        pipe = self.redis.pipeline(transaction=False)
        for key, mids in by_stream.items():
            pipe.xack(key, GROUP, *mids)
        await pipe.execute()
        return dict.fromkeys(range(len(items)), True)

    # ------------------------------------------------------------------ main loop
    async def run(self) -> dict[str, int]:
        self.pool = ConnectionPool(
            dbmod.database_url(self.db_url),
            min_size=1,
            max_size=self.s.db_pool_size,
            kwargs={"row_factory": dbmod.dict_row, "autocommit": True},
            name="geo-worker",
            open=False,
        )
        await asyncio.to_thread(self.pool.open, True, 30)
        try:
            for lane in self.lanes.values():
                await sc.ensure_group(self.redis, lane.key)
                if lane.caps.screenshot and self.archive is not None:
                    await sc.ensure_group(self.redis, lane.shot_key)
            tasks = []
            for lane in self.lanes.values():
                tasks.append(asyncio.create_task(self._reader(lane)))
                tasks.append(asyncio.create_task(self._claimer(lane)))
                if lane.caps.screenshot and self.archive is not None:
                    tasks.append(asyncio.create_task(self._screenshots(lane)))
            tasks.append(asyncio.create_task(self._renewer()))
            tasks.append(asyncio.create_task(self._reclaimer()))
            event(log, "worker.started", worker=self.id, platforms=list(self.lanes))
            await self.stopping.wait()
            for lane in self.lanes.values():
                lane.wake.set()
                lane.room_free.set()
            await self._drain()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.finishes.drain()
            await self.acks.drain()
        finally:
            await asyncio.to_thread(self.pool.close)
            self._db_threads.shutdown(wait=False)
        event(log, "worker.stopped", worker=self.id, **self.report)
        return self.report

    def stop(self) -> None:
        self.stopping.set()

    def held_count(self) -> int:
        return sum(len(lane.held) for lane in self.lanes.values())

    async def _drain(self) -> None:
        """SIGTERM: wait for held samples to finish, then hand the rest back (R11)."""
        deadline = time.monotonic() + self.s.drain_timeout_s
        while self.held_count() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        leftovers = [h for lane in self.lanes.values() for h in lane.held.values()]
        for h in leftovers:
            if h.task is not None:
                h.task.cancel()
        await asyncio.gather(*[h.task for h in leftovers if h.task], return_exceptions=True)
        # Acceptances still queued are written before the hand-back: the next worker then
        # follows the upstream task instead of looking it up.
        await self.accepts.drain()
        await self.accepts_deferred.drain()
        if leftovers:
            res = await self.db(
                ex.finish_batch,
                owner=self.id,
                items=[
                    ex.Finish(h.sample_id, h.token, "queued", reason="handed_back")
                    for h in leftovers
                ],
            )
            self.report["handed_back"] += len(res.done)
            for h in leftovers:
                for e in h.entries:
                    self.acks.submit(e)
            for lane in self.lanes.values():
                lane.held.clear()
        IN_FLIGHT.set(0)

    async def _reader(self, lane: Lane) -> None:
        """Blocking reads of the lane's stream (D3); entries wake the claimer."""
        while not self.stopping.is_set():
            if lane.room() <= 0 or len(lane.inbox) >= self.s.claim_batch * 4:
                lane.room_free.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lane.room_free.wait(), 1.0)
                continue
            try:
                reply = await self.redis.xreadgroup(
                    GROUP,
                    self.consumer,
                    {lane.key: ">"},
                    count=self.s.claim_batch,
                    block=self.s.block_ms,
                )
            except Exception as exc:
                if "NOGROUP" in str(exc):  # the stream was deleted: recreate, carry on
                    await sc.ensure_group(self.redis, lane.key)
                    lane.wake.set()
                    continue
                log.warning("stream read failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            entries = sc.read_entries(lane.key, reply)
            if entries:
                crashpoint("after_read_before_claim")
                lane.inbox.extend(entries)
                lane.wake.set()

    async def _claimer(self, lane: Lane) -> None:
        """Claim due work whenever woken (entries, freed room, a retry coming due) or every
        ``idle_claim_s``; keep claiming while batches come back full."""
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lane.wake.wait(), self.s.idle_claim_s)
            lane.wake.clear()
            if self.stopping.is_set():
                break
            try:
                while not self.stopping.is_set():
                    full = await self._claim_round(lane)
                    if not full:
                        break
            except Exception:
                log.exception("claim round failed")
                await asyncio.sleep(0.5)

    async def _claim_round(self, lane: Lane) -> bool:
        entries, lane.inbox = lane.inbox, []
        budget = lane.submit_budget - lane.submit_waiting
        want = min(lane.room(), self.s.claim_batch, budget)
        lane.budget_limited = budget < min(lane.room(), self.s.claim_batch)
        rows: list[dict[str, Any]] = []
        if want > 0:
            rows = await self.db(
                ex.claim_fair,
                owner=self.id,
                platforms=[lane.platform],
                want=want,
                lease_s=self.s.lease_s,
                lookup_platforms=self.lookup_platforms,
                aging_s=self.s.aging_s,
            )
        now = time.monotonic()
        for row in rows:
            h = Held(row, now)
            if row["was"] == "planned":
                h.awaits_submit = True
                lane.submit_waiting += 1
            lane.held[h.sample_id] = h
            QUEUE_WAIT.labels(lane.platform).observe(max(0.0, float(row["queue_wait_s"])))
        self.report["claimed"] += len(rows)
        IN_FLIGHT.set(self.held_count())
        if rows and log.isEnabledFor(logging.INFO):  # D6, one event per claim batch
            event(
                log,
                "samples.started",
                worker=self.id,
                platform=lane.platform,
                count=len(rows),
                samples=[{"sample_id": r["sample_id"], "attempt_no": r["attempt_no"],
                          "token": r["fencing_token"]} for r in rows],
            )  # fmt: skip
        to_ack: list[tuple[str, str]] = []
        for e in entries:
            h2 = lane.held.get(e.sample_id or "")
            if h2 is not None:
                h2.entries.append((e.stream, e.message_id))
            else:  # already processed, held elsewhere, or not due: the database decides
                to_ack.append((e.stream, e.message_id))
        for a in to_ack:
            self.acks.submit(a)
        for row in rows:
            h = lane.held[row["sample_id"]]
            h.task = asyncio.create_task(self._run_sample(lane, h))
        return want > 0 and len(rows) >= want

    # ------------------------------------------------------------------ screenshots
    async def _screenshots(self, lane: Lane) -> None:
        """The screenshot stream of one platform: download late screenshots, archive them and
        move the evidence layer. A pending one stays unacked and is asked for again; if this
        worker dies, the entry is reclaimed like any other."""
        retry: dict[str, float] = {}  # message id -> when to ask again
        waiting: dict[str, str] = {}  # sample id -> the message id being retried
        while not self.stopping.is_set():
            try:
                reply = await self.redis.xreadgroup(
                    GROUP, self.consumer, {lane.shot_key: ">"}, count=50, block=self.s.block_ms
                )
            except Exception as exc:
                if "NOGROUP" in str(exc):
                    await sc.ensure_group(self.redis, lane.shot_key)
                    continue
                log.warning("screenshot stream read failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            entries = sc.read_entries(lane.shot_key, reply)
            # Entries whose screenshot was pending come back after screenshot_retry_s.
            now = time.monotonic()
            due = [mid for mid, at in retry.items() if at <= now]
            if due:
                for mid in due:
                    retry.pop(mid, None)
                claimed = await self.redis.xclaim(lane.shot_key, GROUP, self.consumer, 0, due)
                entries += sc.entries_of(lane.shot_key, claimed)
            for e in entries:
                sid = e.sample_id or ""
                if waiting.get(sid, e.message_id) != e.message_id:
                    # A second hint for a screenshot already being waited on (the sweeper
                    # renews hints Redis may have lost): one wait per sample is enough.
                    self.acks.submit((e.stream, e.message_id))
                    continue
                try:
                    done = await self._one_screenshot(lane, e)
                except Exception:
                    log.exception("screenshot failed", extra={"sample_id": e.sample_id})
                    done = False
                if done:
                    waiting.pop(sid, None)
                    self.acks.submit((e.stream, e.message_id))
                else:
                    waiting[sid] = e.message_id
                    retry[e.message_id] = time.monotonic() + self.s.screenshot_retry_s

    async def _one_screenshot(self, lane: Lane, e: sc.Entry) -> bool:
        from geo_pipeline.evidence import archive_screenshot
        from geo_pipeline.worker.evidence_bridge import sample_ref

        row = await self.db(ex.sample_for_screenshot, e.sample_id or "")
        if (
            row is None
            or row["collection_state"] != "completed"
            # 'stored' under a required policy means the screenshot is archived already; an
            # optional one is still fetched (archiving is idempotent, the state stays stored).
            or (row["evidence_state"] == "stored" and row["screenshot_policy"] == "required")
            or not row["upstream_id"]
        ):
            return True  # nothing (more) to do
        await lane.shot_limit.acquire()
        async with lane.shot_calls:
            att = await lane.connector.fetch_screenshot(row["upstream_id"])
        if att.status == "pending":
            return False
        archived = await asyncio.to_thread(
            archive_screenshot, self.archive, sample_ref(row), int(row["attempt_no"]), att
        )
        await self.db(ex.record_late_screenshot, archived, actor=self.id)
        return True

    # ------------------------------------------------------------------ leases
    async def _renewer(self) -> None:
        every = self.s.renew_every_s or self.s.lease_s / 3.0
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), every)
            try:
                await self._renew_once()
            except Exception:
                log.exception("lease renewal failed")

    async def _renew_once(self) -> None:
        held = [h for lane in self.lanes.values() for h in lane.held.values()]
        if not held:
            return
        ours = await self.db(
            ex.renew,
            owner=self.id,
            lease_s=self.s.lease_s,
            held=[(h.sample_id, h.token) for h in held],
        )
        for h in held:
            if h.sample_id not in ours:
                if not h.lost:
                    h.lost = True
                    self.report["lost"] += 1
                    STALE_WRITES.labels("renew").inc()
                    # Someone else took it over (we stalled past the lease): stop working on it.
                    if h.task is not None and not h.task.done():
                        h.task.cancel()
            elif ours[h.sample_id]:
                h.cancelled = True
        # Keep our pending entries from looking idle, so no reclaimer takes them over.
        by_stream: dict[str, list[str]] = {}
        for h in held:
            for key, mid in h.entries:
                by_stream.setdefault(key, []).append(mid)
        for key, mids in by_stream.items():
            with contextlib.suppress(Exception):
                await self.redis.xclaim(key, GROUP, self.consumer, 0, mids, justid=True)

    async def _reclaimer(self) -> None:
        """Take over entries idle too long (their worker died); dead-letter the ones delivered
        too often (R9). Their samples come back through claims, never blind re-submission."""
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.s.reclaim_every_s)
            if self.stopping.is_set():
                return
            for lane in self.lanes.values():
                try:
                    await self.reclaim_once(lane)
                except Exception as exc:
                    if "NOGROUP" in str(exc):
                        await sc.ensure_group(self.redis, lane.key)
                    else:
                        log.exception("reclaim failed")

    async def reclaim_once(self, lane: Lane) -> int:
        got = await sc.autoclaim(self.redis, lane.key, self.consumer, self.s.reclaim_idle_ms)
        if got.deleted:  # Redis 6.2 leaves deleted ids in the PEL; ack them away
            await self.redis.xack(lane.key, GROUP, *got.deleted)
        if not got.entries:
            return 0
        counts = await sc.delivery_counts(self.redis, lane.key, [e.message_id for e in got.entries])
        keep: list[sc.Entry] = []
        for e in got.entries:
            n = counts.get(e.message_id, 1)
            if dead_letter_due(n, self.s.max_deliveries):
                await sc.move_to_dead(self.redis, self.ns, e, n, "max_deliveries")
                await self.db(
                    ex.record_dead_letter,
                    stream=e.stream,
                    message_id=e.message_id,
                    event_id=e.fields.get("event_id"),
                    sample_id=e.sample_id,
                    deliveries=n,
                    reason="max_deliveries",
                )
                from geo_pipeline.observability.metrics import DEAD_LETTERS

                DEAD_LETTERS.labels(e.stream).inc()
                self.report["dead_lettered"] += 1
            else:
                keep.append(e)
        if keep:
            lane.inbox.extend(keep)
            lane.wake.set()
        return len(got.entries)

    # ------------------------------------------------------------------ one sample
    async def _run_sample(self, lane: Lane, h: Held) -> None:
        try:
            await self._execute(lane, h)
        except asyncio.CancelledError:
            if self.stopping.is_set() and not h.lost:
                raise  # the drain hands it back
            lane.held.pop(h.sample_id, None)
        except Exception as exc:
            # An unexpected error: hand the sample back with a short delay; never lose it.
            log.exception("sample failed unexpectedly", extra={"sample_id": h.sample_id})
            await self._end(
                lane,
                h,
                ex.Finish(
                    h.sample_id,
                    h.token,
                    "queued",
                    reason="worker_error",
                    delay_s=5.0,
                    error_detail=type(exc).__name__,
                ),
            )
        finally:
            lane.submit_started(h)
            if h.sample_id in lane.held and lane.held[h.sample_id] is h and h.lost:
                lane.held.pop(h.sample_id, None)
            IN_FLIGHT.set(self.held_count())
            lane.room_free.set()
            lane.wake.set()

    def _request(self, lane: Lane, row: Mapping[str, Any]) -> SubmitRequest:
        return SubmitRequest(
            sample_id=row["sample_id"],
            attempt_no=int(row["attempt_no"]),
            tenant_id=row["tenant_id"],
            question=row["question"],
            platform=row["platform"],
            device=row["device"],
            region=row["region"],
            mode=row["mode"],
            screenshot=row["screenshot_policy"] != "off" and lane.caps.screenshot,
        )

    def _policy(self, row: Mapping[str, Any]) -> RetryPolicy:
        """The worker's retry policy with the run's own max_attempts, when its config sets one."""
        ma = row.get("max_attempts")
        return dataclasses.replace(self.s.retry, max_attempts=int(ma)) if ma else self.s.retry

    async def _execute(self, lane: Lane, h: Held) -> None:
        row = h.row
        req = self._request(lane, row)
        sub = row["submission_state"]
        upstream_id: str | None = row.get("upstream_id")
        accepted_age = float(row.get("accepted_age_s") or 0.0)
        inline = False
        if sub == "submitting" and row["was"] == "planned":
            if h.cancelled:
                await self._end(lane, h, self._abandon(h, "CANCELLED", fail=True))
                return
            crashpoint("after_claim_before_submit")
            acc = await self._submit(lane, h, req)
            if acc is None:
                return
            upstream_id = acc.upstream_id
            inline = acc.inline_result is not None
            accepted_age = 0.0
        elif sub in ("submitting", "uncertain"):
            acc = await self._recover(lane, h, req)
            if acc is None:
                return
            upstream_id = acc.upstream_id
            accepted_age = 0.0
        if upstream_id is None:  # accepted without an id cannot happen (schema CHECK)
            raise RuntimeError(f"sample {h.sample_id} is accepted without an upstream id")
        await self._follow(lane, h, req, upstream_id, accepted_age, inline)

    async def _submit(self, lane: Lane, h: Held, req: SubmitRequest) -> Acceptance | None:
        await lane.submit_limit.acquire()
        lane.submit_started(h)
        t0 = time.monotonic()
        try:
            async with lane.calls:
                acc = await lane.connector.submit(req)
        except ConnectorError as exc:
            if exc.error_class == "acceptance_unknown":
                return await self._recover(lane, h, req)
            await self._submit_failed(lane, h, exc)
            return None
        crashpoint("accepted_not_recorded")
        ACCEPT_LATENCY.labels(lane.platform).observe(time.monotonic() - t0)
        # Queued, not awaited: polling may start at once; _end folds a still-queued acceptance
        # into the attempt's last write, or waits for it.
        h.accept = self._accepts_for(lane).submit(
            ex.AcceptanceRecord(h.sample_id, h.token, acc.upstream_id, "response")
        )
        return acc

    def _accepts_for(self, lane: Lane) -> Batcher[ex.AcceptanceRecord, bool]:
        """Acceptances wait up to accept_defer_s where the platform can look a request up (a
        crash then costs a lookup); elsewhere they are written within flush_s."""
        return self.accepts_deferred if lane.caps.lookup_by_key else self.accepts

    async def _recover(self, lane: Lane, h: Held, req: SubmitRequest) -> Acceptance | None:
        """Acceptance unknown (R12): look the request up by its idempotency key; never re-send.
        Found -> accepted; verified absent -> a new attempt; no lookup -> uncertain."""
        key = req.idempotency_key
        if not lane.caps.lookup_by_key:
            await self._park_uncertain(lane, h, "acceptance_unknown:no_lookup", UNCERTAIN_PARK_S)
            return None
        last: Exception | None = None
        for i in range(self.s.lookup_tries):
            await self.db(ex.note_lookup, key)
            try:
                await lane.poll_limit.acquire()
                async with lane.calls:
                    found = await lane.connector.lookup(key)
            except NotImplementedError:
                await self._park_uncertain(
                    lane, h, "acceptance_unknown:no_lookup", UNCERTAIN_PARK_S
                )
                return None
            except ConnectorError as exc:
                last = exc
                await asyncio.sleep(min(2.0, 0.2 * (2**i)))
                continue
            if found is None:
                await self._end(lane, h, self._abandon(h, "lookup:absent", fail=h.cancelled))
                return None
            ok = await self.accepts.submit(
                ex.AcceptanceRecord(h.sample_id, h.token, found.upstream_id, "lookup")
            )
            if not ok:
                self._stale(lane, h)
                return None
            return found
        detail = f"lookup failed: {type(last).__name__}" if last else "lookup failed"
        await self._park_uncertain(lane, h, detail, self.s.retry.max_delay_s)
        return None

    def _abandon(self, h: Held, reason: str, *, fail: bool) -> ex.Finish:
        """The attempt was never accepted upstream: close it; retry now or fail."""
        return ex.Finish(
            h.sample_id,
            h.token,
            "failed" if fail else "queued",
            sub_to="planned",
            reason=reason,
            outcome="cancelled" if reason == "CANCELLED" else "not_accepted",
            req_state="not_accepted",
        )

    async def _park_uncertain(self, lane: Lane, h: Held, reason: str, delay_s: float) -> None:
        self.report["uncertain"] += 1
        await self._end(
            lane,
            h,
            ex.Finish(
                h.sample_id,
                h.token,
                "queued",
                sub_to="uncertain",
                reason=reason,
                delay_s=delay_s,
                outcome="uncertain",
                req_state="uncertain",
            ),
        )

    async def _submit_failed(self, lane: Lane, h: Held, exc: ConnectorError) -> None:
        row = h.row
        d = classify(
            ErrorFacts(
                exc.error_class,
                "submit",
                int(row["attempt_no"]),
                int(row.get("rate_limited") or 0),
                float(row.get("elapsed_s") or 0.0) + (time.monotonic() - h.claimed_at),
                exc.retry_after_s,
            ),
            self._policy(row),
        )
        fail = d.action != "retry" or h.cancelled
        reason = "CANCELLED" if h.cancelled else (d.reason or exc.error_class)
        if not fail:
            RETRIES.labels(lane.platform, exc.error_class).inc()
        await self._end(
            lane,
            h,
            ex.Finish(
                h.sample_id,
                h.token,
                "failed" if fail else "queued",
                sub_to="planned",
                reason=reason,
                delay_s=d.delay_s,
                outcome="not_accepted",
                error_class=exc.error_class,
                error_detail=str(exc)[:300],
                retry_after_ms=int(exc.retry_after_s * 1000) if exc.retry_after_s else None,
                req_state="not_accepted",
            ),
        )

    async def _follow(
        self,
        lane: Lane,
        h: Held,
        req: SubmitRequest,
        upstream_id: str,
        accepted_age: float,
        inline: bool,
    ) -> None:
        """Poll the accepted task until it ends (interval grows with its age, R14), fetch the
        evidence, archive it, and write the completion."""
        started = time.monotonic() - accepted_age
        poll_errors = 0
        state = "completed" if inline else "pending"
        first = True
        while state not in ("completed", "failed"):
            age = time.monotonic() - started
            await asyncio.sleep(self.s.poll.first_s if first else poll_interval(age, self.s.poll))
            first = False
            await lane.poll_limit.acquire()
            try:
                async with lane.calls:
                    pr = await lane.connector.poll(upstream_id)
                state = pr.state
                poll_errors = 0
            except ConnectorError as exc:
                poll_errors += 1
                d = classify(
                    ErrorFacts(
                        exc.error_class,
                        "poll",
                        int(h.row["attempt_no"]),
                        poll_errors=poll_errors,
                        retry_after_s=exc.retry_after_s,
                    ),
                    self._policy(h.row),
                )
                if d.action == "poll_again":
                    await asyncio.sleep(d.delay_s)
                    continue
                await self._fail_accepted(lane, h, exc, d.reason)
                return
        if state == "failed":
            await self._upstream_failed(lane, h, req, upstream_id)
            return
        try:
            await lane.poll_limit.acquire()
            async with lane.calls:
                evidence = await lane.connector.fetch_evidence(upstream_id, req)
        except ConnectorError as exc:
            if exc.error_class == "unparseable":
                # Keep the raw bytes, send to review, never re-ask (R13).
                await self._complete(lane, h, req, upstream_id, None, unparseable=exc)
                return
            if time.monotonic() - started > self._policy(h.row).max_total_s:
                # Accepted long ago and the result still cannot be fetched: R13's total bound.
                await self._fail_accepted(lane, h, exc, f"fetch:{exc.error_class}:budget_exhausted")
                return
            await self._end(
                lane,
                h,
                ex.Finish(
                    h.sample_id,
                    h.token,
                    "queued",
                    reason=f"fetch:{exc.error_class}",
                    delay_s=max(1.0, exc.retry_after_s or 0.0),
                    error_detail=str(exc)[:300],
                ),
            )
            return
        if evidence.collection_state == "failed":
            await self._upstream_failed(lane, h, req, upstream_id, evidence)
            return
        await self._complete(lane, h, req, upstream_id, evidence)

    async def _fail_accepted(
        self, lane: Lane, h: Held, exc: ConnectorError, reason: str | None
    ) -> None:
        """An accepted task we cannot follow any further: fail it with the upstream id kept on
        the sample and no charge we cannot prove; reconciliation will see the platform's line
        and an operator can follow up (R13, R23)."""
        await self._end(
            lane,
            h,
            ex.Finish(
                h.sample_id,
                h.token,
                "failed",
                reason=reason,
                outcome="failed",
                error_class=exc.error_class,
                error_detail=str(exc)[:300],
            ),
        )

    def _charge(
        self, h: Held, upstream_id: str, outcome: str, ev: Evidence | None
    ) -> ChargeRequest:
        row = h.row
        return ChargeRequest(
            tenant_id=row["tenant_id"],
            run_id=row["run_id"],
            sample_id=h.sample_id,
            attempt_no=int(row["attempt_no"]),
            upstream_id=upstream_id,
            platform=row["platform"],
            mode=row["mode"],
            upstream_outcome=outcome,
            deep_thinking_used=bool(ev and ev.deep_thinking_used),
            web_search_used=bool(ev and ev.web_search_used),
            screenshot_used=bool(ev and ev.screenshot_used),
        )

    async def _upstream_failed(
        self, lane: Lane, h: Held, req: SubmitRequest, upstream_id: str, ev: Evidence | None = None
    ) -> None:
        """The accepted task failed upstream: charge per the platform's rule (billing decides),
        then a new attempt if attempts remain (R13, R15)."""
        row = h.row
        d = classify(
            ErrorFacts(
                "upstream_failed",
                "submit",
                int(row["attempt_no"]),
                int(row.get("rate_limited") or 0),
                float(row.get("elapsed_s") or 0.0) + (time.monotonic() - h.claimed_at),
            ),
            self._policy(row),
        )
        retry = d.action == "retry" and not h.cancelled
        if retry:
            RETRIES.labels(lane.platform, "upstream_failed").inc()
        await self._end(
            lane,
            h,
            ex.Finish(
                h.sample_id,
                h.token,
                "queued" if retry else "failed",
                sub_to="planned" if retry else None,
                reason="CANCELLED" if h.cancelled else d.reason,
                delay_s=d.delay_s,
                outcome="failed",
                error_class="upstream_failed",
                charge=self._charge(h, upstream_id, "failed", ev),
            ),
        )

    async def _complete(
        self,
        lane: Lane,
        h: Held,
        req: SubmitRequest,
        upstream_id: str,
        evidence: Evidence | None,
        unparseable: ConnectorError | None = None,
    ) -> None:
        archived, ev_to, ev_reason, want_shot = await archive_for_completion(
            self.archive, h.row, evidence, unparseable
        )
        crashpoint("stored_not_completed")
        await self._end(
            lane,
            h,
            ex.Finish(
                h.sample_id,
                h.token,
                "completed",
                ev_to=ev_to,
                ev_reason=ev_reason,
                outcome="completed",
                deep=evidence.deep_thinking_used if evidence else None,
                shot=evidence.screenshot_used if evidence else None,
                want_shot=want_shot,
                charge=self._charge(h, upstream_id, "completed", evidence),
                archived=archived,
            ),
        )

    async def _end(self, lane: Lane, h: Held, fin: ex.Finish) -> None:
        """The one fenced write that ends the attempt, then XACK (R11, R25)."""
        if h.accept is not None:
            pending, h.accept = h.accept, None
            rec = self._accepts_for(lane).withdraw(pending) if fin.sub_to is None else None
            if rec is not None:
                fin.accept = rec  # written in the same transaction as the end
            elif not await pending:
                self._stale(lane, h)
                return
        state = await self.finishes.submit(fin)
        if state is None:
            self._stale(lane, h)
            return
        EXECUTION_TIME.labels(lane.platform).observe(time.monotonic() - h.claimed_at)
        PROCESSED.labels(lane.platform, fin.outcome or state).inc()
        if state == "completed":
            self.report["completed"] += 1
        elif state == "failed":
            self.report["failed"] += 1
        else:
            self.report["retried"] += 1
            if fin.delay_s < 600:  # a retry coming due wakes the lane (the sweeper backs this up)
                asyncio.get_running_loop().call_later(fin.delay_s + 0.01, lane.wake.set)
        crashpoint("completed_not_acked")
        for e in h.entries:
            self.acks.submit(e)
        lane.held.pop(h.sample_id, None)

    def _stale(self, lane: Lane, h: Held) -> None:
        """Our token is no longer current: the sample was taken over. Drop it, write nothing."""
        self.report["stale"] += 1
        h.lost = True
        for e in h.entries:
            self.acks.submit(e)
        lane.held.pop(h.sample_id, None)
