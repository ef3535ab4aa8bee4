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
import importlib
import re
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from io import BytesIO
from typing import Any, NamedTuple, cast
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


class Part(NamedTuple):
    """A derived part of an answer: its evidence kind, WARC record type, MIME type, bytes, and
    the address it was captured at when it has one (a browser capture's page, at the http(s)
    URL the browser loaded, credentials redacted); None: a ``urn:geo:`` URI of its own.

    A named tuple (not a frozen dataclass: ~0.3 us to make instead of ~1.2, and the record
    writer unpacks it in one step), ~4 made an answer on the worker's event loop."""

    kind: str
    record_type: str
    mime_type: str
    data: bytes
    uri: str | None = None
    sha256: str | None = None  # of ``data`` (hex), when the caller hashed it already


class WarcRecord(NamedTuple):
    """One record, written: a whole gzip member, and what the index table records of it. A
    named tuple: ~4 are made an answer on the worker's event loop, and a tuple costs a
    fraction of a frozen dataclass (its __init__ sets each field with object.__setattr__)."""

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
def _builtin_sha1() -> Callable[[bytes], Any]:
    """CPython's own SHA-1 (``_sha1``) where there is one: a record id hashes ~100 bytes, and
    for that little OpenSSL's context set-up and teardown cost more than the hashing (~1,600
    of ~6,400 instructions a record id)."""
    try:
        return cast(Callable[[bytes], Any], importlib.import_module("_sha1").sha1)
    except (ImportError, AttributeError):  # another Python: the same digest from hashlib
        return hashlib.sha1


# The worker writes ~4 records an answer on its event loop (issue 33): the writers below put
# each record's bytes together directly, in warcio's WARCWriter layout (test_warc_bytes checks
# every shape byte for byte against warcio's writer, and test_warc_reference every record of
# simulator answers against the writer this one replaced). What an answer's records share is
# made once an answer: the date, the record-id name's prefix, the WARC-Concurrent-To line.
_NAMESPACE_BYTES = _NAMESPACE.bytes
_sha1 = _builtin_sha1()
_sha256 = hashlib.sha256
_tuple = tuple.__new__  # a named tuple made without its Python-level __new__
_DEFAULT_TYPES = {"metadata": "application/warc-fields", "warcinfo": "application/warc-fields"}
_PART_TYPES = frozenset(("resource", "metadata", "conversion"))
# The variant nibble of a uuid5 (its two high bits 10) for each hex digit of the SHA-1.
_VARIANT = {f"{n:x}": f"{(n & 0x3) | 0x8:x}" for n in range(16)}


def _id_prefix(sample_id: str, attempt_no: int) -> bytes:
    """What every record id of one (sample, attempt) hashes first (``_record_id``)."""
    return _NAMESPACE_BYTES + f"{sample_id}/{attempt_no}/".encode()


def _record_id(sample_id: str, attempt_no: int, kind: str, payload_sha256: str) -> str:
    return _uuid_urn(_id_prefix(sample_id, attempt_no), kind, payload_sha256)


def _uuid_urn(prefix: bytes, kind: str, payload_sha256: str) -> str:
    # uuid.uuid5(_NAMESPACE, f"{sample}/{attempt}/{kind}/{digest}") put together directly (the
    # UUID object's checks and str() cost more than the SHA-1): the hex digest's version nibble
    # set to 5 and its variant nibble to RFC 4122's (10xx); test_warc checks it against uuid5.
    h = _sha1(prefix + f"{kind}/{payload_sha256}".encode()).hexdigest()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}>"


def _warc_date(at: datetime) -> str:
    """``WARC-Date``: the capture time in UTC to the second (a naive time is UTC), as warcio's
    ``datetime_to_iso_date`` writes it (without ``strftime``, several times the cost); an
    answer's capture time is its own (a cache never hit)."""
    tz = at.tzinfo
    if tz is not UTC and tz is not None and at.utcoffset():
        at = at.astimezone(UTC)
    year = at.year
    if year < 1000:  # strftime('%Y') does not pad: keep warcio's text
        return str(datetime_to_iso_date(at.replace(tzinfo=None)))
    # The fields put together (two-digit ones from a table): ~5,900 instructions against
    # isoformat's ~14,600 (it formats the offset too) and int formatting's ~10,000.
    two = _TWO_DIGITS
    return f"{year}-{two[at.month]}-{two[at.day]}T{two[at.hour]}:{two[at.minute]}:{two[at.second]}Z"


_TWO_DIGITS = [f"{n:02d}" for n in range(100)]


def _plain(
    kind: str,
    record_type: str,
    uri: str,
    record_id: str,
    date: str,
    mime_type: str,
    payload: bytes,
    payload_hex: str,
    links: str,
) -> WarcRecord:
    """A record whose block is its payload (resource, metadata, conversion: one digest for
    both), ``links`` its ``WARC-Concurrent-To``/``WARC-Refers-To`` lines: ``_write``'s bytes
    in one format and one join."""
    if not uri:  # no WARC-Target-URI line: the general writer
        return _write(kind=kind, record_type=record_type, uri=uri, record_id=record_id,
                      date=date, mime_type=mime_type, payload=payload, links=links,
                      payload_hex=payload_hex)  # fmt: skip
    text = (
        f"WARC/1.0\r\nWARC-Record-ID: {record_id}\r\nWARC-Date: {date}\r\n"
        f"WARC-Block-Digest: sha256:{payload_hex}\r\nWARC-Payload-Digest: sha256:{payload_hex}"
        f"\r\n{links}WARC-Type: {record_type}\r\nWARC-Target-URI: {uri}\r\nContent-Type: "
        f"{mime_type or _DEFAULT_TYPES.get(record_type, 'application/warc-record')}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    # One gzip member per record (GZIP_LEVEL: why ISA-L at level 0; warcio's own wrapper uses
    # zlib at level 9).
    member = isal_zlib.compress(
        b"".join((text.encode(), payload, b"\r\n\r\n")), GZIP_LEVEL, GZIP_WBITS
    )
    return _tuple(WarcRecord, (kind, record_type, record_id, uri, mime_type, member,
                               payload_hex, payload_hex, len(payload)))  # fmt: skip


def _write(
    *,
    kind: str,
    record_type: str,
    uri: str,
    record_id: str,
    date: str,
    mime_type: str,
    payload: bytes,
    http: StatusAndHeaders | bytes | None = None,
    concurrent_to: str | None = None,
    refers_to: str | None = None,
    payload_hex: str | None = None,
    links: str = "",
) -> WarcRecord:
    """Any record: ``http`` its HTTP head (warcio's ``StatusAndHeaders``, or its bytes as
    ``_http_head`` makes them), ``links`` lines already made or ``concurrent_to``/``refers_to``."""
    # ``payload_hex``: the payload's sha256 when the caller has it already (it names the record
    # id): each payload is hashed once, and a block with an HTTP head once more as a whole.
    if payload_hex is None:
        payload_hex = _sha256(payload).hexdigest()
    head = b""
    if isinstance(http, StatusAndHeaders):
        http.compute_headers_buffer()
        head = http.headers_buff
    elif http is not None:
        head = http
    if head:
        block = _sha256(head)
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
    # path.
    if concurrent_to:
        links += f"WARC-Concurrent-To: {concurrent_to}\r\n"
    if refers_to:
        links += f"WARC-Refers-To: {refers_to}\r\n"
    target = f"WARC-Target-URI: {uri}\r\n" if uri else ""
    text = (
        f"WARC/1.0\r\nWARC-Record-ID: {record_id}\r\nWARC-Date: {date}\r\n"
        f"WARC-Block-Digest: sha256:{block_hex}\r\nWARC-Payload-Digest: sha256:{payload_hex}"
        f"\r\n{links}WARC-Type: {record_type}\r\n{target}Content-Type: {warc_type}\r\n"
        f"Content-Length: {len(head) + len(payload)}\r\n\r\n"
    )
    member = isal_zlib.compress(
        b"".join((text.encode(), head, payload, b"\r\n\r\n")), GZIP_LEVEL, GZIP_WBITS
    )
    return _tuple(WarcRecord, (kind, record_type, record_id, uri, mime_type, member,
                               block_hex, payload_hex, len(payload)))  # fmt: skip


def _http_head(first_line: str, headers: Iterable[tuple[str, str]]) -> bytes | StatusAndHeaders:
    """An HTTP head's bytes as warcio's ``StatusAndHeaders.compute_headers_buffer`` makes them
    (the first line, ``name: value`` lines, a blank line), or, for a head that is not all
    ASCII, warcio's own object (it percent-encodes such headers)."""
    text = first_line + "\r\n" + "".join([f"{k}: {v}\r\n" for k, v in headers]) + "\r\n"
    if text.isascii():
        return text.encode()
    return StatusAndHeaders("", list(headers), protocol=first_line)


def _response_head(exchange: HttpExchange, body: bytes) -> bytes | StatusAndHeaders:
    headers = []
    for k, v in exchange.response_headers:
        low = k.lower()
        if is_secret_header(k):
            v = REDACTED
        if low in _MOVED_HEADERS:
            headers.append((f"X-Archive-Orig-{k}", v))
        elif low != "content-length":
            headers.append((k, v))
    headers.append(("Content-Length", str(len(body))))
    status = f"{exchange.status} {exchange.reason}".strip()
    version = exchange.http_version
    if not version or not status:  # warcio leaves out the empty part and its space
        return StatusAndHeaders(status, headers, protocol=version)
    return _http_head(f"{version} {status}", headers)


def _request_head(exchange: HttpExchange, url: str) -> bytes | StatusAndHeaders:
    parts = urlsplit(url)
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    line = f"{exchange.method} {target} {exchange.http_version}"
    headers = redact_headers(exchange.request_headers)
    if not exchange.method or " " in exchange.method:  # warcio splits the line at its space
        return StatusAndHeaders(line, headers, protocol="", is_http_request=True)
    return _http_head(line, headers)


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
    raw_hex = _sha256(raw_body).hexdigest()
    prefix = _id_prefix(sample_id, attempt_no)
    primary_id = _uuid_urn(prefix, "response_raw", raw_hex)
    link = f"WARC-Concurrent-To: {primary_id}\r\n"
    if exchange is not None:
        url = redact_url(exchange.url)
        body = exchange.request_body
        body_hex = _sha256(body).hexdigest()
        records = [
            _write(
                kind="response_raw", record_type="response", uri=url, record_id=primary_id,
                date=date, mime_type=raw_mime_type, payload=raw_body,
                http=_response_head(exchange, raw_body), payload_hex=raw_hex,
            ),
            _write(
                kind="request", record_type="request", uri=url,
                record_id=_uuid_urn(prefix, "request", body_hex), date=date,
                mime_type=_header(exchange.request_headers, "content-type") or "",
                payload=body, http=_request_head(exchange, url), links=link,
                payload_hex=body_hex,
            ),
        ]  # fmt: skip
    else:
        records = [
            _plain("response_raw", "resource", f"urn:geo:upstream:{upstream_id or sample_id}",
                   primary_id, date, raw_mime_type or "application/octet-stream", raw_body,
                   raw_hex, ""),
        ]  # fmt: skip
    if parts:
        _part_records(records, sample_id, prefix, date, parts, link, "")
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
    records: list[WarcRecord] = []
    _part_records(
        records, sample_id, _id_prefix(sample_id, attempt_no), _warc_date(captured_at), parts,
        f"WARC-Concurrent-To: {concurrent_to}\r\n" if concurrent_to else "",
        f"WARC-Refers-To: {refers_to}\r\n" if refers_to else "",
    )  # fmt: skip
    return records


def _part_records(
    records: list[WarcRecord],
    sample_id: str,
    prefix: bytes,
    date: str,
    parts: Sequence[Part],
    link: str,
    refers: str,
) -> None:
    """Append the parts' records to ``records``. ``link``: the WARC-Concurrent-To line ("":
    the first part's id, for the rest); ``refers``: the WARC-Refers-To line of the parts that
    may have one."""
    for kind, record_type, mime_type, data, uri, payload_hex in parts:
        if record_type not in _PART_TYPES:
            raise ValueError(f"part {kind}: record type {record_type!r} is not "
                             "resource, metadata or conversion")  # fmt: skip
        if payload_hex is None:
            payload_hex = _sha256(data).hexdigest()
        rid = _uuid_urn(prefix, kind, payload_hex)
        uri = redact_url(uri) if uri else f"urn:geo:{kind}:{sample_id}:sha256-{payload_hex}"
        links = link + refers if refers and record_type != "resource" else link
        records.append(
            _plain(kind, record_type, uri, rid, date, mime_type, data, payload_hex, links)
        )
        if not link:
            link = f"WARC-Concurrent-To: {rid}\r\n"


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


class Placement(NamedTuple):
    """Where a written record landed: its batch object and the offset in it. A named tuple:
    the batch store places ~4 records an answer on the worker's event loop, and a tuple is a
    third of a frozen dataclass's cost to make."""

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
