"""Late screenshots as WARC records, in the batch model (issue 33, R10, R21).

The screenshot lane downloads the screenshots of one read of its stream; this stores them as
WARC records in ONE object per tenant and run (evidence.warc_store: one PUT each), then records
each screenshot in its own transaction as before (flows.complete.record_late_screenshot), so a
screenshot whose object could not be stored is never recorded: its hint stays unacked and is
asked for again. Each record is ``WARC-Concurrent-To`` the answer's response record
(evidence.warc_revisions), found for the whole read in one statement.
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
    done: dict[str, bool] = {}
    for j, item in enumerate(placed):
        sid = item.ref.sample_id
        if j in failed:
            done[sid] = False
            continue
        try:
            await ctx.db(complete.record_late_screenshot, item, actor=ctx.id)
            done[sid] = True
        except Exception:
            log.exception("late screenshot not recorded", extra={"sample_id": sid})
            done[sid] = False
    return [done[str(row["sample_id"])] for row, _ in ready]
