"""A browser capture's evidence (issue #32): beside the raw stream, the page HTML exactly as
captured and how it was captured (device, region, account, the engine's search queries) are
parts of the answer's bundle, read back digest-checked; an answer without them has no such
parts."""

from __future__ import annotations

import dataclasses
import json

from geo_pipeline.evidence import archive_evidence, record_evidence
from geo_pipeline.evidence.access import fetch_evidence_for
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
