"""The WARC record writer as it was before its CPU was cut (issue 33, round 7), frozen: the
reference ``test_warc_reference`` compares evidence.warc's writer with, record for record, on
simulator answers. Do not edit (a deliberate format change updates the stored digests in
test_warc_stored_fields instead); it is the writer of commit eb95578 verbatim, with the names it
shares with evidence.warc imported from there; its WarcRecord (a frozen dataclass then) is
copied with it."""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

from isal import isal_zlib
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date

from geo_pipeline.connectors.base import HttpExchange
from geo_pipeline.evidence import warc as _current
from geo_pipeline.evidence.warc import (
    _MOVED_HEADERS,
    _NAMESPACE,
    GZIP_WBITS,
    Part,
    redact_headers,
    redact_url,
)


@dataclass(frozen=True)
class WarcRecord:
    """One record, written: a whole gzip member, and what the index table records of it."""

    kind: str  # the evidence kind it holds ('response_raw', 'request', 'answer_raw', …)
    record_type: str  # request | response | resource | metadata
    record_id: str  # <urn:uuid:…>
    target_uri: str
    mime_type: str  # the payload's type
    data: bytes  # the gzip member
    block_sha256: str  # hex
    payload_sha256: str  # hex
    payload_size: int


# --------------------------------------------------------------------------- writing
_NAMESPACE_BYTES = _NAMESPACE.bytes


def _record_id(sample_id: str, attempt_no: int, kind: str, payload_sha256: str) -> str:
    # uuid.uuid5(_NAMESPACE, name) put together directly (the UUID object's checks and str()
    # cost more than the SHA-1): the hex digest's version nibble set to 5 and its variant
    # nibble to RFC 4122's (10xx); test_warc checks it against uuid5.
    name = f"{sample_id}/{attempt_no}/{kind}/{payload_sha256}"
    h = hashlib.sha1(_NAMESPACE_BYTES + name.encode("utf-8")).hexdigest()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}>"


# The variant nibble of a uuid5 (its two high bits 10) for each hex digit of the SHA-1.
_VARIANT = {f"{n:x}": f"{(n & 0x3) | 0x8:x}" for n in range(16)}


def _warc_date(at: datetime) -> str:
    """``WARC-Date``: the capture time in UTC to the second (a naive time is UTC), as warcio's
    ``datetime_to_iso_date`` writes it; ``isoformat`` is a fifth of ``strftime``'s cost, and an
    answer's capture time is its own (a cache never hit)."""
    if at.tzinfo is not None and at.utcoffset():
        at = at.astimezone(UTC)
    if at.year < 1000:  # strftime('%Y') does not pad: keep warcio's text
        return str(datetime_to_iso_date(at.replace(tzinfo=None)))
    return at.isoformat(timespec="seconds")[:19] + "Z"


_new = object.__new__
_DEFAULT_TYPES = {"metadata": "application/warc-fields", "warcinfo": "application/warc-fields"}


def _write(
    *,
    kind: str,
    record_type: str,
    uri: str,
    record_id: str,
    date: str,
    mime_type: str,
    payload: bytes,
    http: StatusAndHeaders | None = None,
    concurrent_to: str | None = None,
    refers_to: str | None = None,
    payload_hex: str | None = None,
) -> WarcRecord:
    # ``payload_hex``: the payload's sha256 when the caller has it already (it names the record
    # id): each payload is hashed once, and a block with an HTTP head once more as a whole.
    if payload_hex is None:
        payload_hex = hashlib.sha256(payload).hexdigest()
    head = b""
    if http is not None:
        http.compute_headers_buffer()
        head = http.headers_buff
    if head:
        block = hashlib.sha256(head)
        block.update(payload)  # no copy of head + payload just to hash it
        block_hex = block.hexdigest()
    else:
        block_hex = payload_hex
    warc_type = f"application/http; msgtype={record_type}" if http is not None else mime_type
    if not warc_type:  # warcio's default for a record without a content type
        warc_type = _DEFAULT_TYPES.get(record_type, "application/warc-record")
    # The record's bytes as warcio's WARCWriter writes them (WARC/1.0, our headers in order --
    # id, date, block and payload digests, concurrent-to, refers-to -- then WARC-Type,
    # WARC-Target-URI, Content-Type, Content-Length; a blank line; the HTTP head; the payload;
    # two CRLFs), put together directly: its record builder cost more than the gzip on the hot
    # path. One format and one join (no header dict, no line list, no concatenated copies of
    # the payload). test_warc_bytes checks every record shape byte for byte against warcio's
    # writer.
    text = (
        f"WARC/1.0\r\nWARC-Record-ID: {record_id}\r\nWARC-Date: {date}\r\n"
        f"WARC-Block-Digest: sha256:{block_hex}\r\nWARC-Payload-Digest: sha256:{payload_hex}\r\n"
    )
    if concurrent_to:
        text += f"WARC-Concurrent-To: {concurrent_to}\r\n"
    if refers_to:
        text += f"WARC-Refers-To: {refers_to}\r\n"
    text += f"WARC-Type: {record_type}\r\n"
    if uri:
        text += f"WARC-Target-URI: {uri}\r\n"
    text += f"Content-Type: {warc_type}\r\nContent-Length: {len(head) + len(payload)}\r\n\r\n"
    raw = b"".join((text.encode("utf-8"), head, payload, b"\r\n\r\n"))
    # One gzip member per record (GZIP_LEVEL: why ISA-L at level 0; warcio's own wrapper uses
    # zlib at level 9).
    member = isal_zlib.compress(raw, _current.GZIP_LEVEL, GZIP_WBITS)
    # WarcRecord(...) without the frozen dataclass's __init__ (nine object.__setattr__ calls,
    # ~1 us a record): the same fields, the same object.
    record = _new(WarcRecord)
    record.__dict__.update(
        kind=kind, record_type=record_type, record_id=record_id, target_uri=uri,
        mime_type=mime_type, data=member, block_sha256=block_hex, payload_sha256=payload_hex,
        payload_size=len(payload),
    )  # fmt: skip
    return record


def _response_headers(exchange: HttpExchange, body: bytes) -> StatusAndHeaders:
    headers = []
    for k, v in redact_headers(exchange.response_headers):
        low = k.lower()
        if low in _MOVED_HEADERS:
            headers.append((f"X-Archive-Orig-{k}", v))
        elif low != "content-length":
            headers.append((k, v))
    headers.append(("Content-Length", str(len(body))))
    status = f"{exchange.status} {exchange.reason}".strip()
    return StatusAndHeaders(status, headers, protocol=exchange.http_version)


def _request_headers(exchange: HttpExchange, url: str) -> StatusAndHeaders:
    parts = urlsplit(url)
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return StatusAndHeaders(
        f"{exchange.method} {target} {exchange.http_version}",
        redact_headers(exchange.request_headers),
        protocol="",
        is_http_request=True,
    )


def answer_records(
    *,
    sample_id: str,
    attempt_no: int,
    upstream_id: str,
    captured_at: datetime,
    raw_body: bytes,
    raw_mime_type: str,
    exchange: HttpExchange | None = None,
    parts: Sequence[Part] = (),
) -> list[WarcRecord]:
    """One answer's records, the exchange first (module docstring). ``parts`` (answer text,
    citations, screenshot, thumbnail) are linked to the exchange by ``WARC-Concurrent-To``."""
    date = _warc_date(captured_at)
    raw_hex = hashlib.sha256(raw_body).hexdigest()
    primary_id = _record_id(sample_id, attempt_no, "response_raw", raw_hex)
    records: list[WarcRecord] = []
    if exchange is not None:
        url = redact_url(exchange.url)
        records.append(
            _write(
                kind="response_raw", record_type="response", uri=url, record_id=primary_id,
                date=date, mime_type=raw_mime_type, payload=raw_body,
                http=_response_headers(exchange, raw_body), payload_hex=raw_hex,
            )
        )  # fmt: skip
        body_hex = hashlib.sha256(exchange.request_body).hexdigest()
        records.append(
            _write(
                kind="request", record_type="request", uri=url,
                record_id=_record_id(sample_id, attempt_no, "request", body_hex), date=date,
                mime_type=_header(exchange.request_headers, "content-type") or "",
                payload=exchange.request_body, http=_request_headers(exchange, url),
                concurrent_to=primary_id, payload_hex=body_hex,
            )
        )  # fmt: skip
    else:
        records.append(
            _write(
                kind="response_raw", record_type="resource",
                uri=f"urn:geo:upstream:{upstream_id or sample_id}", record_id=primary_id,
                date=date, mime_type=raw_mime_type or "application/octet-stream",
                payload=raw_body, payload_hex=raw_hex,
            )
        )  # fmt: skip
    records += _part_records(sample_id, attempt_no, date, parts, primary_id, None)
    return records


def part_records(
    *,
    sample_id: str,
    attempt_no: int,
    captured_at: datetime,
    parts: Sequence[Part],
    concurrent_to: str | None = None,
    refers_to: str | None = None,
) -> list[WarcRecord]:
    """Records of derived parts or of a late screenshot. Without ``concurrent_to`` the first
    part is the one the others are linked to. ``refers_to`` (a record id) goes on the
    ``metadata`` and ``conversion`` parts only: WARC 1.1 (section 5.11) does not allow
    ``WARC-Refers-To`` on a ``resource`` record."""
    return _part_records(
        sample_id, attempt_no, _warc_date(captured_at), parts, concurrent_to, refers_to
    )


def _part_records(
    sample_id: str,
    attempt_no: int,
    date: str,
    parts: Sequence[Part],
    concurrent_to: str | None,
    refers_to: str | None,
) -> list[WarcRecord]:
    records: list[WarcRecord] = []
    for part in parts:
        if part.record_type not in ("resource", "metadata", "conversion"):
            raise ValueError(f"part {part.kind}: record type {part.record_type!r} is not "
                             "resource, metadata or conversion")  # fmt: skip
        payload_hex = part.sha256 or hashlib.sha256(part.data).hexdigest()
        rid = _record_id(sample_id, attempt_no, part.kind, payload_hex)
        uri = (
            redact_url(part.uri)
            if part.uri
            else f"urn:geo:{part.kind}:{sample_id}:sha256-{payload_hex}"
        )
        records.append(
            _write(
                kind=part.kind, record_type=part.record_type, uri=uri, record_id=rid,
                date=date, mime_type=part.mime_type, payload=part.data,
                concurrent_to=concurrent_to,
                refers_to=refers_to if part.record_type != "resource" else None,
                payload_hex=payload_hex,
            )
        )  # fmt: skip
        concurrent_to = concurrent_to or rid
    return records


def _header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None
