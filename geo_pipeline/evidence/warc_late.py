"""Recording late screenshots in batches (issue 33 item 4, R10, R21).

The screenshot lane downloads the screenshots of one read of its stream and stores their WARC
records in one object per tenant and run (worker.screenshots_warc, evidence.warc_store). This
records them all inside the caller's ONE transaction (flows.complete.record_late_screenshots)
with one statement per table, as the answers' evidence rows are (evidence.recording
``record_evidence_batch``): the samples' evidence locks, what the verdict is decided from, the
records' index rows, the evidence object rows; the caller moves the samples' evidence layer in
one more statement. A screenshot stored before WARC (a plain object, the bundle format) is
recorded by the same statements, with no index rows.

The rules are those of ``record_screenshot``: a late screenshot is a new revision of the
screenshot (and thumbnail) kind only, the stored answer text is never touched; the sample is
``stored`` once its policy is met, else ``partial``; the state never moves backwards (a sample
with no answer keeps its state and reason: R6 allows no move from partial or stored to failed,
and one such sample must not sink the batch's statement).

A screenshot refused for its size (``GEO_EVIDENCE_RECORD_MAX_BYTES``) is recorded as refused:
the sample's evidence reason names the record, its size, the cap and the variable
(``SCREENSHOT_UNAVAILABLE: RECORD_TOO_LARGE: …``), whatever the state, and the review queue
lists it as ``evidence_too_large`` (sql/queries/analysis.sql ``review_queue``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from geo_pipeline.evidence.recording import (
    NO_ANSWER,
    ArchivedScreenshot,
    EvidenceOutcome,
    _never_backwards,
    _object_rows,
    _rounds,
    _screenshot_verdict,
    _warc_rows,
    refused_reason,
)
from geo_pipeline.evidence.rows import samples_for_record, write_rows
from geo_pipeline.store.db import Conn


def record_late_screenshots(
    conn: Conn, items: Sequence[ArchivedScreenshot]
) -> list[EvidenceOutcome]:
    """Record late screenshots inside the caller's transaction (never commits, never touches
    ``geo.samples``); the outcomes in the order of ``items``. A fixed number of statements for
    any number of screenshots (a sample named twice takes a second round). A screenshot whose
    records are not stored yet is refused: recording it would name bytes nobody can read."""
    for item in items:
        if item.warc_pending:
            raise RuntimeError(
                f"late screenshot of sample {item.ref.sample_id} was recorded before its WARC "
                "records were stored (evidence.warc_store.astore_batch runs first)"
            )
    outcomes: list[EvidenceOutcome | None] = [None] * len(items)
    for idx in _rounds(items):  # type: ignore[arg-type]
        for i, outcome in zip(idx, _record_round(conn, [items[i] for i in idx]), strict=True):
            outcomes[i] = outcome
    return [o for o in outcomes if o is not None]


def _record_round(conn: Conn, items: list[ArchivedScreenshot]) -> list[EvidenceOutcome]:
    rows = samples_for_record(conn, [a.ref.sample_id for a in items])
    objects: list[tuple[Any, ...]] = []
    warc_rows: list[tuple[Any, ...]] = []
    decided: list[tuple[dict[str, Any], EvidenceOutcome]] = []
    for item in items:
        ref = item.ref
        sample = rows.get(ref.sample_id)
        if sample is None:
            raise ValueError(f"sample {ref.sample_id} does not exist")
        if (sample["tenant_id"], sample["run_id"]) != (ref.tenant_id, ref.run_id):
            # The keys were built from ref; a mismatch would file evidence under another tenant.
            raise ValueError(
                f"sample {ref.sample_id} belongs to tenant {sample['tenant_id']} run "
                f"{sample['run_id']}, not {ref.tenant_id}/{ref.run_id}"
            )
        objects += _object_rows(ref, item.objects, item.attempt_no, item.captured_at)
        warc_rows += _warc_rows(item)
        decided.append((sample, _decide(sample, item)))
    created = write_rows(conn, rows, [], [], warc_rows, objects)
    return [
        replace(outcome, new_objects=tuple(created.get(sample["sample_id"], ())))
        for sample, outcome in decided
    ]


def _decide(sample: dict[str, Any], item: ArchivedScreenshot) -> EvidenceOutcome:
    """The sample's evidence after this screenshot (module docstring), from what it was before:
    a screenshot archived earlier still counts, one archived now does."""
    revision = int(sample["revision"] or 0)
    if revision == 0:
        outcome = EvidenceOutcome("failed", NO_ANSWER, item.warnings, 0, "invalid")
    else:
        satisfied = item.status == "archived" or bool(sample["has_screenshot"])
        state, reason, warnings = _screenshot_verdict(
            sample["screenshot_policy"], satisfied, item.warnings
        )
        outcome = EvidenceOutcome(state, reason, warnings, revision, str(sample["validity"]))
    outcome = _never_backwards(sample, outcome)
    return refused_reason(outcome, item.detail)
