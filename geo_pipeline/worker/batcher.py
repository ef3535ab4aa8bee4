"""Group commit for the worker's writes: many small transactions become a few large ones.

The database is the bottleneck of the execution core (docs/design.md section 7), so acceptances,
send marks, completions and stream acks are collected for a short window and written together;
each caller awaits its own item's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

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
        run: Callable[[list[T]], Awaitable[Mapping[int, R | BaseException]]],
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
                if fut.done():
                    continue
                # One item's own failure (its write failed alone) reaches that caller only.
                result = results[i]
                if isinstance(result, BaseException):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)
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
