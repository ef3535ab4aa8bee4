"""The screenshot lane of one platform (R10, R21): late screenshots are downloaded, archived and
move the evidence layer, on a stream, limiter and call budget of their own, so screenshots never
starve text collection. A pending one stays unacked and is asked for again; if this worker dies,
the entry is reclaimed like any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from geo_pipeline.connectors.base import Attachment
from geo_pipeline.evidence import archive_screenshot
from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline.streams import consumer as sc
from geo_pipeline.streams.keys import GROUP
from geo_pipeline.worker.context import Context
from geo_pipeline.worker.evidence_bridge import sample_ref
from geo_pipeline.worker.lane import Lane
from geo_pipeline.worker.screenshots_warc import store_late_screenshots

log = logging.getLogger("geo_pipeline.worker")


async def screenshots(ctx: Context, lane: Lane) -> None:
    """The screenshot stream of one platform: download late screenshots, archive them and
    move the evidence layer. A pending one stays unacked and is asked for again; if this
    worker dies, the entry is reclaimed like any other."""
    retry: dict[str, float] = {}  # message id -> when to ask again
    waiting: dict[str, str] = {}  # sample id -> the message id being retried
    while not ctx.stopping.is_set():
        try:
            reply = await ctx.redis.xreadgroup(
                GROUP, ctx.consumer, {lane.shot_key: ">"}, count=50, block=ctx.s.block_ms
            )
        except Exception as exc:
            if "NOGROUP" in str(exc):
                await sc.ensure_group(ctx.redis, lane.shot_key)
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
            claimed = await ctx.redis.xclaim(lane.shot_key, GROUP, ctx.consumer, 0, due)
            entries += sc.entries_of(lane.shot_key, claimed)

        def settle(e: sc.Entry, done: bool) -> None:
            sid = e.sample_id or ""
            if done:
                waiting.pop(sid, None)
                ctx.acks.submit((e.stream, e.message_id))
            else:
                waiting[sid] = e.message_id
                retry[e.message_id] = time.monotonic() + ctx.s.screenshot_retry_s

        # As WARC, the read's downloaded screenshots are stored together (one object per
        # tenant and run), then recorded in one transaction (worker.screenshots_warc, issue 33).
        warc = ctx.warc and ctx.archive is not None
        ready: list[tuple[sc.Entry, dict[str, Any], Attachment]] | None = [] if warc else None
        for e in entries:
            sid = e.sample_id or ""
            if waiting.get(sid, e.message_id) != e.message_id:
                # A second hint for a screenshot already being waited on (the sweeper
                # renews hints Redis may have lost): one wait per sample is enough.
                ctx.acks.submit((e.stream, e.message_id))
                continue
            try:
                done = await one_screenshot(ctx, lane, e, ready)
            except Exception:
                log.exception("screenshot failed", extra={"sample_id": e.sample_id})
                done = False
            if done is not None:
                settle(e, done)
        if ready:
            try:
                results = await store_late_screenshots(ctx, [(r, a) for _, r, a in ready])
            except Exception:
                log.exception("late screenshots not stored")
                results = [False] * len(ready)
            for (e, _, _), ok in zip(ready, results, strict=True):
                settle(e, ok)


async def one_screenshot(
    ctx: Context,
    lane: Lane,
    e: sc.Entry,
    ready: list[tuple[sc.Entry, dict[str, Any], Attachment]] | None = None,
) -> bool | None:
    """Download one late screenshot and archive and record it: True when done, False to ask
    again later. With ``ready`` (WARC) a downloaded screenshot is added there for the read's
    batch instead, and the answer is None (decided when the batch is stored)."""
    row = await ctx.db(ex.sample_for_screenshot, e.sample_id or "")
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
    if ready is not None:
        ready.append((e, row, att))
        return None
    archived = await asyncio.to_thread(
        archive_screenshot, ctx.archive, sample_ref(row), int(row["attempt_no"]), att
    )
    await ctx.db(complete.record_late_screenshot, archived, actor=ctx.id)
    return True
