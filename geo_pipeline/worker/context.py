"""What the worker's rooms share: settings, the database pool's threads, Redis, the archive, the
batched writes and the report. The runner builds one; lanes, attempts, leases and screenshots
receive it and never reach back into the Worker.

Every batched write is retried here only where a retry is safe and is told apart from a stale
token: a write that *failed* raises (its caller retries while its lease holds), a write whose
token moved on returns "not ours" (its caller lets the sample go).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool

from geo_pipeline.evidence.warc_store import astore_batch
from geo_pipeline.flows import complete
from geo_pipeline.observability.logs import event
from geo_pipeline.runtime.crash import crashpoint
from geo_pipeline.settings import settings as app_settings
from geo_pipeline.store import db as dbmod
from geo_pipeline.store import execution as ex
from geo_pipeline.streams.keys import GROUP
from geo_pipeline.worker.batcher import Batcher
from geo_pipeline.worker.callbacks import Wakes
from geo_pipeline.worker.settings import WorkerSettings

log = logging.getLogger("geo_pipeline.worker")

R = TypeVar("R")

# The worker's exit report (and its worker.stopped log event). Counts of attempts, not of
# samples: a sample handed back, let go or taken over is claimed again later (by this worker or
# another) and counted again there, so none of these is lost work.
REPORT_KEYS = (
    "claimed",  # attempts claimed
    "completed",
    "failed",
    "retried",  # ended to be tried again later (rate limit, transient error, deferred poll)
    "handed_back",  # held at SIGTERM, returned to the queue by the drain
    "stale",  # our end was refused: the token had moved on, nothing written
    "taken_over",  # a renewal found another holder: work stopped, nothing more sent
    "let_go",  # self-fenced (lease not provable) or end not written: fenced hand-back
    "uncertain",
    "dead_lettered",
    "resent",
)


class Context:
    def __init__(
        self,
        settings: WorkerSettings,
        *,
        db_url: str,
        redis: Any,
        ns: str,
        archive: Any,
        recoverable_platforms: Sequence[str],
    ) -> None:
        self.s = settings
        self.id = settings.worker_id
        self.consumer = self.id.replace(":", "-")
        self.db_url = db_url
        self.redis = redis
        self.ns = ns
        self.archive = archive
        # Evidence as WARC, one object per completion batch (issue 33; _finish_batch stores).
        self.warc = app_settings().evidence_format == "warc"
        # Read once, like the format: settings() costs ~20 us a call (it keys its cache on the
        # environment), which was per answer on the completion path.
        self.record_cap = app_settings().evidence_record_max_bytes
        self.recoverable_platforms = list(recoverable_platforms)
        self.stopping = asyncio.Event()
        self.wakes = Wakes()  # services' completion callbacks (worker/callbacks.py)
        self.pool: ConnectionPool[dbmod.Conn] | None = None
        self.report: dict[str, int] = dict.fromkeys(REPORT_KEYS, 0)
        self._db_threads = ThreadPoolExecutor(settings.db_pool_size + 2, "geo-db")
        s = settings
        self.accepts: Batcher[ex.AcceptanceRecord, bool] = Batcher(
            self._accept_batch, s.flush_s, s.batch_max
        )
        self.accepts_deferred: Batcher[ex.AcceptanceRecord, bool] = Batcher(
            self._accept_batch, s.accept_defer_s, s.batch_max * 4
        )
        self.sends: Batcher[tuple[str, int], bool] = Batcher(self._send_batch, s.flush_s, 1000)
        self.finishes: Batcher[complete.Finish, str | None] = Batcher(
            self._finish_batch, s.flush_s, s.batch_max, s.finish_concurrency
        )
        self.acks: Batcher[tuple[str, str], bool] = Batcher(self._ack_batch, s.flush_s, 5000)

    # ------------------------------------------------------------------ database
    def open(self) -> None:
        self.pool = ConnectionPool(
            dbmod.database_url(self.db_url),
            min_size=1,
            max_size=self.s.db_pool_size,
            kwargs={"row_factory": dbmod.dict_row, "autocommit": True},
            name="geo-worker",
            open=False,
        )
        self.pool.open(True, 30)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self._db_threads.shutdown(wait=False)

    async def db(self, fn: Callable[..., R], *args: Any, **kw: Any) -> R:
        assert self.pool is not None
        pool = self.pool

        def call() -> R:
            with pool.connection() as conn:
                return fn(conn, *args, **kw)

        # Database calls get threads of their own: evidence uploads (default executor) must
        # never queue a completion batch or a lease renewal behind them.
        return await asyncio.get_running_loop().run_in_executor(self._db_threads, call)

    # ------------------------------------------------------------------ batched writes
    async def _accept_batch(self, items: list[ex.AcceptanceRecord]) -> dict[int, bool]:
        # Called as ex.record_acceptances at call time (tests replace it to inject failures).
        done = await self.db(ex.record_acceptances, owner=self.id, items=items)
        return {i: it.sample_id in done for i, it in enumerate(items)}

    async def _send_batch(self, items: list[tuple[str, int]]) -> dict[int, bool]:
        done = await self.db(ex.mark_sent, owner=self.id, held=items)
        return {i: it[0] in done for i, it in enumerate(items)}

    async def _store_warc(self, items: list[complete.Finish]) -> dict[int, BaseException]:
        """Store the WARC records of the batch's answers, one object per tenant and run (one
        PUT each), before the fenced transaction records them (issue 33). An item whose object
        could not be stored is left out of the transaction with the store's error (its caller
        retries while its lease holds): nothing is recorded or charged that is not stored. An
        item keeps its placed records, so a retry after a failed transaction records the same
        object instead of writing another."""
        todo = [i for i, it in enumerate(items) if getattr(it.archived, "warc_pending", ())]
        if not todo or self.archive is None:
            return {}
        placed, failed = await astore_batch(self.archive, [items[i].archived for i in todo])
        for i, archived in zip(todo, placed, strict=True):
            items[i].archived = archived
        crashpoint("stored_not_completed")  # the object is stored, no row names it yet
        if failed:
            log.warning("WARC object of %d answers waits for the evidence store: %s",
                        len(failed), next(iter(failed.values())))  # fmt: skip
        return {todo[j]: exc for j, exc in failed.items()}

    async def _finish_batch(
        self, items: list[complete.Finish]
    ) -> Mapping[int, str | BaseException | None]:
        unstored = await self._store_warc(items)
        if unstored:
            rest = [i for i in range(len(items)) if i not in unstored]
            done = await self._finish_batch([items[i] for i in rest]) if rest else {}
            merged: dict[int, str | BaseException | None] = dict(unstored)
            merged.update({rest[j]: r for j, r in done.items()})
            return merged
        try:
            res = await self.db(complete.finish_batch, owner=self.id, items=items)
        except Exception as exc:
            if len(items) == 1:
                return {0: exc}
            # One bad item must not sink its neighbours: write them one by one; an item whose
            # own write fails gets that error (its caller retries), never "stale".
            log.warning("finish batch of %d failed (%s); writing one by one", len(items), exc)
            out: dict[int, str | BaseException | None] = {}
            for i, it in enumerate(items):
                try:
                    r = await self.db(complete.finish_batch, owner=self.id, items=[it])
                    self.log_ended([it], r.done)
                    out[i] = r.done.get(it.sample_id)
                except Exception as one:
                    out[i] = one
            return out
        self.log_ended(items, res.done)
        return {i: res.done.get(it.sample_id) for i, it in enumerate(items)}

    def log_ended(self, items: Sequence[complete.Finish], done: Mapping[str, str]) -> None:
        """D6: one structured event per completion batch, naming every sample with its state,
        reason and upstream task (batched, so a log service is not sent thousands of lines a
        second)."""
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
                 "reason": i.reason, "outcome": i.outcome,
                 "upstream_id": (i.accept.upstream_id if i.accept else i.upstream_id)}
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

    async def drain_writes(self) -> None:
        await self.accepts.drain()
        await self.accepts_deferred.drain()
        await self.sends.drain()
