"""The HTTP exchange a connector keeps with its evidence (issue 33): as sent and as received,
headers in wire order, for the WARC request/response records (which redact secrets)."""

from __future__ import annotations

import gzip
from datetime import datetime
from io import BytesIO

import httpx
from warcio.archiveiterator import ArchiveIterator

from geo_pipeline.connectors.http import exchange_of
from geo_pipeline.evidence import warc


def test_exchange_of_a_response_keeps_both_sides_and_warc_redacts_the_key() -> None:
    request = httpx.Request(
        "GET",
        "http://sim.test/tasks/t-1/result",
        headers=[("Authorization", "Bearer sk-SECRET"), ("Accept", "application/json")],
    )
    response = httpx.Response(
        200,
        headers=[("Content-Type", "application/json"), ("X-Trace", "a")],
        content=b'{"answer":"x"}',
        request=request,
    )
    ex = exchange_of(response)
    assert (ex.method, ex.url, ex.status, ex.reason) == (
        "GET", "http://sim.test/tasks/t-1/result", 200, "OK",
    )  # fmt: skip
    assert ("Authorization", "Bearer sk-SECRET") in ex.request_headers
    assert ex.response_headers[:2] == (("Content-Type", "application/json"), ("X-Trace", "a"))
    recs = warc.answer_records(
        sample_id="s", attempt_no=1, upstream_id="t-1", captured_at=datetime(2026, 1, 1), raw_body=response.content, raw_mime_type="application/json",
        exchange=ex,
    )  # fmt: skip
    data = b"".join(r.data for r in recs)
    assert b"sk-SECRET" not in gzip.decompress(data)
    types = [r.rec_type for r in ArchiveIterator(BytesIO(data))]
    assert types == ["response", "request"]
