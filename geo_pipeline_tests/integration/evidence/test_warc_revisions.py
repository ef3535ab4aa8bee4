"""Evidence that comes after the answer, as WARC records (issue 33): a late screenshot from the
screenshot lane and a re-parse revision are new records in batch objects of the run, linked to
the answer's response record, read back digest-checked, listed clean by `evidence verify` and
exported in the WACZ -- never bundles of their own (what they were before)."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.connectors.base import Attachment, Citation, Evidence, SubmitRequest
from geo_pipeline.evidence import fetch_evidence_for, list_objects
from geo_pipeline.evidence.archive import read_range
from geo_pipeline.evidence.recording import prepare_warc_unparseable, record_evidence_batch
from geo_pipeline.evidence.wacz import export_wacz, verify_run
from geo_pipeline.evidence.warc import parse_record, split_record_key
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline.flows.reparse import reparse
from geo_pipeline_tests.integration.evidence.helpers import apply_outcome, seed_sample
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run
from geo_pipeline_tests.integration.execution.test_screenshots import LateShots, _png
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until


def _headers(archive: Any, row: dict[str, Any]) -> dict[str, str]:
    member = read_range(archive, row["object_key"], int(row["record_offset"]),
                        int(row["record_length"]))  # fmt: skip
    return parse_record(member, row["object_key"]).headers


def _records(db_url: str, kind: str) -> list[dict[str, Any]]:
    return fetch(db_url, "SELECT * FROM geo.warc_records WHERE kind = %s ORDER BY sample_id",
                 (kind,))  # fmt: skip


def test_late_screenshots_are_warc_records_concurrent_to_the_answer(
    db_url, redis_url, redis_ns, obstore_archive, monkeypatch
) -> None:
    monkeypatch.setenv("GEO_EVIDENCE_FORMAT", "warc")
    archive = obstore_archive
    ids = make_run(db_url, "r-late-warc", questions=4, screenshot="required")

    def done() -> bool:
        rows = fetch(db_url, "SELECT evidence_state FROM geo.samples")
        return bool(rows) and all(r["evidence_state"] == "stored" for r in rows)

    asyncio.run(
        run_worker_until(
            db_url, redis_url, redis_ns, {"deepseek": LateShots()}, done, timeout_s=60,
            archive=archive, screenshot_retry_s=0.3,
        )
    )  # fmt: skip
    assert done()
    objs = fetch(db_url, "SELECT sample_id, kind, storage_key FROM geo.evidence_objects"
                         " WHERE kind IN ('screenshot', 'thumbnail')")  # fmt: skip
    assert len(objs) == 2 * len(ids)
    # Every late picture is a record of a WARC batch object, not an object of its own.
    assert all(split_record_key(o["storage_key"]) is not None for o in objs), objs
    shots = _records(db_url, "screenshot")
    answers = {r["sample_id"]: r for r in _records(db_url, "response_raw")}
    assert len(shots) == len(ids) and {r["record_type"] for r in shots} == {"resource"}
    for r in shots:
        # Linked to the answer's response record, in an object of its own batch (later).
        assert _headers(archive, r)["WARC-Concurrent-To"] == answers[r["sample_id"]]["record_id"]
        assert r["object_key"] != answers[r["sample_id"]]["object_key"]
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        tenant = fetch(db_url, "SELECT tenant_id FROM geo.samples LIMIT 1")[0]["tenant_id"]
        for sid in ids:
            assert fetch_evidence_for(conn, archive, tenant, sid, "screenshot") == _png()
        run_id = fetch(db_url, "SELECT run_id FROM geo.samples LIMIT 1")[0]["run_id"]
        checked, torn = verify_run(conn, archive, run_id)
        assert torn == [] and checked >= 2
        out = io.BytesIO()
        summary = export_wacz(conn, archive, tenant, run_id, out)
    total = fetch(db_url, "SELECT count(*) AS n FROM geo.warc_records")[0]["n"]
    assert summary.records == total
    with zipfile.ZipFile(out) as zf:
        cdxj = zf.read("indexes/index.cdxj").decode()
    assert cdxj.count('"kind": "screenshot"') == len(ids)


RAW = b'{"answer": "Acme is the pick. See https://review.example.com/a", "cut'


def _fixed(upstream_id: str, req: SubmitRequest, raw: bytes, mime: str) -> Evidence:
    """A fixed parser: reads the answer out of the cut body."""
    text = raw.split(b'"answer": "', 1)[1].split(b'"', 1)[0].decode()
    return Evidence(
        sample_id=req.sample_id, upstream_id=upstream_id, collection_state="completed",
        answer_text=text, raw_body=raw, raw_mime_type=mime,
        captured_at=fetch_time(), citations=(Citation(url="https://review.example.com/a"),),
    )  # fmt: skip


def fetch_time() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_a_reparse_revision_is_warc_records_referring_to_the_kept_response(
    db, db_url, archive, monkeypatch
) -> None:
    monkeypatch.setenv("GEO_EVIDENCE_FORMAT", "warc")
    ref = seed_sample(db, policy="off")
    kept = store_batch(archive, [prepare_warc_unparseable(
        ref, 1, "up-1", RAW, "application/json", "cut short")])  # fmt: skip
    with db.transaction():
        (outcome,) = record_evidence_batch(db, kept)
    apply_outcome(db, ref, outcome)
    assert outcome.reason.startswith("UNPARSEABLE")
    done = reparse(db, archive, sample_ids=[ref.sample_id], parsers={"deepseek": _fixed},
                   analyse=False)  # fmt: skip
    assert [(d.outcome, d.evidence_state, d.answer_revision) for d in done] == [
        ("reparsed", "stored", 1)
    ], done
    objs = {o.kind: o for o in list_objects(db, ref.tenant_id, ref.sample_id)}
    assert {"answer_raw", "citations"} <= set(objs)
    assert split_record_key(objs["answer_raw"].storage_key) is not None, objs["answer_raw"]
    read = lambda kind: fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, kind)  # noqa: E731
    assert read("answer_raw") == b"Acme is the pick. See https://review.example.com/a"
    assert json.loads(read("citations"))[0]["raw_url"] == "https://review.example.com/a"
    assert read("response_raw") == RAW
    (response,) = _records(db_url, "response_raw")  # the response is not written again
    (text,) = _records(db_url, "answer_raw")
    (cites,) = _records(db_url, "citations")
    assert (text["record_type"], cites["record_type"]) == ("conversion", "metadata")
    for r in (text, cites):
        assert _headers(archive, r)["WARC-Refers-To"] == response["record_id"]
    checked, torn = verify_run(db, archive, ref.run_id)
    assert torn == [] and checked == 2  # the kept response's object, the revision's
    # A second re-parse with the same parser adds nothing (same content, same revision).
    again = reparse(db, archive, sample_ids=[ref.sample_id], parsers={"deepseek": _fixed},
                    analyse=False)  # fmt: skip
    assert [(d.outcome, d.answer_revision) for d in again] == [("reparsed", 1)]
    assert len(_records(db_url, "answer_raw")) == 1


def test_a_late_screenshot_over_the_cap_is_refused_with_its_size(db) -> None:
    from geo_pipeline.evidence.warc_revisions import prepare_warc_screenshot

    ref = seed_sample(db, policy="required")
    shot = Attachment("screenshot", "available", _png(), "image/png")
    got = prepare_warc_screenshot(ref, 1, shot, answer_record_id=None, max_record_bytes=10)
    assert got.status == "unavailable" and got.warc_pending == ()
    assert got.detail and "screenshot is" in got.detail and "the cap is 10" in got.detail
    ok = prepare_warc_screenshot(ref, 1, replace(shot), answer_record_id="<urn:uuid:x>")
    assert ok.status == "archived" and [r.kind for r in ok.warc_pending] == [
        "screenshot", "thumbnail"]  # fmt: skip
