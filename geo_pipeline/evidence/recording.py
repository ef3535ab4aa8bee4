"""Archiving and recording a sample's evidence (R6, R17–R22).

Two steps, called by the execution core in this order:

1. ``archive_evidence`` — *before* the worker's database transaction: uploads every object and
   returns an ``ArchivedEvidence``. No database access. Uploads are content-addressed and
   idempotent, so a crash after the upload and before the commit only leaves objects that the
   retry re-uses.
2. ``record_evidence`` — *inside* the caller's open transaction (it never commits): inserts
   ``geo.answers``, ``geo.citations`` and ``geo.evidence_objects`` and returns the
   ``EvidenceOutcome`` that the caller's fenced completion writes to ``geo.samples``
   (``evidence_state`` / ``evidence_reason``). It never updates ``geo.samples`` itself.

Object keys are ``{tenant}/{run}/{sample}/{revision}/{kind}`` (R20). The archive step runs before
the database hands out revision numbers, so the key's revision segment is the *content revision*
``sha256-<digest>`` of the object; ``geo.evidence_objects`` maps each kind's integer revision
(1, 2, …) to its key. Different bytes therefore never share a key (nothing is overwritten) and the
same bytes always do (a re-write is a no-op).

Revisions and idempotency:
* An answer revision is identified by ``content_sha256`` = digest of (answer text, citations,
  provider-truncation flag). Recording the same content again adds no row; changed content for a
  sample that already has an answer becomes the next revision — a repair never overwrites (R21).
* Objects are one row per (sample, kind, sha256); a new digest takes that kind's next revision.

Evidence state (R6, R21) — decided here, written by the caller:
* ``failed`` + reason ``ARCHIVE_FAILED: …`` when the text objects could not be archived; nothing
  is recorded (the caller may retry; a later success moves failed → stored/partial).
* screenshot policy ``required``: ``stored`` only when a screenshot is archived; otherwise
  ``partial`` with warning and reason ``SCREENSHOT_PENDING`` (the platform will deliver it later)
  or ``SCREENSHOT_UNAVAILABLE`` (missing, failed to download/upload, or undecodable).
* policy ``optional``: a missing screenshot is not required, so the state is ``stored``, but the
  same warning is recorded on the answer and returned, so reports can still show why there is no
  picture. Policy ``off``: ``stored``; a screenshot that arrives anyway is archived all the same.
* When recording does *not* create a new answer revision, a screenshot archived earlier for the
  sample still counts; a new answer revision needs its own screenshot (the old one shows old text).
* The state never moves backwards (the R6 transitions allow pending → any, failed → partial/stored,
  partial → stored): a later attempt that does worse still adds its revision and warnings, but
  the outcome keeps the sample's better current state and reason.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime
from json.encoder import encode_basestring as _encode_json_str
from operator import attrgetter
from typing import Any, Literal
from urllib.parse import urlsplit

from geo_pipeline.connectors.base import Attachment, Citation, Evidence
from geo_pipeline.domain.config_model import SCREENSHOT_POLICIES
from geo_pipeline.domain.urls import normalised_parts
from geo_pipeline.domain.validity import RULE_VERSION as VALIDITY_RULE_VERSION
from geo_pipeline.domain.validity import Validity, classify
from geo_pipeline.evidence.archive import (
    Archive,
    ArchiveError,
    ArchiveUnavailable,
    aput,
    object_key,
    sha256_hex,
)
from geo_pipeline.evidence.bundle import BUNDLE_KIND, BUNDLE_MIME, Part, PartInfo, pack
from geo_pipeline.evidence.display import DERIVED
from geo_pipeline.evidence.rows import samples_for_record, write_rows
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline.evidence.thumbnails import (
    THUMBNAIL_MIME,
    ImageUnreadable,
    screenshot_derivatives,
)
from geo_pipeline.evidence.warc import Part as WarcPart
from geo_pipeline.evidence.warc import Placement, WarcRecord, answer_records, redact_url
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

log = logging.getLogger(__name__)

EvidenceState = Literal["stored", "partial", "failed"]
ScreenshotStatus = Literal["archived", "pending", "unavailable", "not_provided"]

SCREENSHOT_UNAVAILABLE = "SCREENSHOT_UNAVAILABLE"
SCREENSHOT_PENDING = "SCREENSHOT_PENDING"
THUMBNAIL_UNAVAILABLE = "THUMBNAIL_UNAVAILABLE"
ARCHIVE_FAILED = "ARCHIVE_FAILED"
NO_ANSWER = "NO_ANSWER_RECORDED"
UNPARSEABLE = "UNPARSEABLE"
UNPARSEABLE_VALIDITY = "unparseable"
_SCREENSHOT_WARNINGS = (SCREENSHOT_UNAVAILABLE, SCREENSHOT_PENDING)

TEXT_MIME = "text/markdown; charset=utf-8"
HTML_MIME = "text/html; charset=utf-8"
JSON_MIME = "application/json"


@dataclass(frozen=True)
class SampleRef:
    """Which sample the evidence belongs to; tenant and run make the key prefix (R20)."""

    sample_id: str
    run_id: str
    tenant_id: str


@dataclass(frozen=True)
class ArchivedObject:
    kind: str
    key: str
    sha256: str
    size_bytes: int
    mime_type: str


@dataclass(frozen=True)
class NormalisedCitation:
    ordinal: int
    relation: str
    raw_url: str
    normalized_url: str
    registrable_domain: str | None
    citation_key: str | None = None
    title: str | None = None
    span_start: int | None = None
    span_end: int | None = None
    cited_text: str | None = None


@dataclass(frozen=True)
class ArchivedEvidence:
    """What ``archive_evidence`` put in the archive, ready for ``record_evidence``."""

    ref: SampleRef
    attempt_no: int
    upstream_id: str
    captured_at: datetime
    screenshot_policy: str
    answer_text: str
    sanitized_html: str
    provider_truncated: bool
    validity: Validity
    citations: tuple[NormalisedCitation, ...]
    objects: tuple[ArchivedObject, ...]
    content_sha256: str
    screenshot_status: ScreenshotStatus
    warnings: tuple[str, ...] = ()
    failure: str | None = None  # the text could not be archived
    screenshot_detail: str | None = None  # why there is no screenshot (platform or our side)
    # The response could not be parsed: only its raw bytes are archived (no answer row) and
    # this is the evidence reason, 'UNPARSEABLE: …' (R13).
    unparseable: str | None = None
    # WARC evidence (issue 33): records prepared but not stored yet (the completion batch
    # stores them in one object, evidence.warc_store), then where each one landed.
    warc_pending: tuple[WarcRecord, ...] = ()
    warc_placed: tuple[Placement, ...] = ()
    # The search queries the engine said it ran for this answer (the fan-out) and whether it
    # searched at all, as the connector read them (issue 31): kept on the answer row
    # (geo.answers.search_queries / web_search_used, migration 0054) for analytics.fan_out.
    search_queries: tuple[str, ...] = ()
    web_search_used: bool | None = None
    # The sha256 (hex) of answer_text's UTF-8 bytes when it was computed already (for the
    # content digest and the answer's WARC record): geo.answers.raw_sha256 without a third hash.
    text_sha256: str | None = None


@dataclass(frozen=True)
class ArchivedScreenshot:
    """A screenshot that arrived after the text (the screenshot stream, R10, R21)."""

    ref: SampleRef
    attempt_no: int
    status: ScreenshotStatus
    objects: tuple[ArchivedObject, ...]
    captured_at: datetime
    warnings: tuple[str, ...] = ()
    detail: str | None = None
    # As WARC (issue 33): records still to store with the lane's batch, then where they landed
    # (evidence.warc_late).
    warc_pending: tuple[WarcRecord, ...] = ()
    warc_placed: tuple[Placement, ...] = ()


@dataclass(frozen=True)
class EvidenceOutcome:
    """The evidence layer's verdict for the caller's fenced completion (R6)."""

    state: EvidenceState
    reason: str | None
    warnings: tuple[str, ...]
    answer_revision: int
    validity: str  # 'valid' | 'invalid'
    new_answer_revision: bool = False
    new_objects: tuple[str, ...] = field(default=())  # kinds that got a new row


_HEX = re.compile(r"[0-9a-f]*")
_CITATION_FIELDS = len(fields(NormalisedCitation))


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def normalise_citations(citations: Iterable[Citation]) -> tuple[NormalisedCitation, ...]:
    """Connector citations with raw and normalised URL and registrable domain (R18)."""
    out = []
    parts = normalised_parts  # normalise_url's two values, no NormalisedUrl made (issue 33)
    for ordinal, c in enumerate(citations):
        raw = c.url
        normalized, domain = parts(raw, c.target_url)  # a redirect keeps its raw URL
        # NormalisedCitation(...) with its fields given in one step: a frozen dataclass's
        # __init__ sets each of its ten fields through object.__setattr__, a third of this
        # loop's time (issue 33); the object is the same (test_recording_fast_paths).
        made = _new(NormalisedCitation)
        _set_fields(
            made,
            "__dict__",
            {
                "ordinal": ordinal,
                "relation": c.relation,
                "raw_url": raw,
                "normalized_url": normalized,
                "registrable_domain": domain,
                "citation_key": c.id,
                "title": c.title,
                "span_start": c.span_start,
                "span_end": c.span_end,
                "cited_text": c.cited_text,
            },
        )
        out.append(made)
    return tuple(out)


_set_fields = object.__setattr__
_new = object.__new__


def citations_json(citations: tuple[NormalisedCitation, ...]) -> bytes:
    """Canonical JSON (sorted keys, no whitespace) so equal citations give equal bytes."""
    try:
        return _citations_json_fast(citations)
    except _NotPlain:
        pass
    rows = [c.__dict__ for c in citations]
    return json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


class _NotPlain(Exception):
    """A citation field that is not a plain ``str``, ``int`` or None: the generic encoder's."""


def _jstr(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is str:
        return _encode_json_str(value)
    raise _NotPlain


def _jint(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is int:
        return int.__repr__(value)
    raise _NotPlain


def _citations_json_fast(citations: tuple[NormalisedCitation, ...]) -> bytes:
    """``citations_json`` without json.dumps' generic encoder (issue 33): the fields in sorted
    order, each string through json's own (C) string encoder, the same separators -- the same
    bytes for plain field values; anything else raises ``_NotPlain``."""
    out = []
    enc = _encode_json_str
    for c in citations:
        d = c.__dict__
        if len(d) != _CITATION_FIELDS:
            raise _NotPlain
        raw, norm, relation = d["raw_url"], d["normalized_url"], d["relation"]
        if type(raw) is not str or type(norm) is not str or type(relation) is not str:
            raise _NotPlain  # always strings in a NormalisedCitation; else the generic way
        # _jstr / _jint inline for the common values (a string, None, an int): a call each
        # of six fields was a fifth of this loop (issue 33); anything else goes to them.
        key, cited, domain, title = (
            d["citation_key"],
            d["cited_text"],
            d["registrable_domain"],
            d["title"],
        )
        ordinal, end, start = d["ordinal"], d["span_end"], d["span_start"]
        out.append(
            f'{{"citation_key":{enc(key) if type(key) is str else _jstr(key)},'
            f'"cited_text":{"null" if cited is None else _jstr(cited)},'
            f'"normalized_url":{enc(norm)},'
            f'"ordinal":{int.__repr__(ordinal) if type(ordinal) is int else _jint(ordinal)},'
            f'"raw_url":{enc(raw)},'
            f'"registrable_domain":{enc(domain) if type(domain) is str else _jstr(domain)},'
            f'"relation":{enc(relation)},'
            f'"span_end":{"null" if end is None else _jint(end)},'
            f'"span_start":{"null" if start is None else _jint(start)},'
            f'"title":{enc(title) if type(title) is str else _jstr(title)}}}'
        )
    return ("[" + ",".join(out) + "]").encode()


def _citations_with_json(
    citations: Iterable[Citation],
) -> tuple[tuple[NormalisedCitation, ...], bytes]:
    """``normalise_citations`` and ``citations_json`` of its result in one pass (issue 33): each
    citation's JSON written from the values in hand (no second loop reading them back out of
    every citation's ``__dict__``); the same objects and the same bytes (test_recording_fast_paths),
    a value that is not a plain ``str``, ``int`` or None sends the JSON the generic way."""
    out: list[NormalisedCitation] = []
    rows: list[str] = []
    plain = True
    parts = normalised_parts
    enc = _encode_json_str
    for ordinal, c in enumerate(citations):
        raw, relation, key, title = c.url, c.relation, c.id, c.title
        start, end, cited = c.span_start, c.span_end, c.cited_text
        normalized, domain = parts(raw, c.target_url)  # a redirect keeps its raw URL
        made = _new(NormalisedCitation)  # as normalise_citations
        _set_fields(
            made,
            "__dict__",
            {
                "ordinal": ordinal,
                "relation": relation,
                "raw_url": raw,
                "normalized_url": normalized,
                "registrable_domain": domain,
                "citation_key": key,
                "title": title,
                "span_start": start,
                "span_end": end,
                "cited_text": cited,
            },
        )
        out.append(made)
        if not plain:
            continue
        if type(raw) is not str or type(relation) is not str or type(normalized) is not str:
            plain = False  # always strings in practice; else the generic way
            continue
        try:  # _citations_json_fast's row (its keys in sorted order), from the locals
            rows.append(
                f'{{"citation_key":{enc(key) if type(key) is str else _jstr(key)},'
                f'"cited_text":{"null" if cited is None else _jstr(cited)},'
                f'"normalized_url":{enc(normalized)},"ordinal":{ordinal},'
                f'"raw_url":{enc(raw)},'
                f'"registrable_domain":{enc(domain) if type(domain) is str else _jstr(domain)},'
                f'"relation":{enc(relation)},'
                f'"span_end":{"null" if end is None else _jint(end)},'
                f'"span_start":{"null" if start is None else _jint(start)},'
                f'"title":{enc(title) if type(title) is str else _jstr(title)}}}'
            )
        except _NotPlain:
            plain = False
    made_all = tuple(out)
    if plain:
        return made_all, ("[" + ",".join(rows) + "]").encode()
    return made_all, citations_json(made_all)


def content_digest(text: str | bytes, citations_bytes: bytes, provider_truncated: bool) -> str:
    """The answer revision's identity: digest of (text, citations, provider-truncation flag);
    ``text`` as str or its UTF-8 bytes."""
    return _content_digest_hex(
        sha256_hex(text.encode("utf-8") if isinstance(text, str) else text),
        sha256_hex(citations_bytes),
        provider_truncated,
    )


def _content_digest_hex(text_hex: str, citations_hex: str, provider_truncated: bool) -> str:
    """``content_digest`` from the two parts' digests (the WARC path has them already)."""
    if (
        _HEX.fullmatch(text_hex)
        and _HEX.fullmatch(citations_hex)
        and type(provider_truncated) is bool
    ):
        # What json.dumps(sort_keys=True) writes for these values, without its encoder.
        flag = "true" if provider_truncated else "false"
        return sha256_hex(
            f'{{"citations": "{citations_hex}", "provider_truncated": {flag}, '
            f'"text": "{text_hex}"}}'.encode()
        )
    parts = {"text": text_hex, "citations": citations_hex, "provider_truncated": provider_truncated}
    return sha256_hex(json.dumps(parts, sort_keys=True).encode())


def capture_parts(evidence: Evidence) -> list[Part]:
    """A browser capture's extra parts (issue #32): the page HTML exactly as captured, and how
    it was captured (device, region, account) with the search queries the engine ran, as
    canonical JSON, the page's address with its credentials redacted (D2). None for an answer
    that has neither."""
    parts = []
    if evidence.page_html is not None:
        parts.append(Part("page_html", HTML_MIME, evidence.page_html))
    if evidence.capture or evidence.search_queries:
        meta = {**evidence.capture, "search_queries": list(evidence.search_queries)}
        if meta.get("page_url"):
            meta["page_url"] = redact_url(str(meta["page_url"]))
        data = json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        parts.append(Part("capture", JSON_MIME, data.encode()))
    return parts


def part_address(kind: str, evidence: Evidence) -> str | None:
    """Where a capture part was captured: the captured page at the http(s) address the browser
    loaded (``capture['page_url']``), so its WARC record is that address as in any web archive
    and a player (ReplayWeb.page, pywb) resolves the page's links against it; None otherwise
    (a ``urn:geo:`` URI). Credentials in the address are redacted when the record is written."""
    url = str(evidence.capture.get("page_url") or "") if kind == "page_html" else ""
    return url if urlsplit(url).scheme in ("http", "https") and urlsplit(url).netloc else None


def warc_capture_parts(evidence: Evidence) -> list[WarcPart]:
    """``capture_parts`` as WARC parts: the page as rendered (a resource at its address) and
    how it was captured (metadata)."""
    return [
        WarcPart(p.kind, "metadata" if p.kind == "capture" else "resource", p.mime_type, p.data,
                 uri=part_address(p.kind, evidence))
        for p in capture_parts(evidence)
    ]  # fmt: skip


def _put(archive: Archive, ref: SampleRef, kind: str, data: bytes, mime: str) -> ArchivedObject:
    digest = sha256_hex(data)
    key = object_key(ref.tenant_id, ref.run_id, ref.sample_id, f"sha256-{digest}", kind)
    result = archive.put(key, data, mime_type=mime)
    return ArchivedObject(kind, key, result.sha256, result.size_bytes, mime)


async def _aput(
    archive: Archive, ref: SampleRef, kind: str, data: bytes, mime: str
) -> ArchivedObject:
    digest = sha256_hex(data)
    key = object_key(ref.tenant_id, ref.run_id, ref.sample_id, f"sha256-{digest}", kind)
    result = await aput(archive, key, data, mime_type=mime)
    return ArchivedObject(kind, key, result.sha256, result.size_bytes, mime)


@dataclass(frozen=True)
class _Bundle:
    """One answer's parts packed into one object, with the rows its parts will get."""

    key: str
    data: bytes
    parts: tuple[PartInfo, ...]

    def objects(self) -> tuple[ArchivedObject, ...]:
        return tuple(
            ArchivedObject(p.kind, self.key, p.sha256, p.size, p.mime_type) for p in self.parts
        )


def _bundle(ref: SampleRef, parts: list[Part]) -> _Bundle:
    data, infos = pack(parts)
    key = object_key(
        ref.tenant_id, ref.run_id, ref.sample_id, f"sha256-{sha256_hex(data)}", BUNDLE_KIND
    )
    return _Bundle(key, data, infos)


def _screenshot_plan(
    attachment: Attachment | None,
) -> tuple[ScreenshotStatus, list[str], str | None, tuple[bytes, str, bytes] | None]:
    """What to do with a screenshot before any upload: (status, warnings, detail, and the
    original bytes, their MIME type and the thumbnail when there is something to archive)."""
    if attachment is None:
        return "not_provided", [], None, None
    if attachment.status == "pending":
        return "pending", [SCREENSHOT_PENDING], attachment.reason, None
    if attachment.status != "available" or not attachment.data:
        return "unavailable", [SCREENSHOT_UNAVAILABLE], attachment.reason or "no image data", None
    try:
        info, thumb = screenshot_derivatives(attachment.data)
    except ImageUnreadable as exc:
        return "unavailable", [SCREENSHOT_UNAVAILABLE], str(exc), None
    return "archived", [], None, (attachment.data, info.mime_type, thumb)


def _archive_attachment(
    archive: Archive, ref: SampleRef, attachment: Attachment | None
) -> tuple[ScreenshotStatus, list[ArchivedObject], list[str], str | None]:
    """Screenshot at original resolution plus a separately made thumbnail, each an object of
    its own (R21: a picture is large and may come later; it never rides in the text bundle).
    Never raises: an attachment failure must not cost the text (R21)."""
    status, warnings, detail, todo = _screenshot_plan(attachment)
    if todo is None:
        return status, [], warnings, detail
    original, mime, thumb = todo
    try:
        shot = _put(archive, ref, "screenshot", original, mime)
    except ArchiveError as exc:
        log.warning("screenshot of %s not archived: %s", ref.sample_id, exc)
        return "unavailable", [], [SCREENSHOT_UNAVAILABLE], f"archive: {exc}"
    try:
        return "archived", [shot, _put(archive, ref, "thumbnail", thumb, THUMBNAIL_MIME)], [], None
    except ArchiveError as exc:
        # The original is archived; a missing thumbnail is cosmetic and can be re-made from it.
        log.warning("thumbnail of %s not archived: %s", ref.sample_id, exc)
        return "archived", [shot], [THUMBNAIL_UNAVAILABLE], None


async def _aarchive_attachment(
    archive: Archive, ref: SampleRef, attachment: Attachment | None
) -> tuple[ScreenshotStatus, list[ArchivedObject], list[str], str | None]:
    status, warnings, detail, todo = _screenshot_plan(attachment)
    if todo is None:
        return status, [], warnings, detail
    original, mime, thumb = todo
    try:
        shot = await _aput(archive, ref, "screenshot", original, mime)
    except ArchiveError as exc:
        log.warning("screenshot of %s not archived: %s", ref.sample_id, exc)
        return "unavailable", [], [SCREENSHOT_UNAVAILABLE], f"archive: {exc}"
    try:
        thumb_obj = await _aput(archive, ref, "thumbnail", thumb, THUMBNAIL_MIME)
        return "archived", [shot, thumb_obj], [], None
    except ArchiveError as exc:
        log.warning("thumbnail of %s not archived: %s", ref.sample_id, exc)
        return "archived", [shot], [THUMBNAIL_UNAVAILABLE], None


@dataclass(frozen=True)
class PreparedEvidence:
    """Everything ``archive_evidence`` works out before it uploads (pure CPU, no I/O)."""

    common: dict[str, Any]
    bundle: _Bundle
    warnings: tuple[str, ...]


def prepare_evidence(
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
    *,
    render_display: bool = False,
) -> PreparedEvidence:
    """Normalise citations (R18), judge validity (R22) and pack the answer's bundle: the raw
    response exactly as received, the answer text and the normalised citations -- one object
    (evidence.bundle). The sanitised display (R19) is derived off this hot path
    (evidence.display: the answer row gets ``DERIVED``); ``render_display`` renders it here
    instead and adds it to the bundle as an ``answer_html`` part, as before issue #14."""
    common, text_bytes, cjson, _ = _common(
        ref, attempt_no, evidence, screenshot_policy, render_display=render_display
    )
    parts = [
        Part("response_raw", evidence.raw_mime_type, evidence.raw_body),
        Part("answer_raw", TEXT_MIME, text_bytes),
        Part("citations", JSON_MIME, cjson),
    ]
    if render_display:
        parts.insert(2, Part("answer_html", HTML_MIME, common["sanitized_html"].encode("utf-8")))
    parts.extend(capture_parts(evidence))
    return PreparedEvidence(common, _bundle(ref, parts), _dedupe(evidence.warnings))


def _common(
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
    *,
    render_display: bool = False,
) -> tuple[dict[str, Any], bytes, bytes, str]:
    """What every evidence format records of an answer: the ``ArchivedEvidence`` fields, the
    answer text's bytes, the canonical citations JSON and its sha256 (hex; the text's is
    ``text_sha256``): each part is hashed once, for the content digest and its record alike."""
    if screenshot_policy not in SCREENSHOT_POLICIES:
        raise ValueError(
            f"screenshot policy {screenshot_policy!r} is not one of {SCREENSHOT_POLICIES}"
        )
    citations, cjson = _citations_with_json(evidence.citations)
    text_bytes = evidence.answer_text.encode("utf-8")
    html = render_answer(evidence.answer_text) if render_display else DERIVED
    validity = classify(evidence.answer_text, evidence.provider_truncated)
    text_hex, cjson_hex = sha256_hex(text_bytes), sha256_hex(cjson)
    common: dict[str, Any] = dict(
        ref=ref,
        attempt_no=attempt_no,
        upstream_id=evidence.upstream_id,
        captured_at=evidence.captured_at,
        screenshot_policy=screenshot_policy,
        answer_text=evidence.answer_text,
        sanitized_html=html,
        provider_truncated=evidence.provider_truncated,
        validity=validity,
        citations=citations,
        content_sha256=_content_digest_hex(text_hex, cjson_hex, evidence.provider_truncated),
        search_queries=tuple(evidence.search_queries),
        web_search_used=bool(evidence.web_search_used or evidence.search_queries),
        text_sha256=text_hex,
    )
    return common, text_bytes, cjson, cjson_hex


RECORD_TOO_LARGE = "RECORD_TOO_LARGE"


def _too_large(kind: str, size: int, cap: int) -> str:
    return (f"{RECORD_TOO_LARGE}: {kind} is {size} bytes, the cap is {cap} "
            "(GEO_EVIDENCE_RECORD_MAX_BYTES)")  # fmt: skip


def refused_reason(outcome: EvidenceOutcome, screenshot_detail: str | None) -> EvidenceOutcome:
    """A screenshot refused for its size is said in the evidence reason, whatever the state
    (``SCREENSHOT_UNAVAILABLE: RECORD_TOO_LARGE: …``): a person sees the record, its size and
    the cap in the review queue (``evidence_too_large``) rather than a bare code."""
    if screenshot_detail and screenshot_detail.startswith(RECORD_TOO_LARGE):
        return replace(outcome, reason=f"{SCREENSHOT_UNAVAILABLE}: {screenshot_detail}"[:500])
    return outcome


def prepare_warc_evidence(
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
    *,
    max_record_bytes: int | None = None,
) -> ArchivedEvidence:
    """The answer's evidence as WARC records, ready for the completion batch to store in one
    object with its neighbours (evidence.warc_store) -- no I/O here. The exchange (or the raw
    body), the answer text (resource), the normalised citations (metadata) and a screenshot
    with its thumbnail (resources), all in the batch's one PUT; a screenshot still to come
    arrives later through the screenshot lane as before.

    A record larger than ``max_record_bytes`` is refused with its size and the cap: an
    oversized screenshot is left out (the screenshot is unavailable, the reason says why); an
    oversized response or text fails the evidence (``ARCHIVE_FAILED: RECORD_TOO_LARGE: …``), so
    the sample is not recorded as stored and an operator sees why."""
    common, text_bytes, cjson, cjson_hex = _common(ref, attempt_no, evidence, screenshot_policy)
    status, shot_warnings, detail, todo = _screenshot_plan(evidence.screenshot)
    cap = max_record_bytes
    if cap is not None and max(len(evidence.raw_body), len(text_bytes), len(cjson)) > cap:
        for kind, data in (("response_raw", evidence.raw_body), ("answer_raw", text_bytes),
                           ("citations", cjson)):  # fmt: skip
            if len(data) > cap:
                return ArchivedEvidence(
                    **common, objects=(), screenshot_status="not_provided",
                    warnings=_dedupe(evidence.warnings),
                    failure=f"{ARCHIVE_FAILED}: {_too_large(kind, len(data), cap)}",
                )  # fmt: skip
    if cap is not None and todo is not None and max(len(todo[0]), len(todo[2])) > cap:
        kind, size = ("screenshot", len(todo[0])) if len(todo[0]) > cap else (
            "thumbnail", len(todo[2]))  # fmt: skip
        status, shot_warnings, todo = "unavailable", [SCREENSHOT_UNAVAILABLE], None
        detail = _too_large(kind, size, cap)
    parts = [
        WarcPart("answer_raw", "resource", TEXT_MIME, text_bytes, sha256=common["text_sha256"]),
        WarcPart("citations", "metadata", JSON_MIME, cjson, sha256=cjson_hex),
    ]
    # A browser capture's page as rendered (resource) and how it was captured (metadata).
    parts += warc_capture_parts(evidence)
    if todo is not None:
        original, mime, thumb = todo
        parts += [
            WarcPart("screenshot", "resource", mime, original),
            WarcPart("thumbnail", "resource", THUMBNAIL_MIME, thumb),
        ]
    records = answer_records(
        sample_id=ref.sample_id, attempt_no=attempt_no, upstream_id=evidence.upstream_id,
        captured_at=evidence.captured_at, raw_body=evidence.raw_body,
        raw_mime_type=evidence.raw_mime_type, exchange=evidence.exchange, parts=parts,
    )  # fmt: skip
    warnings = list(evidence.warnings) + shot_warnings
    if status == "not_provided" and screenshot_policy != "off":
        warnings.append(SCREENSHOT_UNAVAILABLE)
    # ArchivedEvidence(**common, ...) without the frozen dataclass's __init__ (an
    # object.__setattr__ for each of its ~25 fields, ~1.5 us an answer on the event loop);
    # test_warc_stored_fields checks it equals the dataclass's own.
    archived = object.__new__(ArchivedEvidence)
    fields_ = archived.__dict__
    fields_.update(_EVIDENCE_DEFAULTS)
    fields_.update(common)
    fields_.update(
        objects=(), screenshot_status=status, warnings=_dedupe(warnings),
        screenshot_detail=detail, warc_pending=tuple(records),
    )  # fmt: skip
    return archived


# The defaults of ArchivedEvidence's fields (all plain values, no factories).
_EVIDENCE_DEFAULTS = {
    f.name: f.default for f in fields(ArchivedEvidence) if f.default is not MISSING
}


def prepare_warc_unparseable(
    ref: SampleRef,
    attempt_no: int,
    upstream_id: str,
    raw: bytes,
    mime_type: str,
    reason: str,
    exchange: Any = None,
) -> ArchivedEvidence:
    """``aarchive_unparseable`` as WARC: the response record alone, stored with the batch."""
    common = _unparseable_common(ref, attempt_no, upstream_id, reason)
    records = answer_records(
        sample_id=ref.sample_id, attempt_no=attempt_no, upstream_id=upstream_id,
        captured_at=common["captured_at"], raw_body=raw,
        raw_mime_type=mime_type or "application/octet-stream", exchange=exchange,
    )  # fmt: skip
    return ArchivedEvidence(**common, objects=(), warc_pending=tuple(records))


def _archived(
    prepared: PreparedEvidence,
    evidence: Evidence,
    shot: tuple[ScreenshotStatus, list[ArchivedObject], list[str], str | None],
) -> ArchivedEvidence:
    status, shot_objects, shot_warnings, detail = shot
    warnings = list(evidence.warnings) + shot_warnings
    if status == "not_provided" and prepared.common["screenshot_policy"] != "off":
        warnings.append(SCREENSHOT_UNAVAILABLE)
    return ArchivedEvidence(
        **prepared.common,
        objects=prepared.bundle.objects() + tuple(shot_objects),
        screenshot_status=status,
        warnings=_dedupe(warnings),
        screenshot_detail=detail,
    )


def _text_failed(prepared: PreparedEvidence, ref: SampleRef, exc: Exception) -> ArchivedEvidence:
    log.warning("evidence text of %s not archived: %s", ref.sample_id, exc)
    return ArchivedEvidence(
        **prepared.common,
        objects=(),
        screenshot_status="not_provided",
        warnings=prepared.warnings,
        failure=f"{ARCHIVE_FAILED}: {exc}",
    )


def archive_evidence(
    archive: Archive,
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
    *,
    render_display: bool = False,
) -> ArchivedEvidence:
    """Upload one attempt's evidence: the text bundle (one object, ``prepare_evidence``) and the
    screenshot with its thumbnail (R21). No database access. Storage failures do not raise: a
    text failure is returned as ``failure`` (→ evidence ``failed``), a screenshot failure as a
    warning (→ ``partial``)."""
    prepared = prepare_evidence(
        ref, attempt_no, evidence, screenshot_policy, render_display=render_display
    )
    try:
        archive.put(prepared.bundle.key, prepared.bundle.data, mime_type=BUNDLE_MIME)
    except ArchiveError as exc:
        return _text_failed(prepared, ref, exc)
    return _archived(prepared, evidence, _archive_attachment(archive, ref, evidence.screenshot))


async def aarchive_evidence(
    archive: Archive,
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
    *,
    raise_unavailable: bool = False,
    render_display: bool = False,
) -> ArchivedEvidence:
    """``archive_evidence`` for the worker's event loop: the upload is awaited (the backend's
    own async client, bounded in flight). With ``raise_unavailable`` an unreachable store
    raises ``ArchiveUnavailable`` instead of returning a failure, so the caller can wait and
    try again while it still holds the answer."""
    prepared = prepare_evidence(
        ref, attempt_no, evidence, screenshot_policy, render_display=render_display
    )
    try:
        await aput(archive, prepared.bundle.key, prepared.bundle.data, mime_type=BUNDLE_MIME)
    except ArchiveError as exc:
        if raise_unavailable and isinstance(exc, ArchiveUnavailable):
            raise
        return _text_failed(prepared, ref, exc)
    shot = await _aarchive_attachment(archive, ref, evidence.screenshot)
    return _archived(prepared, evidence, shot)


def _unparseable_common(
    ref: SampleRef, attempt_no: int, upstream_id: str, reason: str
) -> dict[str, Any]:
    return dict(
        ref=ref,
        attempt_no=attempt_no,
        upstream_id=upstream_id,
        captured_at=_now(),
        screenshot_policy="off",
        answer_text="",
        sanitized_html="",
        provider_truncated=False,
        validity=Validity(False, None, VALIDITY_RULE_VERSION, UNPARSEABLE_VALIDITY),
        citations=(),
        content_sha256="",
        screenshot_status="not_provided",
        unparseable=f"{UNPARSEABLE}: {reason}"[:500],
    )


async def aarchive_unparseable(
    archive: Archive,
    ref: SampleRef,
    attempt_no: int,
    upstream_id: str,
    raw: bytes,
    mime_type: str,
    reason: str,
) -> ArchivedEvidence:
    """Keep a response that could not be parsed exactly as received (R13): a bundle with its
    one ``response_raw`` part. Recording it adds the object rows and no answer; the sample
    goes to review with evidence ``partial`` / ``UNPARSEABLE: …`` until ``geo-pipeline
    evidence reparse`` turns the bytes into an answer revision. Raises ``ArchiveUnavailable``
    when the store cannot be reached (the caller waits and retries)."""
    bundle = _bundle(ref, [Part("response_raw", mime_type or "application/octet-stream", raw)])
    await aput(archive, bundle.key, bundle.data, mime_type=BUNDLE_MIME)
    return ArchivedEvidence(
        **_unparseable_common(ref, attempt_no, upstream_id, reason), objects=bundle.objects()
    )


def archive_unparseable(
    archive: Archive,
    ref: SampleRef,
    attempt_no: int,
    upstream_id: str,
    raw: bytes,
    mime_type: str,
    reason: str,
) -> ArchivedEvidence:
    """Blocking form of ``aarchive_unparseable``."""
    bundle = _bundle(ref, [Part("response_raw", mime_type or "application/octet-stream", raw)])
    archive.put(bundle.key, bundle.data, mime_type=BUNDLE_MIME)
    return ArchivedEvidence(
        **_unparseable_common(ref, attempt_no, upstream_id, reason), objects=bundle.objects()
    )


def archive_screenshot(
    archive: Archive, ref: SampleRef, attempt_no: int, attachment: Attachment
) -> ArchivedScreenshot:
    """Upload a screenshot that arrived after the text. No database access; never raises for a
    storage or image failure (the result says ``unavailable``)."""
    status, objects, warnings, detail = _archive_attachment(archive, ref, attachment)
    return ArchivedScreenshot(
        ref=ref,
        attempt_no=attempt_no,
        status=status,
        objects=tuple(objects),
        captured_at=_now(),
        warnings=_dedupe(warnings),
        detail=detail,
    )


def _now() -> datetime:
    from datetime import UTC

    return datetime.now(UTC)


# --------------------------------------------------------------------------- database side
def _sample(conn: Conn, ref: SampleRef) -> dict[str, Any]:
    conn.execute(Q("evidence.lock_sample"), {"sample_id": ref.sample_id})
    row = conn.execute(Q("evidence.sample"), {"sample_id": ref.sample_id}).fetchone()
    if row is None:
        raise ValueError(f"sample {ref.sample_id} does not exist")
    if (row["tenant_id"], row["run_id"]) != (ref.tenant_id, ref.run_id):
        # The keys were built from ref; a mismatch would file evidence under another tenant.
        raise ValueError(
            f"sample {ref.sample_id} belongs to tenant {row['tenant_id']} run {row['run_id']}, "
            f"not {ref.tenant_id}/{ref.run_id}"
        )
    return row


def _insert_objects(
    conn: Conn, ref: SampleRef, objects: Iterable[ArchivedObject], attempt_no: int,
    captured_at: datetime,
) -> list[str]:  # fmt: skip
    created = []
    for obj in objects:
        row = conn.execute(
            Q("evidence.insert_object"),
            {
                "sample_id": ref.sample_id,
                "tenant_id": ref.tenant_id,
                "run_id": ref.run_id,
                "kind": obj.kind,
                "storage_key": obj.key,
                "sha256": obj.sha256,
                "size_bytes": obj.size_bytes,
                "mime_type": obj.mime_type,
                "attempt_no": attempt_no,
                "captured_at": captured_at,
            },
        ).fetchone()
        if row is not None:
            created.append(obj.kind)
    return created


def _has_screenshot(conn: Conn, sample_id: str) -> bool:
    row = conn.execute(
        Q("evidence.has_kind"), {"sample_id": sample_id, "kind": "screenshot"}
    ).fetchone()
    return bool(row and row["present"])


def _screenshot_verdict(
    policy: str, satisfied: bool, warnings: tuple[str, ...]
) -> tuple[EvidenceState, str | None, tuple[str, ...]]:
    if satisfied:
        return "stored", None, tuple(w for w in warnings if w not in _SCREENSHOT_WARNINGS)
    if policy == "required":
        code = SCREENSHOT_PENDING if SCREENSHOT_PENDING in warnings else SCREENSHOT_UNAVAILABLE
        return "partial", code, _dedupe((*warnings, code))
    return "stored", None, warnings


_RANK = {"pending": 0, "failed": 1, "partial": 2, "stored": 3}


def _never_backwards(sample: dict[str, Any], outcome: EvidenceOutcome) -> EvidenceOutcome:
    current = str(sample["evidence_state"])
    if _RANK.get(current, 0) <= _RANK[outcome.state]:
        return outcome
    return replace(outcome, state=current, reason=sample["evidence_reason"])  # type: ignore[arg-type]


def record_evidence(conn: Conn, archived: ArchivedEvidence) -> EvidenceOutcome:
    """Record archived evidence inside the caller's transaction (never commits, never touches
    ``geo.samples``). Idempotent; a changed answer becomes the next revision (module docstring)."""
    return record_evidence_batch(conn, [archived])[0]


def _rounds(items: Sequence[ArchivedEvidence]) -> list[list[int]]:
    """Item indexes split so that no sample appears twice in one round: each round's statements
    number revisions from what the previous round wrote."""
    rounds: list[list[int]] = []
    seen: list[set[str]] = []
    for i, item in enumerate(items):
        sid = item.ref.sample_id
        for r, ids in zip(rounds, seen, strict=True):
            if sid not in ids:
                r.append(i)
                ids.add(sid)
                break
        else:
            rounds.append([i])
            seen.append({sid})
    return rounds


def record_evidence_batch(conn: Conn, items: Sequence[ArchivedEvidence]) -> list[EvidenceOutcome]:
    """``record_evidence`` for a whole completion batch, in a fixed number of statements
    (lock, read, then one INSERT per table) instead of a handful per sample; outcomes in the
    order of ``items``. Same rules, same idempotency, same transaction contract."""
    outcomes: list[EvidenceOutcome | None] = [None] * len(items)
    for idx in _rounds(items):
        for i, outcome in zip(idx, _record_round(conn, [items[i] for i in idx]), strict=True):
            outcomes[i] = outcome
    return [o for o in outcomes if o is not None]


def _record_round(conn: Conn, items: list[ArchivedEvidence]) -> list[EvidenceOutcome]:
    rows = samples_for_record(conn, [a.ref.sample_id for a in items])
    answers: list[tuple[Any, ...]] = []
    citations: list[tuple[Any, ...]] = []
    objects: list[tuple[Any, ...]] = []
    warc_rows: list[tuple[Any, ...]] = []
    pending: list[tuple[dict[str, Any], EvidenceOutcome]] = []
    for archived in items:
        ref = archived.ref
        if archived.warc_pending:
            # Recording a record that is not stored would name bytes nobody can read.
            raise RuntimeError(
                f"evidence of sample {ref.sample_id} was recorded before its WARC records were "
                "stored (evidence.warc_store.astore_batch runs before the fenced transaction)"
            )
        sample = rows.get(ref.sample_id)
        if sample is None:
            raise ValueError(f"sample {ref.sample_id} does not exist")
        if (sample["tenant_id"], sample["run_id"]) != (ref.tenant_id, ref.run_id):
            # The keys were built from ref; a mismatch would file evidence under another tenant.
            raise ValueError(
                f"sample {ref.sample_id} belongs to tenant {sample['tenant_id']} run "
                f"{sample['run_id']}, not {ref.tenant_id}/{ref.run_id}"
            )
        at = archived.captured_at.isoformat()
        outcome = _decide(sample, archived, answers, citations, at)
        if archived.failure is None:
            objects += _object_rows(
                ref, archived.objects, archived.attempt_no, archived.captured_at, at
            )
            warc_rows += _warc_rows(archived, at)
        pending.append((sample, outcome))
    created = write_rows(conn, rows, answers, citations, warc_rows, objects)
    out = []
    for (sample, o), archived in zip(pending, items, strict=True):
        kinds = created.get(sample["sample_id"])
        if kinds:  # replace(o, new_objects=...) without dataclasses.replace (issue 33)
            with_objects = _new(EvidenceOutcome)
            _set(with_objects, "__dict__", {**o.__dict__, "new_objects": tuple(kinds)})
            o = with_objects
        out.append(refused_reason(_never_backwards(sample, o), archived.screenshot_detail))
    return out


def _outcome(
    state: EvidenceState, reason: str | None, warnings: tuple[str, ...], answer_revision: int,
    validity: str, new_answer_revision: bool = False, new_objects: tuple[str, ...] = (),
) -> EvidenceOutcome:  # fmt: skip
    """``EvidenceOutcome(...)`` without the frozen dataclass's __init__ (an object.__setattr__
    a field; one an item of a batch and another for its new objects, issue 33);
    test_recording_fast_paths checks it equals the dataclass's own."""
    made = _new(EvidenceOutcome)
    _set(made, "__dict__", {
        "state": state, "reason": reason, "warnings": warnings,
        "answer_revision": answer_revision, "validity": validity,
        "new_answer_revision": new_answer_revision, "new_objects": new_objects,
    })  # fmt: skip
    return made


_set = object.__setattr__  # a frozen dataclass's own __setattr__ refuses every name


def _object_rows(
    ref: SampleRef, objects: Iterable[ArchivedObject], attempt_no: int, captured_at: datetime,
    at: str | None = None,
) -> list[tuple[Any, ...]]:  # fmt: skip
    """The ``geo.evidence_objects`` rows of one item's objects, in ``rows.OBJECT_COLUMNS``
    order (no revision yet: rows._new_objects numbers them). ``at``: captured_at.isoformat()
    when the caller has it (an answer's rows share one)."""
    at = captured_at.isoformat() if at is None else at
    sid, tenant, run = ref.sample_id, ref.tenant_id, ref.run_id
    return [
        (
            sid,
            tenant,
            run,
            obj.kind,
            obj.key,
            obj.sha256,
            obj.size_bytes,
            obj.mime_type,
            attempt_no,
            at,
        )
        for obj in objects
    ]


def _warc_rows(
    item: ArchivedEvidence | ArchivedScreenshot, at: str | None = None
) -> list[tuple[Any, ...]]:
    """The ``geo.warc_records`` index rows of one item's stored records, in
    ``rows.WARC_COLUMNS`` order (``at``: the item's captured_at.isoformat() when the caller has
    it)."""
    # The item's values are read once, not once per record: ~9 rows an answer (these rows, its
    # objects', its answer's) each formatted the same capture time, ~0.7 us a time.
    at = item.captured_at.isoformat() if at is None else at
    ref, attempt_no = item.ref, item.attempt_no
    tenant, run, sid = ref.tenant_id, ref.run_id, ref.sample_id
    return [
        (
            p.object_key,
            p.offset,
            len((r := p.record).data),
            tenant,
            run,
            sid,
            r.record_type,
            r.record_id,
            r.target_uri,
            r.kind,
            r.mime_type,
            r.block_sha256,
            r.payload_sha256,
            r.payload_size,
            attempt_no,
            at,
        )
        for p in item.warc_placed
    ]


# A citation's values in rows.CITATION_COLUMNS order after (sample_id, tenant_id, revision).
_CITATION_VALUES = attrgetter(
    "ordinal", "citation_key", "relation", "raw_url", "normalized_url", "registrable_domain",
    "title", "span_start", "span_end", "cited_text",
)  # fmt: skip


def _decide(
    sample: dict[str, Any],
    archived: ArchivedEvidence,
    answers: list[tuple[Any, ...]],
    citations: list[tuple[Any, ...]],
    at: str | None = None,
) -> EvidenceOutcome:
    """The outcome for one item, adding its answer and citation rows (tuples in
    ``rows.ANSWER_COLUMNS`` and ``rows.CITATION_COLUMNS`` order) when it makes a new
    revision (module docstring). ``at``: the item's captured_at.isoformat(), when known."""
    latest_rev = int(sample["revision"] or 0)
    latest_validity = sample["validity"]
    if archived.failure is not None:
        return _outcome(
            "failed", archived.failure, _dedupe((*archived.warnings, ARCHIVE_FAILED)), latest_rev,
            archived.validity.label if latest_rev == 0 else str(latest_validity),
        )  # fmt: skip
    if archived.unparseable is not None:
        # Raw bytes kept, no answer: partial until a re-parse adds a revision (R13).
        return _outcome(
            "partial", archived.unparseable, _dedupe((*archived.warnings, UNPARSEABLE)),
            latest_rev, "invalid" if latest_rev == 0 else str(latest_validity),
        )  # fmt: skip
    new_revision = latest_rev == 0 or sample["content_sha256"] != archived.content_sha256
    revision = latest_rev + 1 if new_revision else latest_rev
    satisfied = archived.screenshot_status == "archived" or (
        not new_revision and bool(sample["has_screenshot"])
    )
    state, reason, warnings = _screenshot_verdict(
        archived.screenshot_policy, satisfied, archived.warnings
    )
    if new_revision:
        sid, tenant = archived.ref.sample_id, sample["tenant_id"]
        answers.append(
            (
                sid,
                tenant,  # the trigger then has no tenant to look up
                revision,
                archived.attempt_no,
                archived.upstream_id,
                archived.answer_text,
                archived.sanitized_html,
                archived.text_sha256 or sha256_hex(archived.answer_text.encode("utf-8")),
                archived.content_sha256,
                archived.captured_at.isoformat() if at is None else at,
                archived.provider_truncated,
                archived.validity.label,
                archived.validity.reason,
                archived.validity.rule_version,
                list(warnings),
                list(archived.search_queries),
                archived.web_search_used,
            )
        )
        # (sid, tenant, revision) + each citation's values, with no Python frame a citation.
        citations += map((sid, tenant, revision).__add__, map(_CITATION_VALUES, archived.citations))
    validity = archived.validity.label if new_revision else str(latest_validity)
    return _outcome(state, reason, warnings, revision, validity, new_revision)


def record_screenshot(conn: Conn, archived: ArchivedScreenshot) -> EvidenceOutcome:
    """Record a late screenshot as a new revision of the screenshot (and thumbnail) kind only;
    the stored answer text is never touched (R21). The outcome is the sample's evidence state
    after it: ``stored`` once the policy is met, else ``partial``; ``failed`` with reason
    ``NO_ANSWER_RECORDED`` when the sample has no answer text at all."""
    ref = archived.ref
    sample = _sample(conn, ref)
    created = _insert_objects(
        conn, ref, archived.objects, archived.attempt_no, archived.captured_at
    )
    latest = conn.execute(Q("evidence.latest_answer"), {"sample_id": ref.sample_id}).fetchone()
    if latest is None:
        return EvidenceOutcome(
            "failed", NO_ANSWER, archived.warnings, 0, "invalid", False, tuple(created)
        )
    satisfied = archived.status == "archived" or _has_screenshot(conn, ref.sample_id)
    state, reason, warnings = _screenshot_verdict(
        sample["screenshot_policy"], satisfied, archived.warnings
    )
    outcome = EvidenceOutcome(
        state, reason, warnings, int(latest["revision"]), str(latest["validity"]), False,
        tuple(created),
    )  # fmt: skip
    return _never_backwards(sample, outcome)
