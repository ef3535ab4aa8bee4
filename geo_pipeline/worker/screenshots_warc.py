"""Late screenshots as WARC records, in the batch model (issue 33, R10, R21).

The screenshot lane downloads the screenshots of one read of its stream; this stores them as
WARC records in ONE object per tenant and run (evidence.warc_store: one PUT each), then records
them all in ONE transaction with one statement per table (flows.complete.record_late_screenshots,
evidence.warc_late). A screenshot whose object could not be stored is never recorded: its hint
stays unacked and is asked for again. Each record is ``WARC-Concurrent-To`` the answer's
response record (evidence.warc_revisions), found for the whole read in one statement.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from geo_pipeline.connectors.base import Attachment
from geo_pipeline.evidence.recording import ArchivedScreenshot
from geo_pipeline.evidence.warc_revisions import answer_record_ids, prepare_warc_screenshot
from geo_pipeline.evidence.warc_store import astore_batch
from geo_pipeline.flows import complete
from geo_pipeline.settings import settings
from geo_pipeline.worker.context import Context
from geo_pipeline.worker.evidence_bridge import sample_ref

log = logging.getLogger("geo_pipeline.worker")


async def store_late_screenshots(
    ctx: Context, ready: Sequence[tuple[Mapping[str, Any], Attachment]]
) -> list[bool]:
    """Store and record the downloaded screenshots (sample row, attachment); for each, whether
    it is done (recorded) or must be asked for again. A sample named twice is stored once."""
    first: dict[str, int] = {}
    for i, (row, _) in enumerate(ready):
        first.setdefault(str(row["sample_id"]), i)
    todo = sorted(first.values())
    ids = await ctx.db(answer_record_ids, [str(ready[i][0]["sample_id"]) for i in todo])
    cap = settings().evidence_record_max_bytes

    def prepare() -> list[ArchivedScreenshot]:
        return [
            prepare_warc_screenshot(
                sample_ref(ready[i][0]), int(ready[i][0]["attempt_no"]), ready[i][1],
                answer_record_id=ids.get(str(ready[i][0]["sample_id"])), max_record_bytes=cap,
            )
            for i in todo
        ]  # fmt: skip

    # Decoding and the thumbnail are CPU: off the event loop, as archive_screenshot was.
    prepared = await asyncio.to_thread(prepare)
    placed, failed = await astore_batch(ctx.archive, prepared)
    if failed:
        log.warning("late screenshots of %d samples wait for the evidence store: %s",
                    len(failed), next(iter(failed.values())))  # fmt: skip
    stored = [item for j, item in enumerate(placed) if j not in failed]
    done = {item.ref.sample_id: False for item in placed}
    done.update(dict.fromkeys(await _record(ctx, stored), True))
    return [done[str(row["sample_id"])] for row, _ in ready]


async def _record(ctx: Context, stored: list[ArchivedScreenshot]) -> list[str]:
    """Record the stored screenshots in one transaction; the sample ids recorded. Should that
    fail, one by one, so one bad screenshot does not hold back its neighbours (as a completion
    batch does); one that fails alone is asked for again."""
    if not stored:
        return []
    try:
        await ctx.db(complete.record_late_screenshots, stored, actor=ctx.id)
        return [item.ref.sample_id for item in stored]
    except Exception as exc:
        if len(stored) == 1:
            log.exception("late screenshot not recorded",
                          extra={"sample_id": stored[0].ref.sample_id})  # fmt: skip
            return []
        log.warning("late screenshots of %d samples not recorded together (%s); one by one",
                    len(stored), exc)  # fmt: skip
    recorded = []
    for item in stored:
        recorded += await _record(ctx, [item])
    return recorded
