"""Leases from the worker's side (R11): what it holds, how long it may still act on it, renewal.

The database fences every write with the fencing token; it cannot fence a request that has
already left the process. So a worker also fences itself: it acts on a sample only while its
*local* lease deadline -- the monotonic time of the last successful claim or renewal, plus the
lease, minus a margin -- is in the future (docs/operations.md, "Recovery bounds"). A process
paused past its lease (GC, SIGSTOP, a stalled wait) wakes up with its deadline passed and sends
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import STALE_WRITES
from geo_pipeline.store import execution as ex
from geo_pipeline.streams.keys import GROUP

if TYPE_CHECKING:
    from geo_pipeline.worker.context import Context

log = logging.getLogger("geo_pipeline.worker")


class LeaseLost(Exception):
    """This worker can no longer prove it holds the sample: it sends nothing and writes nothing
    but a fenced hand-back."""


@dataclass
class Held:
    """A sample this worker holds a lease on, with the stream entries to ack when done."""

    row: dict[str, Any]
    claimed_at: float
    deadline: float  # local lease deadline (monotonic); see the module docstring
    entries: list[tuple[str, str]] = field(default_factory=list)  # (stream key, message id)
    # An acceptance queued for writing but not yet confirmed written (see accept_defer_s), and
    # the record itself: if its write fails it is folded into the attempt's last write, so an
    # upstream id never lives only in memory.
    accept: asyncio.Future[bool] | None = None
    accept_rec: ex.AcceptanceRecord | None = None
    upstream_id: str | None = None
    lost: bool = False
    cancelled: bool = False
    ending: bool = False  # its last write is on its way: a drain waits for it, never races it
    task: asyncio.Task[None] | None = None
    awaits_submit: bool = False  # counted in Lane.submit_waiting until it has its token

    @property
    def sample_id(self) -> str:
        return str(self.row["sample_id"])

    @property
    def token(self) -> int:
        return int(self.row["fencing_token"])

    def alive(self) -> bool:
        return not self.lost and time.monotonic() < self.deadline

    def fence(self) -> None:
        """Call before every external call: raises LeaseLost once the lease may have gone."""
        if not self.alive():
            raise LeaseLost(f"sample {self.sample_id}: lease (token {self.token}) may have expired")

    def acceptance_unconfirmed(self) -> ex.AcceptanceRecord | None:
        """The acceptance record, when it is not known to be written."""
        fut = self.accept
        if fut is None:
            return None
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            return None  # written, or refused as stale: either way nothing to fold
        return self.accept_rec


async def renew_once(ctx: Context, held: list[Held]) -> None:
    """Extend every lease in one statement; stop working on the samples someone else took
    over (counted as ``taken_over``)."""
    if not held:
        return
    t0 = time.monotonic()
    ours = await ctx.db(
        ex.renew, owner=ctx.id, lease_s=ctx.s.lease_s, held=[(h.sample_id, h.token) for h in held]
    )
    deadline = t0 + ctx.s.lease_s - ctx.s.lease_margin_s
    lost: list[dict[str, Any]] = []
    for h in held:
        if h.sample_id not in ours:
            # Missing from the renewal: taken over, or ended by ourselves while the renewal
            # was on its way (the end committed first). An attempt whose end is being written
            # (``ending``) or is over (its task done) learns its fate from that write; counting
            # it here would call a finished sample lost and cancel the task that records it.
            if h.lost or h.ending or (h.task is not None and h.task.done()):
                continue
            h.lost = True
            ctx.report["taken_over"] += 1
            STALE_WRITES.labels("renew").inc()
            lost.append({"sample_id": h.sample_id, "token": h.token})
            # Someone else took it over (we stalled past the lease): stop working on it.
            if h.task is not None:
                h.task.cancel()
        else:
            h.deadline = max(h.deadline, deadline)
            if ours[h.sample_id]:
                h.cancelled = True
    if lost:  # D6: one line per renewal, naming what this worker stopped working on
        event(log, "lease.taken_over", worker=ctx.id, count=len(lost), samples=lost)
    # Keep our pending entries from looking idle, so no reclaimer takes them over.
    by_stream: dict[str, list[str]] = {}
    for h in held:
        for key, mid in h.entries:
            by_stream.setdefault(key, []).append(mid)
    for key, mids in by_stream.items():
        with contextlib.suppress(Exception):
            await ctx.redis.xclaim(key, GROUP, ctx.consumer, 0, mids, justid=True)


async def renewer(ctx: Context, held: Any) -> None:
    """Renew every ``renew_every_s`` (default lease / 3) until the worker stops; ``held()``
    lists what the worker holds now."""
    every = ctx.s.renew_every_s or ctx.s.lease_s / 3.0
    while not ctx.stopping.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.stopping.wait(), every)
        try:
            await renew_once(ctx, held())
        except Exception:
            log.exception("lease renewal failed")
