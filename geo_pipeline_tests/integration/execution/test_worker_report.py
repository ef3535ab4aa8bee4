"""The worker's exit report counts what happened, under honest names. A lease renewal that
races the worker's own end of an attempt (the end committed while the renewal was on its way)
is not a loss: it used to be counted as "lost" and the finishing task was cancelled, so the
completion was never counted nor its stream entry acked ("lost: 413 next to completed: 550"
with a single worker). Only a sample another holder really took over counts, as taken_over."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline.worker.context import REPORT_KEYS
from geo_pipeline.worker.leases import Held, renew_once
from geo_pipeline.worker.settings import WorkerSettings
from geo_pipeline_tests.integration.execution.helpers import make_run

OWNER = "worker:test:1"


class _Redis:
    async def xclaim(self, *args: Any, **kwargs: Any) -> list[str]:
        return []


def _ctx(conn: Any) -> Any:
    async def db(fn: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(conn, *args, **kwargs)
        conn.commit()
        return out

    return SimpleNamespace(
        id=OWNER,
        consumer=OWNER.replace(":", "-"),
        s=WorkerSettings(platforms=["deepseek"], worker_id=OWNER),
        report=dict.fromkeys(REPORT_KEYS, 0),
        db=db,
        redis=_Redis(),
    )


def _claim(conn: Any, ids: list[str], owner: str) -> list[Held]:
    rows = ex.claim_ids(conn, ids, owner=owner, lease_s=30)
    conn.commit()
    now = time.monotonic()
    return [Held(dict(r), now, now + 25) for r in rows]


def test_a_renewal_racing_our_own_end_is_not_a_loss(db_url):
    ids = make_run(db_url, "r-renew-race", questions=2)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        ending, other = _claim(conn, ids, OWNER)

        async def scenario() -> tuple[dict[str, int], bool, bool]:
            ctx = _ctx(conn)
            ending.task = asyncio.create_task(asyncio.sleep(5))  # awaiting its end's write
            ending.ending = True
            other.task = asyncio.create_task(asyncio.sleep(5))
            # Our own end of the first sample commits just before the renewal runs...
            complete.finish_batch(
                conn,  # type: ignore[arg-type]
                owner=OWNER,
                items=[complete.Finish(ending.sample_id, ending.token, "queued", reason="retry")],
            )
            conn.commit()
            # ...and the second sample was really taken over by another worker.
            complete.finish_batch(
                conn,  # type: ignore[arg-type]
                owner=OWNER,
                items=[complete.Finish(other.sample_id, other.token, "queued", reason="x")],
            )
            conn.commit()
            _claim(conn, [other.sample_id], "worker:someone-else:2")
            await renew_once(ctx, [ending, other])
            await asyncio.sleep(0)
            out = (ctx.report, ending.task.cancelled(), other.task.cancelled())
            for t in (ending.task, other.task):
                t.cancel()
            return out

        report, ending_cancelled, other_cancelled = asyncio.run(scenario())
    assert not ending_cancelled, "the task writing its own end was cancelled"
    assert report["taken_over"] == 1 and other_cancelled
    assert "lost" not in report  # the misleading name is gone
