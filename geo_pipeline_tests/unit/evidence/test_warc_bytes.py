"""The evidence records' bytes are written directly (evidence.warc._write, for CPU on the
worker's hot path), and must stay exactly what warcio's own WARCWriter writes for the same
record: every shape the evidence layer produces is compared here byte for byte with the writer
the records were made with before, so stored digests and offsets mean the same thing."""

from __future__ import annotations

import gzip
import hashlib
from io import BytesIO
from typing import Any

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from geo_pipeline.evidence import warc


def warcio_bytes(
    *,
    record_type: str,
    uri: str,
    record_id: str,
    date: str,
    mime_type: str,
    payload: bytes,
    http: StatusAndHeaders | None = None,
    concurrent_to: str | None = None,
    refers_to: str | None = None,
) -> bytes:
    """The record as warcio's WARCWriter writes it (the code evidence.warc used until the
    direct writer): its digests given as the evidence layer computes them."""
    payload_hex = hashlib.sha256(payload).hexdigest()
    head = b""
    if http is not None:
        http.compute_headers_buffer()
        head = http.headers_buff
    block_hex = hashlib.sha256(head + payload).hexdigest() if head else payload_hex
    headers = {
        "WARC-Record-ID": record_id,
        "WARC-Date": date,
        "WARC-Block-Digest": warc.warc_digest(block_hex),
        "WARC-Payload-Digest": warc.warc_digest(payload_hex),
    }
    if concurrent_to:
        headers["WARC-Concurrent-To"] = concurrent_to
    if refers_to:
        headers["WARC-Refers-To"] = refers_to
    warc_type = f"application/http; msgtype={record_type}" if http is not None else mime_type
    out = BytesIO()
    writer = WARCWriter(out, gzip=False)
    record = writer.create_warc_record(
        uri,
        record_type,
        payload=BytesIO(payload),
        length=len(payload),
        warc_content_type=warc_type,
        warc_headers_dict=headers,
        http_headers=http,
    )
    writer.write_record(record)
    return out.getvalue()


def response_head() -> StatusAndHeaders:
    return StatusAndHeaders(
        "200 OK",
        [
            ("Content-Type", "application/json"),
            ("X-Archive-Orig-Content-Encoding", "gzip"),
            ("Content-Length", "33"),
        ],
        protocol="HTTP/1.1",
    )


def request_head() -> StatusAndHeaders:
    return StatusAndHeaders(
        "GET /v1/kimi/tasks/kimi-7?include=result&key=REDACTED HTTP/1.1",
        [
            ("Authorization", "REDACTED"),
            ("Accept", "application/json"),
            ("X-Note", "caf\u00e9 \u5317\u4eac"),
        ],  # non-ASCII: warcio percent-encodes it
        protocol="",
        is_http_request=True,
    )


DATE = "2026-12-06T07:30:00Z"
SHAPES: dict[str, dict[str, Any]] = {
    "response with http head": dict(
        record_type="response",
        uri="https://api.example.test/v1/answers?model=m1",
        mime_type="application/json",
        payload=b'{"answer":"Try the Acme Runner."}',
        http="response",
    ),
    "request with http head, non-ASCII header, concurrent": dict(
        record_type="request",
        uri="https://api.example.test/v1/kimi/tasks/kimi-7",
        mime_type="",
        payload=b"",
        http="request",
        concurrent_to="<urn:uuid:primary>",
    ),
    "raw body as resource": dict(
        record_type="resource",
        uri="urn:geo:upstream:up-1",
        mime_type="application/json",
        payload=b'{"a": 1}',
    ),
    "answer text, non-ASCII, concurrent": dict(
        record_type="resource",
        uri="urn:geo:answer_raw:s-1:sha256-00",
        mime_type="text/markdown; charset=utf-8",
        payload="\u63a8\u8350 Acme \u8dd1\u978b".encode(),
        concurrent_to="<urn:uuid:primary>",
    ),
    "metadata with refers-to": dict(
        record_type="metadata",
        uri="urn:geo:citations:s-1:sha256-11",
        mime_type="application/json",
        payload=b'[{"url":"https://acme.test"}]',
        concurrent_to="<urn:uuid:primary>",
        refers_to="<urn:uuid:older>",
    ),
    "conversion, empty payload": dict(
        record_type="conversion",
        uri="urn:geo:answer_html:s-1:sha256-22",
        mime_type="text/html",
        payload=b"",
    ),
    "metadata without a content type": dict(
        record_type="metadata",
        uri="urn:geo:x:s-1",
        mime_type="",
        payload=b"k: v\r\n",
    ),
    "resource without a content type": dict(
        record_type="resource",
        uri="urn:geo:y:s-1",
        mime_type="",
        payload=b"\x00\x01",
    ),
    "non-ASCII target URI, no URI": dict(
        record_type="resource",
        uri="",
        mime_type="image/png",
        payload=b"\x89PNG fake",
    ),
    "non-ASCII target URI": dict(
        record_type="resource",
        uri="https://b\u00fccher.test/\u9875?q=\u00e9",
        mime_type="text/plain",
        payload=b"x" * 70_000,
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_record_bytes_are_warcios_byte_for_byte(shape: str) -> None:
    spec = dict(SHAPES[shape])
    which = spec.pop("http", None)
    heads = {"response": response_head, "request": request_head}
    rid = "<urn:uuid:0c7a1e2e-0000-5000-8000-000000000001>"
    ours = warc._write(
        kind="k", record_id=rid, date=DATE, http=heads[which]() if which else None, **spec
    )
    theirs = warcio_bytes(record_id=rid, date=DATE, http=heads[which]() if which else None, **spec)
    assert gzip.decompress(ours.data) == theirs
    # The digests recorded in PostgreSQL are those of the bytes written.
    read = warc.parse_record(ours.data, shape)
    assert hashlib.sha256(read.block).hexdigest() == ours.block_sha256
    assert read.payload == spec["payload"]
    assert hashlib.sha256(read.payload).hexdigest() == ours.payload_sha256
