"""Evidence as WARC, one object per completion batch (issue 33), against a real SeaweedFS (or
the local directory), PostgreSQL and a running worker.

What must hold: a batch's answers go to the store in one PUT per tenant and run, before the
fenced transaction records them; every record is indexed (object, offset, length, digests) and
read back through the same reader API as bundles with a ranged GET, digest-checked; a damaged
object is reported, never served; an object a killed worker stored but never recorded is
removed by retention with its run; nothing unstored is ever recorded."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.connectors.base import Citation
from geo_pipeline.evidence import DigestMismatch, fetch_by_key, fetch_evidence_for, list_objects
from geo_pipeline.evidence.recording import (
    prepare_warc_evidence,
    record_evidence_batch,
)
from geo_pipeline.evidence.s3_async import ObjectStoreArchive
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline.evidence.warc import split_record_key
from geo_pipeline.evidence.warc_store import astore_batch, run_prefix, store_batch
from geo_pipeline.flows.retention import apply_retention
from geo_pipeline_tests.fixtures.s3 import overwrite_behind_our_back
from geo_pipeline_tests.integration.evidence.helpers import (
    ANSWER,
    apply_outcome,
    good_screenshot,
    make_evidence,
    seed_sample,
)
from geo_pipeline_tests.integration.execution.helpers import (
    FakeConnector,
    check_invariants,
    fetch,
    make_run,
)
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until


def _record(db: Any, items: list[Any]) -> list[Any]:
    with db.transaction():
        outcomes = record_evidence_batch(db, items)
    for item, outcome in zip(items, outcomes, strict=True):
        apply_outcome(db, item.ref, outcome)
    return outcomes


def test_a_batch_is_one_object_read_back_verified_through_the_reader_api(db, archive) -> None:
    refs = [seed_sample(db, policy="required") for _ in range(2)]
    # Two samples of two runs of one tenant: one object per run; plus a screenshot.
    items = [
        prepare_warc_evidence(refs[0], 1, make_evidence(refs[0], screenshot=good_screenshot()),
                              "required"),
        prepare_warc_evidence(refs[1], 1, make_evidence(refs[1]), "optional"),
    ]  # fmt: skip
    stored = store_batch(archive, items)
    outcomes = _record(db, stored)
    assert [o.state for o in outcomes] == ["stored", "stored"]
    for ref in refs:
        objs = {o.kind: o for o in list_objects(db, ref.tenant_id, ref.sample_id)}
        assert set(objs) >= {"response_raw", "answer_raw", "citations"}
        keys = {split_record_key(o.storage_key)[0] for o in objs.values()}  # type: ignore[index]
        assert len(keys) == 1 and next(iter(keys)).startswith(run_prefix(ref.tenant_id,
                                                                         ref.run_id))  # fmt: skip
        text = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw")
        assert text == ANSWER.encode()
        html = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_html")
        assert html == render_answer(ANSWER).encode()
        raw = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "response_raw")
        assert raw == make_evidence(ref).raw_body
        cit = json.loads(fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id,
                                            "citations"))  # fmt: skip
        assert len(cit) == 2
        assert fetch_by_key(db, archive, ref.tenant_id, objs["answer_raw"].storage_key) == (
            ANSWER.encode()
        )
        assert objs["answer_raw"].block_sha256 is not None
    shot = fetch_evidence_for(db, archive, refs[0].tenant_id, refs[0].sample_id, "screenshot")
    assert shot == good_screenshot().data
    # The index: every record, its digests as the records carry them.
    rows = fetch_rows(db, "SELECT * FROM geo.warc_records ORDER BY object_key, record_offset")
    assert len(rows) == 5 + 3  # response, answer, citations, screenshot, thumbnail; and 3
    assert {r["record_type"] for r in rows} == {"resource", "metadata"}  # no exchange kept


def fetch_rows(db: Any, sql: str) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cur:
        return [dict(r) for r in cur.execute(sql).fetchall()]


def test_a_damaged_object_is_reported_never_served(db, archive) -> None:
    ref = seed_sample(db, policy="off")
    stored = store_batch(archive, [prepare_warc_evidence(ref, 1, make_evidence(ref), "off")])
    _record(db, stored)
    obj = next(o for o in list_objects(db, ref.tenant_id, ref.sample_id)
               if o.kind == "answer_raw")  # fmt: skip
    key, offset, length = split_record_key(obj.storage_key)  # type: ignore[misc]
    data = bytearray(archive.get(key))
    # Same length, one byte of the answer's record changed: inflating fails or digests differ.
    data[offset + length // 2] ^= 0xFF
    overwrite_behind_our_back(archive, key, bytes(data))
    with pytest.raises(DigestMismatch):
        fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw")
    # Cut short (a torn write): reported as well.
    overwrite_behind_our_back(archive, key, bytes(data[: offset + 10]))
    with pytest.raises(DigestMismatch, match=r"torn|unreadable"):
        fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw")


def test_unstored_records_are_never_recorded(db) -> None:
    ref = seed_sample(db, policy="off")
    item = prepare_warc_evidence(ref, 1, make_evidence(ref), "off")
    with pytest.raises(RuntimeError, match="before its WARC records were stored"):
        with db.transaction():
            record_evidence_batch(db, [item])
    assert fetch_rows(db, "SELECT count(*) AS n FROM geo.evidence_objects")[0]["n"] == 0


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_store_down_mid_batch_fails_the_items_of_that_object_only(db) -> None:
    ref = seed_sample(db, policy="off")
    unused_port = _unused_port()
    dead = ObjectStoreArchive("b", endpoint_url=f"http://127.0.0.1:{unused_port}",
                              retry_timeout_s=0.2)  # fmt: skip
    item = prepare_warc_evidence(ref, 1, make_evidence(ref), "off")
    placed, failed = asyncio.run(astore_batch(dead, [item]))
    assert list(failed) == [0] and placed[0].warc_pending  # still to store: never recorded


def test_orphaned_object_of_a_killed_worker_is_removed_by_retention(db, archive) -> None:
    ref = seed_sample(db, policy="off")
    recorded = store_batch(archive, [prepare_warc_evidence(ref, 1, make_evidence(ref), "off")])
    _record(db, recorded)
    # A second batch stored, then the worker died before its transaction: no row names it.
    orphan = store_batch(
        archive, [prepare_warc_evidence(ref, 2, make_evidence(ref, text="other"), "off")]
    )
    orphan_key = orphan[0].warc_placed[0].object_key
    named = {p.object_key for p in recorded[0].warc_placed}
    assert set(archive.list_keys(run_prefix(ref.tenant_id, ref.run_id))) == {*named, orphan_key}
    report = apply_retention(db, archive, datetime.now(UTC) + timedelta(days=400), dry_run=False)
    run = next(r for r in report.runs if r.run_id == ref.run_id)
    assert set(run.warc_objects) == {*named, orphan_key}
    assert archive.list_keys(run_prefix(ref.tenant_id, ref.run_id)) == []
    assert fetch_rows(db, "SELECT count(*) AS n FROM geo.warc_records")[0]["n"] == 0
    assert fetch_rows(db, "SELECT count(*) AS n FROM geo.evidence_objects")[0]["n"] == 0


def _all_done(db_url: str) -> bool:
    rows = fetch(db_url, "SELECT collection_state FROM geo.samples")
    return bool(rows) and all(r["collection_state"] == "completed" for r in rows)


def test_worker_writes_one_object_per_batch_and_records_every_record(
    db_url, redis_url, redis_ns, obstore_archive, monkeypatch
) -> None:
    monkeypatch.setenv("GEO_EVIDENCE_FORMAT", "warc")
    archive = obstore_archive
    puts: list[int] = []
    real_aput = archive.aput

    async def counting_aput(key: str, data: bytes, *, mime_type: str, **kw: Any) -> Any:
        puts.append(len(data))
        return await real_aput(key, data, mime_type=mime_type, **kw)

    monkeypatch.setattr(archive, "aput", counting_aput)
    ids = make_run(db_url, "r-warc", questions=40)
    connector = FakeConnector("deepseek")
    asyncio.run(
        run_worker_until(
            db_url, redis_url, redis_ns, {"deepseek": connector}, lambda: _all_done(db_url),
            timeout_s=90, archive=archive, flush_s=0.05,
        )
    )  # fmt: skip
    assert _all_done(db_url)
    check_invariants(db_url, expected_samples=len(ids))
    rows = fetch(
        db_url,
        "SELECT s.sample_id, s.tenant_id, s.evidence_state,"
        " (SELECT count(*) FROM geo.evidence_objects o WHERE o.sample_id = s.sample_id) AS objs,"
        " (SELECT count(*) FROM geo.warc_records w WHERE w.sample_id = s.sample_id) AS recs"
        " FROM geo.samples s",
    )
    assert {(r["evidence_state"], r["objs"], r["recs"]) for r in rows} == {("stored", 3, 3)}
    objects = fetch(db_url, "SELECT count(DISTINCT object_key) AS n FROM geo.warc_records")
    # Every PUT is a batch object and every batch object is recorded; batches, not answers.
    assert len(puts) == objects[0]["n"] < len(ids)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        for r in rows:
            text = fetch_evidence_for(conn, archive, r["tenant_id"], r["sample_id"], "answer_raw")
            assert hashlib.sha256(text).hexdigest()


def test_a_browser_capture_is_warc_records_read_back_verified(db, archive) -> None:
    ref = seed_sample(db, policy="off")
    sse = b'data: {"patch_op": []}\n\nevent: SSE_REPLY_END\ndata: {}\n\n'
    html = b"<html><body><div class='answer'>Acme [1]</div></body></html>"
    ev = dataclasses.replace(
        make_evidence(ref, raw=sse), raw_mime_type="text/event-stream", page_html=html,
        capture={"device": "mobile", "region": "cn"}, search_queries=("coffee?",),
    )  # fmt: skip
    _record(db, store_batch(archive, [prepare_warc_evidence(ref, 1, ev, "off")]))
    read = lambda kind: fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, kind)  # noqa: E731
    assert read("response_raw") == sse and read("page_html") == html
    assert json.loads(read("capture"))["search_queries"] == ["coffee?"]
    types = {r["kind"]: r["record_type"] for r in fetch_rows(
        db, "SELECT kind, record_type FROM geo.warc_records")}  # fmt: skip
    assert types["page_html"] == "resource" and types["capture"] == "metadata"


def test_records_recorded_again_add_nothing_and_the_missing_ones_are_added(db, archive) -> None:
    """A record is its (object, offset) and the object's key is its bytes' digest, so the same
    placement can be recorded twice (a re-parse of the same answer, a re-claimed screenshot):
    the index and the object rows stay as they were. Here two samples' records share one object;
    the first sample is recorded, then both (the written rows are COPYed, issue 33): the first
    one's rows are not added again, the second's are all added."""
    first = seed_sample(db, policy="optional")
    with db.transaction():  # a second sample of the same run (repeat 1): one object for both
        second = db.execute(
            "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
            " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
            " SELECT geo.sample_id_for(s.run_id, s.question_revision, s.platform, s.device,"
            "        s.region, s.mode, 1), s.run_id, s.tenant_id, 0, s.question_revision, 0,"
            "        s.platform, s.device, s.region, s.mode, 1, s.screenshot_policy"
            "   FROM geo.samples s WHERE s.sample_id = %s RETURNING sample_id",
            (first.sample_id,),
        ).fetchone()
    refs = [first, dataclasses.replace(first, sample_id=second["sample_id"])]
    items = [prepare_warc_evidence(r, 1, make_evidence(r), "optional") for r in refs]
    stored = store_batch(archive, items)
    (key,) = {p.object_key for item in stored for p in item.warc_placed}
    _record(db, stored[:1])
    first = fetch_rows(db, "SELECT * FROM geo.warc_records ORDER BY record_offset")
    objects = fetch_rows(db, "SELECT * FROM geo.evidence_objects ORDER BY object_id")
    again = _record(db, stored)
    rows = fetch_rows(db, "SELECT * FROM geo.warc_records ORDER BY record_offset")
    assert [r for r in rows if r["sample_id"] == refs[0].sample_id] == first
    assert {(r["object_key"], r["record_offset"]) for r in rows} == {
        (key, p.offset) for item in stored for p in item.warc_placed
    }
    assert len(rows) == sum(len(item.warc_placed) for item in stored)
    after = fetch_rows(db, "SELECT * FROM geo.evidence_objects ORDER BY object_id")
    assert after[: len(objects)] == objects
    assert {r["sample_id"] for r in after[len(objects) :]} == {refs[1].sample_id}
    assert again[0].new_objects == () and not again[0].new_answer_revision
    assert set(again[1].new_objects) == {o.kind for o in stored[1].objects}


def test_every_written_value_reads_back_as_recorded(db, archive) -> None:
    """The rows are COPYed in text format (issue 33): a value COPY's text format escapes
    (backslash, tab, newline, a literal \\N), an array element that reads as NULL, non-ASCII text
    and empty or missing values read back exactly as the recording had them."""
    ref = seed_sample(db, policy="off")
    text = 'a \\N b\\\\c\td\r\ne "q" {x,y} 咖啡 NULL'
    citations = (
        Citation(url="https://example.com/a\\b?x=1\t", id="k\\1", title="t\n\"NULL\"",
                 cited_text="\\N", span_start=0, span_end=3),
        Citation(url="https://例子.cn/路径", relation="retrieved"),
    )  # fmt: skip
    ev = dataclasses.replace(
        make_evidence(ref, text=text, citations=citations, warnings=("NULL", "w,1", 'w"2')),
        search_queries=("NULL", "", "a\\b", "{}", "咖啡 性价比"),
    )
    (item,) = store_batch(archive, [prepare_warc_evidence(ref, 1, ev, "off")])
    _record(db, [item])
    answer = fetch_rows(db, f"SELECT * FROM geo.answers WHERE sample_id = '{ref.sample_id}'")[0]
    assert (answer["raw_text"], answer["search_queries"]) == (text, list(ev.search_queries))
    assert answer["warnings"] == ["NULL", "w,1", 'w"2']
    assert answer["captured_at"] == ev.captured_at and answer["raw_sha256"] == item.text_sha256
    got = fetch_rows(db, "SELECT ordinal, relation, raw_url, normalized_url, registrable_domain,"
                         " citation_key, title, span_start, span_end, cited_text FROM"
                         f" geo.citations WHERE sample_id = '{ref.sample_id}' ORDER BY ordinal")  # fmt: skip
    assert got == [{k: v for k, v in c.__dict__.items() if k in got[0]} for c in item.citations]
    warc = fetch_rows(db, "SELECT * FROM geo.warc_records ORDER BY record_offset")
    assert [(w["record_id"], w["target_uri"], w["block_sha256"]) for w in warc] == [
        (p.record.record_id, p.record.target_uri, p.record.block_sha256) for p in item.warc_placed
    ]
