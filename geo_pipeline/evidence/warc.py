"""Evidence as WARC records (ISO 28500, written and read with ``warcio``; docs/design.md §10).

An answer's evidence becomes a handful of records, each one gzip member of its own, so that a
record can be cut out of a larger object by (offset, length) and read alone:

* the upstream exchange as a ``response`` record (status line, headers and body as received)
  and a ``request`` record (as sent), ``WARC-Concurrent-To`` the response; when the connector did
  not keep the exchange, the raw body alone as a ``resource`` record;
* the answer text as a ``resource`` record and the normalised citations as a ``metadata``
  record, both ``WARC-Concurrent-To`` the exchange's primary record;
* a screenshot and its thumbnail as ``resource`` records, linked the same way;
* a browser capture's page as a ``resource`` record under the http(s) address the browser
  loaded (as a web archive holds a page), so a player resolves its links against that address;
  the other parts have ``urn:geo:`` URIs of their own.

Secrets never reach a record (D2): credential headers (``Authorization``, API-key headers,
cookies, …) and credential query parameters keep their names and lose their values. The body
is stored as the client read it (decoded), so ``Content-Encoding``/``Transfer-Encoding`` are kept
under ``X-Archive-Orig-*`` names (the pywb convention) and ``Content-Length`` is the stored size.

Every record carries ``WARC-Block-Digest`` and ``WARC-Payload-Digest`` as sha256 (base16, as
Browsertrix writes it); the database keeps both and a read checks both before serving a byte (R20).
Record ids are derived from (sample, attempt, kind, payload digest), and dates from the capture
time, so the same evidence always gives the same bytes.

Pure: values in, bytes out; no database and no storage.
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from io import BytesIO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from isal import isal_zlib
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date

from geo_pipeline.connectors.base import HttpExchange

WARC_MIME = "application/warc"
REDACTED = "[REDACTED]"
REDACTED_PARAM = "REDACTED"  # in a URL: no characters that need escaping
# Each record's gzip member is deflated by ISA-L (python-isal) at level 0, for the worker's CPU
# (issue 33): on the simulator's answers (3.7 records of ~1.5 KB an answer) level 0 costs ~10 us
# an answer against ~38 us at level 1 (whose Huffman tables are built per member: most of the
# cost of a record this small) and ~100 us for zlib at level 6, for members ~28% larger (3,551
# against 2,776 bytes an answer; zlib level 6: 2,716). Any gzip reader reads them (warcio and
# the WACZ tools use zlib).
GZIP_LEVEL = 0
GZIP_WBITS = 16 + 15  # a gzip member (header and CRC), 32 KB window
RECORD_TYPES = ("request", "response", "resource", "metadata", "conversion")
_NAMESPACE = uuid.UUID("6f1c2a53-0a5e-4c55-9a57-2f4f7f0f3c11")  # geo_pipeline evidence records

# Header names whose values are credentials, and name fragments that mark one (x-api-key,
# x-goog-api-key, anthropic-api-key, x-auth-token, x-amz-security-token, …).
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "www-authenticate"}
)
_SECRET_FRAGMENT = re.compile(r"(api[-_]?key|token|secret|password|passwd|session|signature|auth)",
                              re.IGNORECASE)  # fmt: skip
_SECRET_PARAM = re.compile(
    r"^(key|api[-_]?key|access[-_]?token|token|secret|sig|signature|password|auth|"
    r"x-amz-(signature|credential|security-token))$",
    re.IGNORECASE,
)
_MOVED_HEADERS = ("content-encoding", "transfer-encoding")


class WarcCorrupt(ValueError):
    """The bytes are not the one WARC record the index says sits there."""


@dataclass(frozen=True)
class Part:
    """A derived part of an answer: its evidence kind, WARC record type, MIME type, bytes, and
    the address it was captured at when it has one (a browser capture's page, at the http(s)
    URL the browser loaded, credentials redacted); None: a ``urn:geo:`` URI of its own."""

    kind: str
    record_type: str
    mime_type: str
    data: bytes
    uri: str | None = None
    sha256: str | None = None  # of ``data`` (hex), when the caller hashed it already


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


def warc_digest(hex_digest: str) -> str:
    """A sha256 as a WARC digest header value: ``sha256:<hex>`` (RFC 3548 base16, as
    Browsertrix writes sha256; warcio's digest check reads base16 and base32 alike)."""
    return "sha256:" + hex_digest


def digest_hex(value: str) -> str:
    """The hex sha256 of a WARC digest header value, ``sha256:`` in base16 or base32."""
    algo, _, digest = value.partition(":")
    if algo.lower() != "sha256":
        raise WarcCorrupt(f"digest {value!r} is not sha256")
    if len(digest) == 64:
        return digest.lower()
    try:
        return base64.b32decode(digest).hex()
    except ValueError as exc:
        raise WarcCorrupt(f"digest {value!r} is neither base16 nor base32") from exc


# --------------------------------------------------------------------------- redaction (D2)
@lru_cache(maxsize=1024)  # pure in the name; an exchange's few header names recur every answer
def is_secret_header(name: str) -> bool:
    n = name.strip().lower()
    return n in _SECRET_HEADERS or bool(_SECRET_FRAGMENT.search(n))


def redact_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers in order, credential values replaced (names kept: a reader sees one was sent)."""
    return [(k, REDACTED if is_secret_header(k) else v) for k, v in headers]


def redact_url(url: str) -> str:
    """The URL with credential query parameters (``?key=…`` and the like) and userinfo blanked."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1] if "@" in parts.netloc else parts.netloc
    if not parts.query:
        return urlunsplit(parts._replace(netloc=netloc))
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, REDACTED_PARAM if _SECRET_PARAM.match(k) else v) for k, v in pairs])
    return urlunsplit(parts._replace(netloc=netloc, query=query))


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
    member = isal_zlib.compress(raw, GZIP_LEVEL, GZIP_WBITS)
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


def pack(records: Sequence[WarcRecord]) -> tuple[bytes, list[tuple[int, int]]]:
    """One WARC object of gzip-per-record members and each record's (offset, length) in it."""
    spans, offset = [], 0
    for r in records:
        spans.append((offset, len(r.data)))
        offset += len(r.data)
    return b"".join(r.data for r in records), spans


# --------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class ReadRecord:
    record_type: str
    record_id: str
    target_uri: str
    block: bytes
    payload: bytes
    headers: dict[str, str]


def parse_record(member: bytes, where: str) -> ReadRecord:
    """The one record in a gzip member, read with warcio; its block and payload as stored (no
    decoding of the body). ``where`` names the record in messages."""
    # Damaged bytes make the parser fail in many ways (gzip, header syntax, a short block):
    # every one of them is "not the record the index names", never a crash of the reader.
    try:
        records = ArchiveIterator(BytesIO(member), no_record_parse=True, ensure_http_headers=False)
        record = next(iter(records), None)
    except (ArchiveLoadFailed, OSError, EOFError, ValueError, zlib.error) as exc:
        raise WarcCorrupt(f"{where}: not a readable WARC record ({exc})"[:500]) from exc
    if record is None or record.format != "warc":
        raise WarcCorrupt(f"{where}: no WARC record at this offset")
    try:
        block = record.raw_stream.read()
    except (ArchiveLoadFailed, OSError, EOFError, ValueError, zlib.error) as exc:
        raise WarcCorrupt(f"{where}: WARC record is cut off ({exc})"[:500]) from exc
    declared = int(record.rec_headers.get_header("Content-Length") or -1)
    if declared != len(block):
        raise WarcCorrupt(f"{where}: WARC record holds {len(block)} of {declared} bytes")
    payload = block
    if record.rec_type in ("request", "response") and (
        str(record.rec_headers.get_header("Content-Type") or "").startswith("application/http")
    ):
        end = block.find(b"\r\n\r\n")
        if end < 0:
            raise WarcCorrupt(f"{where}: HTTP headers of the {record.rec_type} are cut off")
        payload = block[end + 4 :]
    headers = {k: v for k, v in record.rec_headers.headers}
    return ReadRecord(
        record_type=str(record.rec_type),
        record_id=str(headers.get("WARC-Record-ID", "")),
        target_uri=str(headers.get("WARC-Target-URI", "")),
        block=block,
        payload=payload,
        headers=headers,
    )


@dataclass(frozen=True)
class Placement:
    """Where a written record landed: its batch object and the offset in it."""

    record: WarcRecord
    object_key: str
    offset: int

    @property
    def storage_key(self) -> str:
        return record_key(self.object_key, self.offset, len(self.record.data))


def record_key(object_key: str, offset: int, length: int) -> str:
    """A record's address as one string, ``<object key>#<offset>-<length>``: what
    ``geo.evidence_objects.storage_key`` holds for a WARC-stored kind, so readers that take a
    storage key read a record as they read a whole object."""
    return f"{object_key}#{offset}-{length}"


def split_record_key(key: str) -> tuple[str, int, int] | None:
    """(object key, offset, length) of a record key; None for a whole-object key."""
    base, sep, span = key.rpartition("#")
    if not sep:
        return None
    start, dash, size = span.partition("-")
    if not (dash and start.isdigit() and size.isdigit()) or int(size) <= 0:
        raise WarcCorrupt(f"{key!r}: not a WARC record address (<object>#<offset>-<length>)")
    return base, int(start), int(size)


def is_record_key(key: str) -> bool:
    return "#" in key
