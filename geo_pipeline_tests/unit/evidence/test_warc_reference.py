"""evidence.warc's record writer (made cheaper for the worker's CPU, issue 33) writes exactly
what the writer it replaced wrote (``warc_reference``, frozen): for simulator answers with and
without their HTTP exchange, browser captures and screenshots, late parts with and without
``WARC-Concurrent-To``/``WARC-Refers-To``, odd exchanges (non-ASCII headers, an empty HTTP
version, a bare status) and capture times in other zones, every record -- its gzip member and
every index field -- is the reference's, and warcio reads every one back with its digests."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from io import BytesIO
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from geo_pipeline.connectors.base import HttpExchange
from geo_pipeline.evidence import recording, warc
from geo_pipeline_tests.unit.evidence import warc_reference as reference
from geo_pipeline_tests.unit.evidence.test_warc_stored_fields import (
    fixed_thumbnails,
    simulator_evidence,
)

N = 160


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The arguments ``prepare_warc_evidence`` gives ``answer_records`` for N simulator
    answers, each with its exchange and without it."""
    monkeypatch.setattr(recording, "screenshot_derivatives", fixed_thumbnails)
    calls: list[dict[str, Any]] = []

    def capture(**kw: Any) -> list[warc.WarcRecord]:
        calls.append(kw)
        return warc.answer_records(**kw)

    monkeypatch.setattr(recording, "answer_records", capture)
    for ref, n, ev, policy in simulator_evidence(N):
        recording.prepare_warc_evidence(ref, n, ev, policy)
        recording.prepare_warc_evidence(ref, n, replace(ev, exchange=None), policy)
    assert len(calls) == 2 * N
    return calls


def _odd(exchange: HttpExchange, k: int) -> HttpExchange:
    """Exchanges the simulator does not make: each takes one of the writer's other paths."""
    return [
        replace(exchange, http_version=""),  # no protocol on the status line
        replace(exchange, reason=""),  # "200" alone
        replace(exchange, response_headers=(*exchange.response_headers,
                                            ("X-Note", "café 北京"))),  # percent-encoded
        replace(exchange, request_headers=(("X-Q", "咖啡"), ("Content-Type", "text/plain"))),
        replace(exchange, response_headers=(("Content-Encoding", "br"),
                                            ("Transfer-Encoding", "chunked"),
                                            ("x-api-key", "K"), ("Content-Length", "1"))),
        replace(exchange, url="https://user:pw@api.example.test/v1/x?token=T&q=1", status=404,
                reason="Not Found"),
        replace(exchange, method="POST", request_body=b'{"q": "x"}'),
    ][k % 7]  # fmt: skip


def _same(got: list[warc.WarcRecord], want: list[warc.WarcRecord]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert type(g) is warc.WarcRecord and type(w) is reference.WarcRecord
        assert g._asdict() == vars(w)  # the gzip member and every index field


def _warcio_reads(records: list[warc.WarcRecord]) -> int:
    """warcio reads the records back in order, their digests checked by warcio and equal to
    the ones the index records; each (offset, length) cuts out exactly its record."""
    data, spans = warc.pack(records)
    read = 0
    it = ArchiveIterator(BytesIO(data), check_digests="raise")
    for record, rec in zip(it, records, strict=True):
        record.content_stream().read()
        assert record.digest_checker.passed is not False, record.digest_checker.problems
        headers = record.rec_headers
        assert headers.get_header("WARC-Record-ID") == rec.record_id
        assert headers.get_header("WARC-Type") == rec.record_type
        assert warc.digest_hex(headers.get_header("WARC-Block-Digest")) == rec.block_sha256
        assert warc.digest_hex(headers.get_header("WARC-Payload-Digest")) == rec.payload_sha256
        read += 1
    assert read == len(records)
    for (offset, length), rec in zip(spans, records, strict=True):
        one = warc.parse_record(data[offset : offset + length], rec.kind)
        assert hashlib.sha256(one.block).hexdigest() == rec.block_sha256
        assert hashlib.sha256(one.payload).hexdigest() == rec.payload_sha256
        assert len(one.payload) == rec.payload_size
    return read


def test_answer_records_are_the_references_and_warcio_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _calls(monkeypatch)
    records = 0
    for k, kw in enumerate(calls):
        variants = [kw]
        if kw["exchange"] is not None:
            variants.append(dict(kw, exchange=_odd(kw["exchange"], k)))
        if k % 5 == 0:  # a capture time in another zone, and a naive one
            at = kw["captured_at"]
            variants.append(dict(kw, captured_at=at.astimezone(timezone(timedelta(hours=8)))))
            variants.append(dict(kw, captured_at=at.replace(tzinfo=None), parts=()))
        for v in variants:
            got = warc.answer_records(**v)
            _same(got, reference.answer_records(**v))
            records += _warcio_reads(got)
    assert records > 3 * len(calls)


@pytest.mark.parametrize("concurrent_to", [None, "<urn:uuid:primary>"])
@pytest.mark.parametrize("refers_to", [None, "<urn:uuid:older>"])
def test_part_records_are_the_references(
    monkeypatch: pytest.MonkeyPatch, concurrent_to: str | None, refers_to: str | None
) -> None:
    """Late parts (warc_revisions, the WACZ export): every record type a part may have, a
    part captured at an address (credentials in it), a part without a content type and a
    part whose digest the caller gave."""
    at = datetime(2026, 12, 7, 4, 0, 1, 999999, tzinfo=UTC)
    parts = [
        warc.Part("answer_raw", "conversion", "text/markdown; charset=utf-8", "推荐 Acme".encode()),
        warc.Part("citations", "metadata", "application/json", b"[]",
                  sha256=hashlib.sha256(b"[]").hexdigest()),
        warc.Part("screenshot", "resource", "image/png", b"\x89PNG" * 40),
        warc.Part("page_html", "resource", "text/html", b"<html></html>",
                  uri="https://user:pw@chat.example/c/1?token=T&q=咖啡"),
        warc.Part("capture", "metadata", "", b"k: v\r\n"),
        warc.Part("thumbnail", "resource", "", b""),
    ]  # fmt: skip
    for sample_id, attempt_no in (("s-1", 1), ("样本-2", 7)):
        kw: dict[str, Any] = dict(
            sample_id=sample_id, attempt_no=attempt_no, captured_at=at, parts=parts,
            concurrent_to=concurrent_to, refers_to=refers_to,
        )  # fmt: skip
        got = warc.part_records(**kw)
        _same(got, reference.part_records(**kw))
        _warcio_reads(got)
    with pytest.raises(ValueError, match="record type 'response'"):
        warc.part_records(sample_id="s", attempt_no=1, captured_at=at,
                          parts=[warc.Part("x", "response", "text/plain", b"x")])  # fmt: skip


def test_the_comparison_sees_a_changed_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not blind: the reference with one header written differently is told apart."""
    kw = _calls(monkeypatch)[0]
    monkeypatch.setattr(reference, "_warc_date", lambda at: "2026-12-07T04:00:00.0Z")
    with pytest.raises(AssertionError):
        _same(warc.answer_records(**kw), reference.answer_records(**kw))
