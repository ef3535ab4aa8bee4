"""A browser capture's evidence (issue #32): beside the raw stream, the page HTML exactly as
captured and how it was captured (device, region, account, the engine's search queries) are
parts of the answer's bundle, read back digest-checked; an answer without them has no such
parts. Stored as WARC (issue 33), the page is a record at the address the browser loaded,
credentials redacted, so a WACZ player resolves its links; without an http(s) address it keeps a
``urn:geo:`` URI."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import zipfile

import pytest

from geo_pipeline.evidence import archive_evidence, record_evidence
from geo_pipeline.evidence.access import fetch_evidence_for
from geo_pipeline.evidence.recording import prepare_warc_evidence, record_evidence_batch
from geo_pipeline.evidence.wacz import export_wacz
from geo_pipeline.evidence.warc_revisions import prepare_warc_revision
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline_tests.integration.evidence.helpers import make_evidence, seed_sample


def test_page_html_and_capture_are_archived_with_the_raw_stream(db, archive):
    ref = seed_sample(db)
    sse = b'data: {"patch_op": []}\n\nevent: SSE_REPLY_END\ndata: {}\n\n'
    html = "<html><body><div class='answer'>瑞幸 [1]</div><script>x()</script></body></html>"
    ev = dataclasses.replace(
        make_evidence(ref, raw=sse),
        raw_mime_type="text/event-stream",
        page_html=html.encode(),
        capture={"device": "mobile", "viewport": "360x780", "region": "cn", "account": "a1"},
        search_queries=("咖啡？", "咖啡？ 推荐"),
    )
    with db.transaction():
        record_evidence(db, archive_evidence(archive, ref, 1, ev, "off"))
    kinds = {
        r["kind"]: r["mime_type"]
        for r in db.execute(
            "SELECT kind, mime_type FROM geo.evidence_objects WHERE sample_id = %s",
            (ref.sample_id,),
        ).fetchall()
    }
    assert kinds["page_html"].startswith("text/html") and kinds["capture"] == "application/json"
    read = lambda kind: fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, kind)  # noqa: E731
    assert read("response_raw") == sse and read("page_html") == html.encode()
    meta = json.loads(read("capture"))
    assert meta["device"] == "mobile" and meta["search_queries"] == ["咖啡？", "咖啡？ 推荐"]

    other = seed_sample(db)
    with db.transaction():
        record_evidence(db, archive_evidence(archive, other, 1, make_evidence(other), "off"))
    plain = {
        r["kind"]
        for r in db.execute(
            "SELECT kind FROM geo.evidence_objects WHERE sample_id = %s", (other.sample_id,)
        ).fetchall()
    }
    assert plain == {"answer_raw", "citations", "response_raw"}


PAGE_URL = "https://chat.example.test/a/chat/s/42?token=PAGESECRET&lang=zh"


@pytest.mark.parametrize("archive", ["local"], indirect=True)
def test_a_captured_page_is_a_record_at_the_address_the_browser_loaded(db, archive) -> None:
    ref = seed_sample(db, tenant_id="tenant-a", policy="off")
    html = (
        b"<html><body><a href='/a/chat/s/41'>older</a><div class='answer'>Acme</div></body></html>"
    )
    ev = dataclasses.replace(
        make_evidence(ref), page_html=html, capture={"page_url": PAGE_URL, "device": "web"}
    )
    bare = seed_sample(db, tenant_id="tenant-a", policy="off")
    plain = dataclasses.replace(
        make_evidence(bare), page_html=html, capture={"page_url": "about:blank"}
    )
    stored = store_batch(
        archive,
        [prepare_warc_evidence(ref, 1, ev, "off"), prepare_warc_evidence(bare, 1, plain, "off")],
    )
    with db.transaction():
        record_evidence_batch(db, stored)
    uris = {
        r["sample_id"]: r["target_uri"]
        for r in db.execute(
            "SELECT sample_id, target_uri FROM geo.warc_records WHERE kind = 'page_html'"
            " AND sample_id IN (%s, %s)",
            (ref.sample_id, bare.sample_id),
        ).fetchall()
    }
    redacted = "https://chat.example.test/a/chat/s/42?token=REDACTED&lang=zh"
    assert uris[ref.sample_id] == redacted, uris
    assert uris[bare.sample_id].startswith("urn:geo:page_html:"), uris  # no http(s) address
    # Read back digest-checked as any record; the secret is in no stored byte.
    assert fetch_evidence_for(db, archive, "tenant-a", ref.sample_id, "page_html") == html
    (key,) = {r.object_key for r in stored[0].warc_placed}
    assert b"PAGESECRET" not in gzip.decompress(archive.get(key))

    # The WACZ names the page by its address and capture time, as a web archive does.
    out = io.BytesIO()
    export_wacz(db, archive, "tenant-a", ref.run_id, out)
    with zipfile.ZipFile(out) as zf:
        pages = [json.loads(line) for line in zf.read("pages/pages.jsonl").splitlines()[1:]]
        cdxj = zf.read("indexes/index.cdxj").decode()
    page = next(p for p in pages if p["url"] == redacted)
    assert page["title"].endswith(": captured page") and page["ts"].startswith("2026-11-29T08:00")
    assert "test,example,chat)/a/chat/s/42?lang=zh&token=redacted 20261129080000 " in cdxj, cdxj

    # A re-parse's revision writes the page at the same address.
    revision = prepare_warc_revision(ref, 1, ev, "off", response_record_id=None)
    (again,) = [r for r in revision.warc_pending if r.kind == "page_html"]
    assert again.target_uri == redacted
