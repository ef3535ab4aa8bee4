"""Completion callbacks, as the worker hears them (issue 31): the webhook receiver
(geo_pipeline.worker.webhooks) records a service's callback once per upstream task and
``pg_notify``s ``geo_callbacks`` with ``<protocol>:<upstream id>``; every worker LISTENs and
wakes the attempt following that task, which then asks the service itself (its own GET): the
callback's body is never taken for the result.

With callbacks on for a platform (its connector's ``callbacks_on``: a receiver URL is
configured), an accepted task is not polled on the growing schedule: the attempt waits for the
wake, or for ``WorkerSettings.callback_poll_s`` (``GEO_CALLBACK_POLL_S``, default 60 s), the
safety net that still completes a task whose callback was lost. A wake that comes before the
attempt waits (the callback beat the acceptance record) is remembered for a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict

log = logging.getLogger("geo_pipeline.worker")
CHANNEL = "geo_callbacks"
_REMEMBER = 10_000  # wakes kept for attempts not yet waiting


def wake_key(protocol: str, upstream_id: str) -> str:
    return f"{protocol}:{upstream_id}"


class Wakes:
    """Attempts waiting for their task's callback, and wakes no attempt waited for yet."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Event] = {}
        self.early: OrderedDict[str, float] = OrderedDict()
        self.heard = 0

    def wake(self, key: str) -> None:
        self.heard += 1
        event = self.waiting.get(key)
        if event is not None:
            event.set()
            return
        self.early[key] = time.monotonic()
        while len(self.early) > _REMEMBER:
            self.early.popitem(last=False)

    async def wait(self, key: str, timeout_s: float) -> bool:
        """True when the task's callback woke us; False after ``timeout_s`` (the safety net)."""
        if self.early.pop(key, None) is not None:
            return True
        event = self.waiting.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout_s))
            return True
        except TimeoutError:
            return False
        finally:
            if self.waiting.get(key) is event:
                del self.waiting[key]


async def listen(db_url: str, wakes: Wakes, stopping: asyncio.Event) -> None:
    """LISTEN on ``geo_callbacks`` in a thread of its own until ``stopping``; a lost connection
    is reopened (wakes missed meanwhile cost a safety-net wait, nothing more)."""
    import psycopg

    from geo_pipeline.store import db as dbmod

    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(dbmod.database_url(db_url), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            loop.call_soon_threadsafe(wakes.wake, note.payload)
            except Exception as exc:  # reconnect; polling covers the gap
                log.warning("callback listener: %s; reconnecting", exc)
                stop.wait(1.0)

    thread = threading.Thread(target=run, name="geo-callbacks", daemon=True)
    thread.start()
    try:
        await stopping.wait()
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(thread.join, 5.0)


__all__ = ["CHANNEL", "Wakes", "listen", "wake_key"]
