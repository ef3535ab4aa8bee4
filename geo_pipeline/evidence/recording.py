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
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from geo_pipeline.connectors.base import Attachment, Citation, Evidence
from geo_pipeline.domain.config import SCREENSHOT_POLICIES
from geo_pipeline.domain.urls import normalise_url
from geo_pipeline.domain.validity import Validity, classify
from geo_pipeline.evidence.archive import Archive, ArchiveError, object_key, sha256_hex
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline.evidence.thumbnails import (
    THUMBNAIL_MIME,
    ImageUnreadable,
    screenshot_derivatives,
)
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


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def normalise_citations(citations: Iterable[Citation]) -> tuple[NormalisedCitation, ...]:
    """Connector citations with raw and normalised URL and registrable domain (R18)."""
    out = []
    for ordinal, c in enumerate(citations):
        url = normalise_url(c.url)
        out.append(
            NormalisedCitation(
                ordinal=ordinal,
                relation=c.relation,
                raw_url=c.url,
                normalized_url=url.normalized,
                registrable_domain=url.registrable_domain,
                citation_key=c.id,
                title=c.title,
                span_start=c.span_start,
                span_end=c.span_end,
                cited_text=c.cited_text,
            )
        )
    return tuple(out)


def citations_json(citations: tuple[NormalisedCitation, ...]) -> bytes:
    """Canonical JSON (sorted keys, no whitespace) so equal citations give equal bytes."""
    rows = [c.__dict__ for c in citations]
    return json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def content_digest(text: str, citations_bytes: bytes, provider_truncated: bool) -> str:
    parts = {
        "text": sha256_hex(text.encode("utf-8")),
        "citations": sha256_hex(citations_bytes),
        "provider_truncated": provider_truncated,
    }
    return sha256_hex(json.dumps(parts, sort_keys=True).encode())


def _put(archive: Archive, ref: SampleRef, kind: str, data: bytes, mime: str) -> ArchivedObject:
    digest = sha256_hex(data)
    key = object_key(ref.tenant_id, ref.run_id, ref.sample_id, f"sha256-{digest}", kind)
    result = archive.put(key, data, mime_type=mime)
    return ArchivedObject(kind, key, result.sha256, result.size_bytes, mime)


def _archive_attachment(
    archive: Archive, ref: SampleRef, attachment: Attachment | None
) -> tuple[ScreenshotStatus, list[ArchivedObject], list[str], str | None]:
    """Screenshot at original resolution plus a separately made thumbnail. Never raises: an
    attachment failure must not cost the text (R21)."""
    if attachment is None:
        return "not_provided", [], [], None
    if attachment.status == "pending":
        return "pending", [], [SCREENSHOT_PENDING], attachment.reason
    if attachment.status != "available" or not attachment.data:
        return "unavailable", [], [SCREENSHOT_UNAVAILABLE], attachment.reason or "no image data"
    try:
        info, thumb = screenshot_derivatives(attachment.data)
    except ImageUnreadable as exc:
        return "unavailable", [], [SCREENSHOT_UNAVAILABLE], str(exc)
    try:
        shot = _put(archive, ref, "screenshot", attachment.data, info.mime_type)
    except ArchiveError as exc:
        log.warning("screenshot of %s not archived: %s", ref.sample_id, exc)
        return "unavailable", [], [SCREENSHOT_UNAVAILABLE], f"archive: {exc}"
    objects, warnings = [shot], []
    try:
        objects.append(_put(archive, ref, "thumbnail", thumb, THUMBNAIL_MIME))
    except ArchiveError as exc:
        # The original is archived; a missing thumbnail is cosmetic and can be re-made from it.
        log.warning("thumbnail of %s not archived: %s", ref.sample_id, exc)
        warnings.append(THUMBNAIL_UNAVAILABLE)
    return "archived", objects, warnings, None


def archive_evidence(
    archive: Archive,
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
) -> ArchivedEvidence:
    """Upload one attempt's evidence: the raw response exactly as received, the answer text, its
    sanitised HTML (R19), the normalised citations (R18) and the screenshot with its thumbnail
    (R21). No database access. Storage failures do not raise: a text failure is returned as
    ``failure`` (→ evidence ``failed``), a screenshot failure as a warning (→ ``partial``)."""
    if screenshot_policy not in SCREENSHOT_POLICIES:
        raise ValueError(
            f"screenshot policy {screenshot_policy!r} is not one of {SCREENSHOT_POLICIES}"
        )
    citations = normalise_citations(evidence.citations)
    cjson = citations_json(citations)
    html = render_answer(evidence.answer_text)
    validity = classify(evidence.answer_text, evidence.provider_truncated)
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
        content_sha256=content_digest(evidence.answer_text, cjson, evidence.provider_truncated),
    )
    objects: list[ArchivedObject] = []
    try:
        objects.append(
            _put(archive, ref, "response_raw", evidence.raw_body, evidence.raw_mime_type)
        )
        objects.append(
            _put(archive, ref, "answer_raw", evidence.answer_text.encode("utf-8"), TEXT_MIME)
        )
        objects.append(_put(archive, ref, "answer_html", html.encode("utf-8"), HTML_MIME))
        objects.append(_put(archive, ref, "citations", cjson, JSON_MIME))
    except ArchiveError as exc:
        log.warning("evidence text of %s not archived: %s", ref.sample_id, exc)
        return ArchivedEvidence(
            **common,
            objects=tuple(objects),
            screenshot_status="not_provided",
            warnings=_dedupe(evidence.warnings),
            failure=f"{ARCHIVE_FAILED}: {exc}",
        )
    status, shot_objects, shot_warnings, detail = _archive_attachment(
        archive, ref, evidence.screenshot
    )
    warnings = list(evidence.warnings) + shot_warnings
    if status == "not_provided" and screenshot_policy != "off":
        warnings.append(SCREENSHOT_UNAVAILABLE)
    return ArchivedEvidence(
        **common,
        objects=tuple(objects + shot_objects),
        screenshot_status=status,
        warnings=_dedupe(warnings),
        screenshot_detail=detail,
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
    ref = archived.ref
    sample = _sample(conn, ref)
    latest = conn.execute(Q("evidence.latest_answer"), {"sample_id": ref.sample_id}).fetchone()
    latest_rev = int(latest["revision"]) if latest else 0
    if archived.failure is not None:
        failed = EvidenceOutcome(
            "failed", archived.failure, _dedupe((*archived.warnings, ARCHIVE_FAILED)), latest_rev,
            archived.validity.label if latest is None else str(latest["validity"]),
        )  # fmt: skip
        return _never_backwards(sample, failed)

    new_revision = latest is None or latest["content_sha256"] != archived.content_sha256
    revision = latest_rev + 1 if new_revision else latest_rev
    satisfied = archived.screenshot_status == "archived" or (
        not new_revision and _has_screenshot(conn, ref.sample_id)
    )
    state, reason, warnings = _screenshot_verdict(
        archived.screenshot_policy, satisfied, archived.warnings
    )
    if new_revision:
        conn.execute(
            Q("evidence.insert_answer"),
            {
                "sample_id": ref.sample_id,
                "revision": revision,
                "attempt_no": archived.attempt_no,
                "upstream_id": archived.upstream_id,
                "raw_text": archived.answer_text,
                "sanitized_html": archived.sanitized_html,
                "raw_sha256": sha256_hex(archived.answer_text.encode("utf-8")),
                "content_sha256": archived.content_sha256,
                "captured_at": archived.captured_at,
                "provider_truncated": archived.provider_truncated,
                "validity": archived.validity.label,
                "validity_reason": archived.validity.reason,
                "validity_rule_version": archived.validity.rule_version,
                "warnings": list(warnings),
            },
        )
        for c in archived.citations:
            conn.execute(
                Q("evidence.insert_citation"),
                {"sample_id": ref.sample_id, "revision": revision, **c.__dict__},
            )
    created = _insert_objects(
        conn, ref, archived.objects, archived.attempt_no, archived.captured_at
    )
    validity = archived.validity.label if new_revision or latest is None else latest["validity"]
    outcome = EvidenceOutcome(
        state, reason, warnings, revision, validity, new_revision, tuple(created)
    )
    return _never_backwards(sample, outcome)


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
