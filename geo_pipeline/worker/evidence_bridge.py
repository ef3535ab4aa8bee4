"""The worker's link to the evidence part (R13, R17-R22): archive BEFORE the completion
transaction (uploads, no database), record INSIDE it (``flows.complete.finish_batch`` calls
``record_evidence_batch``). Uploads are awaited on the event loop through the archive's own
async client (obstore for S3, bounded in flight; a thread pool for the directory), so the loop
keeps polling other samples while objects are written.

An unreachable store does not cost the answer: the upload is retried with backoff while this
worker holds the sample (its lease is renewed meanwhile), up to ``EVIDENCE_WAIT_S``; then
``ArchiveUnavailable`` reaches the attempt, which hands the sample back with a growing delay
(the worker-error path: after ``max_worker_errors`` an operator sees a dead letter). Nothing is
charged or completed until the evidence is archived, and a re-claimed sample fetches its
result again (a read, not a new task).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from geo_pipeline.connectors.base import Attachment, ConnectorError, Evidence
from geo_pipeline.evidence import ArchiveUnavailable, SampleRef
from geo_pipeline.evidence.recording import (
    aarchive_evidence,
    aarchive_unparseable,
    prepare_warc_evidence,
    prepare_warc_unparseable,
)
from geo_pipeline.settings import settings

log = logging.getLogger(__name__)

UNPARSEABLE = "UNPARSEABLE"
EVIDENCE_WAIT_S = 60.0  # how long one attempt waits for an unreachable store
RETRY_BASE_S = 0.5
RETRY_MAX_S = 10.0

T = TypeVar("T")


def sample_ref(row: Mapping[str, Any]) -> SampleRef:
    return SampleRef(sample_id=row["sample_id"], run_id=row["run_id"], tenant_id=row["tenant_id"])


async def with_store_retry(what: str, sample_id: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` again with exponential backoff and jitter while the store is unavailable, for
    at most ``EVIDENCE_WAIT_S``; then the last ``ArchiveUnavailable`` is raised."""
    deadline = time.monotonic() + EVIDENCE_WAIT_S
    tries = 0
    while True:
        try:
            return await call()
        except ArchiveUnavailable as exc:
            tries += 1
            delay = random.uniform(0.5, 1.0) * min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (tries - 1))
            if time.monotonic() + delay > deadline:
                raise
            if tries == 1:
                log.warning("%s of %s waits for the evidence store: %s", what, sample_id, exc)
            await asyncio.sleep(delay)


def screenshot_pending(evidence: Evidence, reason: str | None) -> Evidence:
    """``replace(evidence, screenshot=Attachment("screenshot", "pending", reason=reason),
    warnings=(*evidence.warnings, "SCREENSHOT_PENDING"))`` without ``dataclasses.replace``
    (it re-runs ``__init__`` over Evidence's ~20 fields: ~5 us of the event loop for every
    answer whose screenshot comes later). Evidence and Attachment are plain frozen dataclasses
    (no ``__post_init__``, no slots); test_evidence_bridge_fast checks the result equals
    ``replace``'s."""
    shot = _new(Attachment)
    _set(shot, "__dict__", {"kind": "screenshot", "status": "pending", "data": None,
                            "mime_type": None, "reason": reason})  # fmt: skip
    fields_ = evidence.__dict__.copy()
    fields_["screenshot"] = shot
    fields_["warnings"] = (*evidence.warnings, "SCREENSHOT_PENDING")
    out = _new(Evidence)
    _set(out, "__dict__", fields_)
    return out


_new = object.__new__
_set = object.__setattr__  # frozen dataclasses refuse their own __setattr__


async def archive_for_completion(
    archive: Any,
    row: Mapping[str, Any],
    evidence: Evidence | None,
    unparseable: ConnectorError | None = None,
    *,
    warc: bool = False,
    record_cap: int | None = None,
) -> tuple[Any, str | None, str | None, bool]:
    """Returns (archived, evidence_state, evidence_reason, screenshot_still_to_come).

    With an archive, the evidence state is decided by ``record_evidence_batch`` inside the
    fenced transaction; without one (benchmarks of the bare core) nothing is archived and the
    layer stays ``pending``. An unparseable response completes collection; with an archive its
    raw bytes are kept (evidence ``partial``, reason ``UNPARSEABLE: …``), it goes to review and
    is never re-asked (R13); ``geo-pipeline evidence reparse`` makes the answer from the kept
    bytes after a parser fix. Raises ``ArchiveUnavailable`` after ``EVIDENCE_WAIT_S``.

    With ``warc`` (``GEO_EVIDENCE_FORMAT=warc``) nothing is uploaded here: the evidence comes
    back as WARC records still to store, and the completion batch stores the batch's records
    in one object per tenant and run before its fenced transaction (worker.context).
    ``record_cap``: ``GEO_EVIDENCE_RECORD_MAX_BYTES`` as the worker read it at start (None: read
    the environment now)."""
    if evidence is None:
        if archive is None or unparseable is None or unparseable.raw is None:
            return None, "failed", UNPARSEABLE if unparseable else "NO_EVIDENCE", False
        ref, attempt_no = sample_ref(row), int(row["attempt_no"])
        upstream_id = str(row.get("upstream_id") or "")
        raw, reason = unparseable.raw, str(unparseable)
        if warc:
            pending = prepare_warc_unparseable(
                ref, attempt_no, upstream_id, raw, "application/octet-stream", reason
            )
            return pending, None, None, False
        archived = await with_store_retry(
            "raw response",
            ref.sample_id,
            lambda: aarchive_unparseable(
                archive, ref, attempt_no, upstream_id, raw, "application/octet-stream", reason
            ),
        )
        return archived, None, None, False
    shot = evidence.screenshot
    want_shot = (
        row.get("screenshot_policy") != "off"
        and shot is not None
        and shot.data is None
        and shot.status in ("pending", "available")
    )
    if want_shot and shot is not None and shot.status == "available":
        # The platform has the screenshot but the result carried only its status: the bytes come
        # through the screenshot stream, so downloads never hold up text collection (R10).
        # Until they are archived the screenshot is pending, not unavailable.
        evidence = screenshot_pending(evidence, shot.reason)
    if archive is None:
        return None, None, None, want_shot
    ref, attempt_no = sample_ref(row), int(row["attempt_no"])
    policy, ev = str(row["screenshot_policy"]), evidence
    if warc:
        cap = settings().evidence_record_max_bytes if record_cap is None else record_cap
        pending = prepare_warc_evidence(ref, attempt_no, ev, policy, max_record_bytes=cap)
        return pending, None, None, want_shot
    archived = await with_store_retry(
        "evidence",
        ref.sample_id,
        lambda: aarchive_evidence(archive, ref, attempt_no, ev, policy, raise_unavailable=True),
    )
    return archived, None, None, want_shot
