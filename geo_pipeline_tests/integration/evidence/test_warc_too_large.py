"""A record over GEO_EVIDENCE_RECORD_MAX_BYTES (issue 33, faults): a real worker collects the
answer, refuses to store it with its size and the cap, and the sample goes to the review queue
with that reason -- nothing half-written: no object in the store, no index or evidence row."""

from __future__ import annotations

import asyncio
import re

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.analysis.review import list_review_queue
from geo_pipeline_tests.integration.execution.helpers import FakeConnector, fetch, make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

CAP = 40  # bytes: below every answer FakeConnector gives (its text names the sample id)


def test_an_oversized_record_sends_the_sample_to_review_with_size_and_cap(
    db_url, redis_url, redis_ns, obstore_archive, monkeypatch
) -> None:
    monkeypatch.setenv("GEO_EVIDENCE_FORMAT", "warc")
    monkeypatch.setenv("GEO_EVIDENCE_RECORD_MAX_BYTES", str(CAP))
    ids = make_run(db_url, "r-too-large", questions=3)

    def done() -> bool:
        rows = fetch(db_url, "SELECT collection_state FROM geo.samples")
        return bool(rows) and all(r["collection_state"] == "completed" for r in rows)

    asyncio.run(
        run_worker_until(
            db_url, redis_url, redis_ns, {"deepseek": FakeConnector("deepseek")}, done,
            timeout_s=60, archive=obstore_archive,
        )
    )  # fmt: skip
    assert done()
    samples = fetch(db_url, "SELECT sample_id, run_id, evidence_state, evidence_reason"
                            " FROM geo.samples")  # fmt: skip
    size = re.compile(rf"RECORD_TOO_LARGE: response_raw is (\d+) bytes, the cap is {CAP} ")
    for s in samples:
        assert s["evidence_state"] == "failed", s
        m = size.search(s["evidence_reason"] or "")
        assert m and int(m.group(1)) > CAP, s
    # Nothing half-written: no record stored, indexed or named.
    for table in ("geo.warc_records", "geo.evidence_objects", "geo.answers"):
        assert fetch(db_url, f"SELECT count(*) AS n FROM {table}")[0]["n"] == 0, table
    tenant = fetch(db_url, "SELECT tenant_id FROM geo.samples LIMIT 1")[0]["tenant_id"]
    assert obstore_archive.list_keys(f"{tenant}/r-too-large/") == []
    # A person sees each one, with the size and the cap, in the review queue.
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        queue = list_review_queue(conn, "r-too-large")
    assert {r["sample_id"] for r in queue} == set(ids)
    for r in queue:
        assert r["subject"] == "evidence_too_large", r
        assert size.search(r["reason"]) and "GEO_EVIDENCE_RECORD_MAX_BYTES" in r["reason"], r
