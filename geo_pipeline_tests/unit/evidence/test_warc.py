"""WARC records of an answer's evidence (evidence.warc): written with warcio, read back with
warcio's ArchiveIterator, digests sha256, secrets redacted before a byte is written (D2)."""

from __future__ import annotations

import gzip
import hashlib
import uuid
from datetime import UTC, datetime, timedelta, timezone
from io import BytesIO
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.timeutils import datetime_to_iso_date

from geo_pipeline.connectors.base import HttpExchange
from geo_pipeline.evidence import warc

AT = datetime(2026, 12, 6, 7, 30, tzinfo=UTC)
EXCHANGE = HttpExchange(
    method="POST",
    url="https://api.example.test/v1/answers?key=QUERYSECRET&model=m1",
    request_headers=(
        ("Authorization", "Bearer HEADERSECRET"),
        ("x-goog-api-key", "GOOGSECRET"),
        ("Cookie", "sid=COOKIESECRET"),
        ("Content-Type", "application/json"),
    ),
    request_body=b'{"prompt":"best running shoes"}',
    status=200,
    reason="OK",
    response_headers=(
        ("Content-Type", "application/json"),
        ("Content-Encoding", "gzip"),
        ("Content-Length", "999"),
        ("Set-Cookie", "sid=SETCOOKIESECRET"),
        ("X-Request-Id", "req-1"),
    ),
)
RAW = b'{"answer":"Try the Acme Runner."}'
PARTS = [
    warc.Part("answer_raw", "resource", "text/markdown; charset=utf-8", b"Try the Acme Runner."),
    warc.Part("citations", "metadata", "application/json", b'[{"url":"https://acme.test"}]'),
    warc.Part("screenshot", "resource", "image/png", b"\x89PNG fake bytes"),
    warc.Part("thumbnail", "resource", "image/webp", b"RIFF thumb"),
]


def records(exchange: HttpExchange | None = EXCHANGE) -> list[warc.WarcRecord]:
    return warc.answer_records(
        sample_id="s-1", attempt_no=2, upstream_id="up-1", captured_at=AT, raw_body=RAW,
        raw_mime_type="application/json", exchange=exchange, parts=PARTS,
    )  # fmt: skip


def test_records_read_back_with_warcio_in_order_with_sha256_digests() -> None:
    recs = records()
    data, spans = warc.pack(recs)
    read = list(ArchiveIterator(BytesIO(data)))
    assert [r.rec_type for r in read] == [
        "response", "request", "resource", "metadata", "resource", "resource",
    ]  # fmt: skip
    response_id = read[0].rec_headers.get_header("WARC-Record-ID")
    for r, rec in zip(read, recs, strict=True):
        assert r.rec_headers.get_header("WARC-Record-ID") == rec.record_id
        block = r.rec_headers.get_header("WARC-Block-Digest")
        payload = r.rec_headers.get_header("WARC-Payload-Digest")
        assert block.startswith("sha256:") and warc.digest_hex(block) == rec.block_sha256
        assert warc.digest_hex(payload) == rec.payload_sha256
        if r is not read[0]:
            assert r.rec_headers.get_header("WARC-Concurrent-To") == response_id
    assert read[0].rec_headers.get_header("WARC-Date") == "2026-12-06T07:30:00Z"
    # Every record is a gzip member of its own: (offset, length) cuts exactly one out.
    assert spans[0] == (0, len(recs[0].data))
    for (offset, length), rec in zip(spans, recs, strict=True):
        one = warc.parse_record(data[offset : offset + length], "test")
        assert hashlib.sha256(one.block).hexdigest() == rec.block_sha256
        assert hashlib.sha256(one.payload).hexdigest() == rec.payload_sha256
        assert one.record_id == rec.record_id


def test_warcio_checks_our_digests_and_finds_no_problem() -> None:
    data, _ = warc.pack(records())
    checked = []
    for record in ArchiveIterator(BytesIO(data), check_digests="raise"):
        record.content_stream().read()
        checked.append((record.digest_checker.passed, record.digest_checker.problems))
    assert checked == [(True, [])] * len(records())


def test_payloads_are_the_bytes_as_received() -> None:
    recs = records()
    data, spans = warc.pack(recs)
    payloads = [warc.parse_record(data[o : o + n], "t").payload for o, n in spans]
    assert payloads == [RAW, EXCHANGE.request_body, *(p.data for p in PARTS)]
    response = next(iter(ArchiveIterator(BytesIO(recs[0].data))))
    assert response.http_headers.get_statuscode() == "200"
    # The body is stored decoded, so its encoding header is kept under another name and the
    # length is the stored one: warcio must not try to gunzip a plain body.
    assert response.http_headers.get_header("Content-Encoding") is None
    assert response.http_headers.get_header("X-Archive-Orig-Content-Encoding") == "gzip"
    assert response.http_headers.get_header("Content-Length") == str(len(RAW))
    assert response.content_stream().read() == RAW
    request = next(iter(ArchiveIterator(BytesIO(recs[1].data))))
    assert request.http_headers.protocol == "POST"
    assert request.http_headers.statusline.endswith("HTTP/1.1")


def test_secrets_in_headers_and_query_are_redacted_before_writing() -> None:
    plain = gzip.decompress(warc.pack(records())[0])
    for secret in (b"HEADERSECRET", b"GOOGSECRET", b"COOKIESECRET", b"SETCOOKIESECRET",
                   b"QUERYSECRET"):  # fmt: skip
        assert secret not in plain
    assert b"Authorization: [REDACTED]" in plain
    assert b"X-Request-Id: req-1" in plain  # ordinary headers stay
    assert b"key=REDACTED&model=m1" in plain


def test_same_evidence_gives_the_same_bytes() -> None:
    assert warc.pack(records())[0] == warc.pack(records())[0]


def test_without_an_exchange_the_raw_body_is_a_resource_record() -> None:
    recs = records(exchange=None)
    assert [r.record_type for r in recs][:2] == ["resource", "resource"]
    assert recs[0].kind == "response_raw" and recs[0].target_uri == "urn:geo:upstream:up-1"
    assert warc.parse_record(recs[0].data, "t").payload == RAW


def test_a_damaged_record_is_reported_not_read() -> None:
    rec = records()[2]
    with pytest.raises(warc.WarcCorrupt, match="where"):
        warc.parse_record(rec.data[: len(rec.data) // 2], "where")
    with pytest.raises(warc.WarcCorrupt, match="no WARC record"):
        warc.parse_record(b"", "where")


def test_part_record_types_are_checked() -> None:
    with pytest.raises(ValueError, match="record type 'response'"):
        warc.part_records(
            sample_id="s", attempt_no=1, captured_at=AT,
            parts=[warc.Part("answer_raw", "response", "text/plain", b"x")],
        )  # fmt: skip


def test_a_bad_evidence_format_names_the_variable_and_the_choices(monkeypatch) -> None:
    from geo_pipeline.settings import SettingsError, settings

    monkeypatch.setenv("GEO_EVIDENCE_FORMAT", "zip")
    with pytest.raises(SettingsError, match=r"GEO_EVIDENCE_FORMAT='zip'.*'bundle' or 'warc'"):
        settings()


def _evidence(raw: bytes, screenshot: bytes | None = None) -> Any:
    from geo_pipeline.connectors.base import Attachment, Evidence

    shot = Attachment("screenshot", "available", screenshot, "image/png") if screenshot else None
    return Evidence(
        sample_id="s-1", upstream_id="up-1", collection_state="completed",
        answer_text="Try Acme.", raw_body=raw, raw_mime_type="application/json",
        captured_at=AT, screenshot=shot,
    )  # fmt: skip


def test_a_record_over_the_cap_is_refused_with_its_size_and_the_cap() -> None:
    from geo_pipeline.evidence import SampleRef
    from geo_pipeline.evidence.recording import prepare_warc_evidence

    ref = SampleRef("s-1", "run-1", "tenant-a")
    big = prepare_warc_evidence(ref, 1, _evidence(b"x" * 101), "off", max_record_bytes=100)
    assert big.warc_pending == () and big.failure == (
        "ARCHIVE_FAILED: RECORD_TOO_LARGE: response_raw is 101 bytes, the cap is 100 "
        "(GEO_EVIDENCE_RECORD_MAX_BYTES)"
    )
    fits = prepare_warc_evidence(ref, 1, _evidence(b"x" * 100), "off", max_record_bytes=100)
    assert fits.failure is None and fits.warc_pending


def test_an_oversized_screenshot_is_left_out_and_says_why() -> None:
    import io

    from PIL import Image

    from geo_pipeline.evidence import SampleRef
    from geo_pipeline.evidence.recording import prepare_warc_evidence

    out = io.BytesIO()
    Image.new("RGB", (400, 800), (10, 200, 30)).save(out, format="PNG")
    png = out.getvalue()
    ref = SampleRef("s-1", "run-1", "tenant-a")
    cap = len(png) - 1
    got = prepare_warc_evidence(ref, 1, _evidence(b"{}", png), "required", max_record_bytes=cap)
    assert got.failure is None
    assert got.screenshot_status == "unavailable" and "SCREENSHOT_UNAVAILABLE" in got.warnings
    assert got.screenshot_detail == (
        f"RECORD_TOO_LARGE: screenshot is {len(png)} bytes, the cap is {cap} "
        "(GEO_EVIDENCE_RECORD_MAX_BYTES)"
    )
    assert {r.kind for r in got.warc_pending} == {"response_raw", "answer_raw", "citations"}


@pytest.mark.parametrize(
    ("sample_id", "attempt_no", "kind", "digest"),
    [("s-1", 1, "response_raw", "ab" * 32), ("样本-2", 7, "answer_raw", ""), ("", 0, "k", "0")],
)
def test_record_ids_are_uuid5_of_the_record_name(
    sample_id: str, attempt_no: int, kind: str, digest: str
) -> None:
    name = f"{sample_id}/{attempt_no}/{kind}/{digest}"
    expected = f"<urn:uuid:{uuid.uuid5(warc._NAMESPACE, name)}>"
    assert warc._record_id(sample_id, attempt_no, kind, digest) == expected


def test_a_written_record_is_the_named_tuple_with_every_field() -> None:
    """The writers make ``WarcRecord`` as the tuple it is, without its ``__new__`` (CPU,
    issue 33): a field added to the class must be set there too."""
    for record in [*records(), *records(None)]:
        assert type(record) is warc.WarcRecord and len(record) == len(warc.WarcRecord._fields)
        assert record == warc.WarcRecord(**record._asdict())
        assert isinstance(record.payload_size, int) and record.data[:2] == b"\x1f\x8b"


@pytest.mark.parametrize(
    "at",
    [datetime(2026, 12, 7, 4, 0, 1, 999999, tzinfo=UTC), datetime(2026, 12, 7, 23, 59, 59),
     datetime(2026, 12, 8, 7, 30, tzinfo=timezone(timedelta(hours=8))),
     datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC)],
)  # fmt: skip
def test_warc_dates_are_warcios(at: datetime) -> None:
    utc = at.astimezone(UTC) if at.tzinfo else at
    assert warc._warc_date(at) == datetime_to_iso_date(utc.replace(tzinfo=None))
