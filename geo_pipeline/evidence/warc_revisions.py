"""Evidence that arrives after the answer, as WARC records (issue 33, R10, R13, R21).

Two kinds of later evidence used to be written as bundles of their own; as WARC they are new
records in a batch object of the run (evidence.warc_store), never rewrites of the answer's:

* **A late screenshot** (the screenshot stream): the screenshot and its thumbnail as
  ``resource`` records, ``WARC-Concurrent-To`` the answer's response record -- the platform's
  picture of that same answer, only delivered later (its ``WARC-Date`` is when we got it). The
  screenshot lane stores the screenshots of one read of its stream in one object
  (worker.screenshots_warc), then records them all in one transaction (evidence.warc_late).
* **A re-parse revision** (``geo-pipeline evidence reparse``): the answer text the fixed parser
  read out of the kept response is a ``conversion`` record (WARC 1.1 section 6.8: another
  version of a record's content made by an archival process) and the citations a ``metadata``
  record, both ``WARC-Refers-To`` the response record they were read from; the response itself
  is not written again. ``flows.reparse`` stores the revisions of one re-parse in one object per
  run.

Evidence stored before WARC (a bundle) has no response record: the new records then carry no
link, and name the sample in their target URI as every part record does.

A record over ``GEO_EVIDENCE_RECORD_MAX_BYTES`` is refused with its size and the cap, as for an
answer (evidence.recording.prepare_warc_evidence): the screenshot is unavailable with that
reason; a revision whose text is too large is not made (``failure`` says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from geo_pipeline.connectors.base import Attachment, Evidence
from geo_pipeline.evidence.recording import (
    ARCHIVE_FAILED,
    JSON_MIME,
    SCREENSHOT_UNAVAILABLE,
    TEXT_MIME,
    ArchivedEvidence,
    ArchivedScreenshot,
    SampleRef,
    _common,
    _dedupe,
    _screenshot_plan,
    _too_large,
    warc_capture_parts,
)
from geo_pipeline.evidence.thumbnails import THUMBNAIL_MIME
from geo_pipeline.evidence.warc import Part, WarcRecord, part_records
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def answer_record_ids(conn: Conn, sample_ids: Sequence[str]) -> dict[str, str]:
    """sample id -> the WARC-Record-ID of its latest response record (none for evidence stored
    before WARC). One statement for the whole batch."""
    if not sample_ids:
        return {}
    rows = conn.execute(Q("evidence.answer_record_ids"), {"sample_ids": list(sample_ids)})
    return {r["sample_id"]: r["record_id"] for r in rows.fetchall()}


# --------------------------------------------------------------------------- late screenshots
def prepare_warc_screenshot(
    ref: SampleRef,
    attempt_no: int,
    attachment: Attachment,
    *,
    answer_record_id: str | None,
    max_record_bytes: int | None = None,
    captured_at: datetime | None = None,
) -> ArchivedScreenshot:
    """A screenshot that arrived after the text, as records still to store (no I/O): the
    original and its thumbnail, ``WARC-Concurrent-To`` the answer's response record. Pending,
    missing, undecodable or oversized: no records, and the status and detail say why."""
    at = captured_at or datetime.now(UTC)
    status, warnings, detail, todo = _screenshot_plan(attachment)
    if todo is not None and max_record_bytes is not None:
        original, _, thumb = todo
        for kind, data in (("screenshot", original), ("thumbnail", thumb)):
            if len(data) > max_record_bytes:
                status, warnings, todo = "unavailable", [SCREENSHOT_UNAVAILABLE], None
                detail = _too_large(kind, len(data), max_record_bytes)
                break
    records: tuple[WarcRecord, ...] = ()
    if todo is not None:
        original, mime, thumb = todo
        records = tuple(
            part_records(
                sample_id=ref.sample_id, attempt_no=attempt_no, captured_at=at,
                parts=[Part("screenshot", "resource", mime, original),
                       Part("thumbnail", "resource", THUMBNAIL_MIME, thumb)],
                concurrent_to=answer_record_id,
            )
        )  # fmt: skip
    return ArchivedScreenshot(
        ref=ref, attempt_no=attempt_no, status=status, objects=(), captured_at=at,
        warnings=_dedupe(warnings), detail=detail, warc_pending=records,
    )  # fmt: skip


# --------------------------------------------------------------------------- re-parse revisions
def prepare_warc_revision(
    ref: SampleRef,
    attempt_no: int,
    evidence: Evidence,
    screenshot_policy: str,
    *,
    response_record_id: str | None,
    max_record_bytes: int | None = None,
) -> ArchivedEvidence:
    """A re-parse's answer revision as records still to store (no I/O): the text as a
    ``conversion`` and the citations as ``metadata``, both ``WARC-Refers-To`` the response
    record they were read from (module docstring); a browser capture's page and capture
    metadata as for an answer. The response is not written again."""
    common, text_bytes, cjson, _ = _common(ref, attempt_no, evidence, screenshot_policy)
    if max_record_bytes is not None:
        for kind, data in (("answer_raw", text_bytes), ("citations", cjson)):
            if len(data) > max_record_bytes:
                return ArchivedEvidence(
                    **common, objects=(), screenshot_status="not_provided",
                    warnings=_dedupe(evidence.warnings),
                    failure=f"{ARCHIVE_FAILED}: {_too_large(kind, len(data), max_record_bytes)}",
                )  # fmt: skip
    status, shot_warnings, detail, todo = _screenshot_plan(evidence.screenshot)
    parts = [
        Part("answer_raw", "conversion", TEXT_MIME, text_bytes),
        Part("citations", "metadata", JSON_MIME, cjson),
    ]
    parts += warc_capture_parts(evidence)
    records = part_records(
        sample_id=ref.sample_id, attempt_no=attempt_no, captured_at=evidence.captured_at,
        parts=parts, refers_to=response_record_id,
    )  # fmt: skip
    if todo is not None:  # a parser that found a picture in the body: as for an answer
        original, mime, thumb = todo
        records += part_records(
            sample_id=ref.sample_id, attempt_no=attempt_no, captured_at=evidence.captured_at,
            parts=[Part("screenshot", "resource", mime, original),
                   Part("thumbnail", "resource", THUMBNAIL_MIME, thumb)],
            concurrent_to=response_record_id,
        )  # fmt: skip
    # As evidence.recording._archived: a new revision without a screenshot of its own is
    # warned about unless the policy is off (R21).
    warnings = list(evidence.warnings) + shot_warnings
    if status == "not_provided" and screenshot_policy != "off":
        warnings.append(SCREENSHOT_UNAVAILABLE)
    return ArchivedEvidence(
        **common, objects=(), screenshot_status=status, warnings=_dedupe(warnings),
        screenshot_detail=detail, warc_pending=tuple(records),
    )  # fmt: skip
