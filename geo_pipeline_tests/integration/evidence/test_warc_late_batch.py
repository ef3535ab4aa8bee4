"""Late screenshots as WARC, in batches (issue 33): the screenshot lane stores the screenshots of
one read of its stream in ONE object per tenant and run, then records them all in ONE
transaction with one statement per table -- as the answers' evidence rows are (issue 33,
item 4) -- not a transaction of a handful of statements per screenshot. Counted, never timed.

A screenshot over ``GEO_EVIDENCE_RECORD_MAX_BYTES`` is refused with its size and the cap and its
sample goes to the review queue (``evidence_too_large``), at the answer or later. With the store
down mid-batch nothing is recorded that is not stored, and the retry records each screenshot
once. Against a real SeaweedFS (through a TCP proxy that can cut it off) and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import uuid
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from PIL import Image
from psycopg.rows import dict_row

from geo_pipeline.analysis.review import list_review_queue
from geo_pipeline.connectors.base import Attachment
from geo_pipeline.domain.plan import sample_id_for
from geo_pipeline.evidence import SampleRef, fetch_evidence_for
from geo_pipeline.evidence.recording import prepare_warc_evidence, record_evidence_batch
from geo_pipeline.evidence.thumbnails import screenshot_derivatives
from geo_pipeline.evidence.wacz import verify_run
from geo_pipeline.evidence.warc_store import run_prefix, store_batch
from geo_pipeline.store import execution as ex
from geo_pipeline.store.work import Work, _CountingCursor
from geo_pipeline.worker.screenshots_warc import store_late_screenshots
from geo_pipeline_tests.integration.evidence.helpers import (
    apply_outcome,
    good_screenshot,
    make_evidence,
)
from geo_pipeline_tests.integration.evidence.test_store_faults import (  # noqa: F401
    FaultProxy,
    proxied_archive,
)


def noisy_png(width: int, height: int) -> bytes:
    """A PNG that does not compress (random pixels): large in bytes for its size."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(out, "PNG")
    return out.getvalue()


def seed_run(
    db: Any, n: int, policy: str = "required", tenant_id: str = "tenant-a"
) -> list[SampleRef]:
    """One tenant, run and ``n`` samples of it (committed)."""
    h = lambda: hashlib.sha256(uuid.uuid4().bytes).hexdigest()  # noqa: E731
    snapshot, quote, qrev = h(), h(), "q" + uuid.uuid4().hex[:20]
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    with db.transaction():
        db.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES (%s, %s)"
                   " ON CONFLICT DO NOTHING", (tenant_id, tenant_id))  # fmt: skip
        db.execute("INSERT INTO geo.config_snapshots (snapshot_id, tenant_id, config)"
                   " VALUES (%s, %s, '{}')", (snapshot, tenant_id))  # fmt: skip
        db.execute("INSERT INTO geo.quote_snapshots (quote_id, tenant_id, currency,"
                   " estimated_max_minor, price_versions) VALUES (%s, %s, 'CNY', 0, '{}')",
                   (quote, tenant_id))  # fmt: skip
        db.execute("INSERT INTO geo.question_revisions (question_revision, text)"
                   " VALUES (%s, 'q?')", (qrev,))  # fmt: skip
        db.execute("INSERT INTO geo.runs (run_id, tenant_id, snapshot_id, quote_id, sample_count)"
                   " VALUES (%s, %s, %s, %s, %s)", (run_id, tenant_id, snapshot, quote, n))  # fmt: skip
        refs = []
        for i in range(n):
            sid = sample_id_for(run_id, qrev, "deepseek", "web", "cn", "default", i)
            db.execute(
                "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no,"
                " question_revision, question_index, platform, device, region, mode,"
                " repeat_index, screenshot_policy) VALUES (%s, %s, %s, 0, %s, 0, 'deepseek',"
                " 'web', 'cn', 'default', %s, %s)",
                (sid, run_id, tenant_id, qrev, i, policy),
            )
            refs.append(SampleRef(sample_id=sid, run_id=run_id, tenant_id=tenant_id))
    return refs


def answered_waiting_for_screenshots(db: Any, archive: Any, n: int, policy: str) -> list[SampleRef]:
    """``n`` completed samples of one run whose answers are stored as WARC and whose
    screenshots the platform will deliver later (partial / SCREENSHOT_PENDING under
    'required')."""
    refs = seed_run(db, n, policy)
    pending = Attachment("screenshot", "pending")
    items = [prepare_warc_evidence(r, 1, make_evidence(r, screenshot=pending), policy)
             for r in refs]  # fmt: skip
    stored = store_batch(archive, items)
    with db.transaction():
        outcomes = record_evidence_batch(db, stored)
    for ref, outcome in zip(refs, outcomes, strict=True):
        apply_outcome(db, ref, outcome)
    return refs


class CountingCtx:
    """What ``store_late_screenshots`` needs of the worker's context (its archive, its id and
    ``db``), with every database call on a fresh connection whose statements and top-level
    transactions are counted."""

    def __init__(self, db_url: str, archive: Any) -> None:
        self.db_url = db_url
        self.archive = archive
        self.id = "w-late"
        self.work = Work()
        self.transactions = 0

    async def db(self, fn: Any, *args: Any, **kw: Any) -> Any:
        def call() -> Any:
            with psycopg.connect(self.db_url, autocommit=True, row_factory=dict_row,
                                 cursor_factory=_CountingCursor) as conn:  # fmt: skip
                conn._geo_work_meter = self.work  # type: ignore[attr-defined]
                real = conn.transaction

                def counted_transaction(*a: Any, **k: Any) -> Any:
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                        self.transactions += 1
                    return real(*a, **k)

                conn.transaction = counted_transaction  # type: ignore[method-assign]
                return fn(conn, *args, **kw)

        return await asyncio.to_thread(call)


def _ready(db: Any, refs: list[SampleRef], shots: list[Attachment]) -> list[tuple[Any, Attachment]]:
    return [
        (ex.sample_for_screenshot(db, r.sample_id), s) for r, s in zip(refs, shots, strict=True)
    ]


def _states(db: Any, refs: list[SampleRef]) -> list[tuple[str, str | None]]:
    rows = {r["sample_id"]: r for r in db.execute(
        "SELECT sample_id, evidence_state, evidence_reason FROM geo.samples"
        " WHERE sample_id = ANY(%s)", ([r.sample_id for r in refs],)).fetchall()}  # fmt: skip
    db.commit()
    return [(rows[r.sample_id]["evidence_state"], rows[r.sample_id]["evidence_reason"])
            for r in refs]  # fmt: skip


def _count(db: Any, sql: str, *args: Any) -> int:
    n = int(db.execute(sql, args).fetchone()["n"])
    db.commit()
    return n


def test_a_read_of_late_screenshots_is_one_object_and_one_transaction(
    db, db_url, obstore_archive, monkeypatch
) -> None:
    archive = obstore_archive
    puts: list[str] = []
    real_aput = archive.aput

    async def counting_aput(key: str, data: bytes, *, mime_type: str, **kw: Any) -> Any:
        puts.append(key)
        return await real_aput(key, data, mime_type=mime_type, **kw)

    monkeypatch.setattr(archive, "aput", counting_aput)
    cost: dict[int, tuple[int, int, int]] = {}
    for n in (2, 8):
        refs = answered_waiting_for_screenshots(db, archive, n, "required")
        assert set(_states(db, refs)) == {("partial", "SCREENSHOT_PENDING")}
        shots = [good_screenshot(width=64, height=48, color=(i, 9, 9)) for i in range(n)]
        ctx = CountingCtx(db_url, archive)
        puts.clear()
        done = asyncio.run(store_late_screenshots(ctx, _ready(db, refs, shots)))  # type: ignore[arg-type]
        assert done == [True] * n
        assert set(_states(db, refs)) == {("stored", None)}
        cost[n] = (len(puts), ctx.transactions, ctx.work.statements)
        for ref, shot in zip(refs, shots, strict=True):
            assert fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id,
                                      "screenshot") == shot.data  # fmt: skip
        assert (
            _count(
                db,
                "SELECT count(*) AS n FROM geo.warc_records WHERE run_id = %s"
                " AND kind IN ('screenshot', 'thumbnail')",
                refs[0].run_id,
            )
            == 2 * n
        )
        checked, torn = verify_run(db, archive, refs[0].run_id)
        db.commit()
        assert torn == [] and checked == 2  # the answers' object and the screenshots' one
    # One PUT and one transaction whatever the number of screenshots, and the same statements.
    assert cost[2][:2] == cost[8][:2] == (1, 1), cost
    assert cost[2][2] == cost[8][2], cost


CAP_ENV = "GEO_EVIDENCE_RECORD_MAX_BYTES"


@pytest.mark.parametrize("policy", ["required", "optional"])
def test_an_oversized_late_screenshot_sends_its_sample_to_review(
    db, db_url, obstore_archive, monkeypatch, policy
) -> None:
    archive = obstore_archive
    refs = answered_waiting_for_screenshots(db, archive, 2, policy)
    keys_before = set(archive.list_keys(run_prefix(refs[0].tenant_id, refs[0].run_id)))
    small = good_screenshot(width=8, height=8)
    big = Attachment("screenshot", "available", noisy_png(200, 200), "image/png")
    _, thumb = screenshot_derivatives(small.data)
    # The small one and its thumbnail fit, the big one does not.
    cap = max(len(small.data), len(thumb), len(screenshot_derivatives(big.data)[1])) + 100
    assert len(big.data) > cap
    monkeypatch.setenv(CAP_ENV, str(cap))
    done = asyncio.run(store_late_screenshots(CountingCtx(db_url, archive),  # type: ignore[arg-type]
                                              _ready(db, refs, [big, small])))  # fmt: skip
    assert done == [True, True]  # decided: not asked for again
    (big_state, big_reason), (small_state, _) = _states(db, refs)
    size = re.compile(rf"RECORD_TOO_LARGE: screenshot is (\d+) bytes, the cap is {cap} "
                      rf"\({CAP_ENV}\)")  # fmt: skip
    m = size.search(big_reason or "")
    assert m and int(m.group(1)) == len(big.data), big_reason
    assert big_state == ("partial" if policy == "required" else "stored")
    assert small_state == "stored"
    # Refused: no record of it stored, indexed or named; the small one is.
    shots = db.execute("SELECT sample_id FROM geo.evidence_objects WHERE kind = 'screenshot'"
                       ).fetchall()  # fmt: skip
    db.commit()
    assert [r["sample_id"] for r in shots] == [refs[1].sample_id]
    new_keys = set(archive.list_keys(run_prefix(refs[0].tenant_id, refs[0].run_id))) - keys_before
    assert len(new_keys) == 1
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        queue = [r for r in list_review_queue(conn, refs[0].run_id)
                 if r["subject"] == "evidence_too_large"]  # fmt: skip
    assert [r["sample_id"] for r in queue] == [refs[0].sample_id], queue
    assert size.search(queue[0]["reason"]), queue[0]


def test_an_oversized_screenshot_with_the_answer_sends_its_sample_to_review(
    db, db_url, obstore_archive
) -> None:
    (ref,) = seed_run(db, 1, "required")
    big = Attachment("screenshot", "available", noisy_png(200, 200), "image/png")
    ev = make_evidence(ref, screenshot=big)
    cap = max(len(ev.raw_body), 4000) + 1
    assert len(big.data) > cap
    item = prepare_warc_evidence(ref, 1, ev, "required", max_record_bytes=cap)
    stored = store_batch(obstore_archive, [item])
    with db.transaction():
        (outcome,) = record_evidence_batch(db, stored)
    apply_outcome(db, ref, outcome)
    assert outcome.state == "partial" and "RECORD_TOO_LARGE: screenshot is" in (
        outcome.reason or ""
    )
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        queue = list_review_queue(conn, ref.run_id)
    assert [(r["sample_id"], r["subject"]) for r in queue] == [
        (ref.sample_id, "evidence_too_large")
    ]
    assert f"the cap is {cap} ({CAP_ENV})" in queue[0]["reason"]


def test_store_down_mid_batch_records_nothing_then_the_retry_records_each_once(
    db,
    db_url,
    proxied_archive,  # noqa: F811
) -> None:
    archive, proxy = proxied_archive
    refs = answered_waiting_for_screenshots(db, archive, 4, "required")
    shots = [good_screenshot(width=32, height=32, color=(i, 1, 1)) for i in range(4)]
    ready = _ready(db, refs, shots)
    proxy.down()
    try:
        done = asyncio.run(store_late_screenshots(CountingCtx(db_url, archive), ready))  # type: ignore[arg-type]
    finally:
        proxy.up()
    assert done == [False] * 4  # asked for again later
    # Nothing recorded that is not stored: no index row, no evidence row, states unmoved.
    assert _count(db, "SELECT count(*) AS n FROM geo.warc_records WHERE kind = 'screenshot'") == 0
    assert (
        _count(db, "SELECT count(*) AS n FROM geo.evidence_objects WHERE kind = 'screenshot'") == 0
    )
    assert set(_states(db, refs)) == {("partial", "SCREENSHOT_PENDING")}
    # The retry (the same hints, read again) stores and records each screenshot once.
    again = asyncio.run(store_late_screenshots(CountingCtx(db_url, archive), ready))  # type: ignore[arg-type]
    assert again == [True] * 4
    assert set(_states(db, refs)) == {("stored", None)}
    per_sample = db.execute("SELECT sample_id, count(*) AS n FROM geo.evidence_objects"
                            " WHERE kind = 'screenshot' GROUP BY 1").fetchall()  # fmt: skip
    db.commit()
    assert sorted(r["n"] for r in per_sample) == [1, 1, 1, 1]
    for ref, shot in zip(refs, shots, strict=True):
        assert fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "screenshot") == (
            shot.data
        )
    _, torn = verify_run(db, archive, refs[0].run_id)
    db.commit()
    assert torn == []
    # A second delivery of the same hints adds nothing (idempotent).
    assert asyncio.run(store_late_screenshots(CountingCtx(db_url, archive), [  # type: ignore[arg-type]
        (row, replace(att)) for row, att in ready])) == [True] * 4  # fmt: skip
    assert (
        _count(db, "SELECT count(*) AS n FROM geo.evidence_objects WHERE kind = 'screenshot'") == 4
    )
