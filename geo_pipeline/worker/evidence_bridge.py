"""The worker's link to the evidence part (R17-R22): archive BEFORE the completion transaction
(uploads, no database), record INSIDE it (``flows.complete.finish_batch`` calls
``record_evidence``). Uploads run in a thread so the event loop keeps polling other samples.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from geo_pipeline.connectors.base import Attachment, ConnectorError, Evidence
from geo_pipeline.evidence import SampleRef, archive_evidence

UNPARSEABLE = "UNPARSEABLE"


def sample_ref(row: Mapping[str, Any]) -> SampleRef:
    return SampleRef(sample_id=row["sample_id"], run_id=row["run_id"], tenant_id=row["tenant_id"])


async def archive_for_completion(
    archive: Any,
    row: Mapping[str, Any],
    evidence: Evidence | None,
    unparseable: ConnectorError | None = None,
) -> tuple[Any, str | None, str | None, bool]:
    """Returns (archived, evidence_state, evidence_reason, screenshot_still_to_come).

    With an archive, the evidence state is decided by ``record_evidence`` inside the fenced
    transaction; without one (benchmarks of the bare core) nothing is archived and the layer
    stays ``pending``. An unparseable response completes collection with evidence ``failed``
    and reason UNPARSEABLE: it goes to review and is never re-asked (R13)."""
    if evidence is None:
        return None, "failed", UNPARSEABLE if unparseable else "NO_EVIDENCE", False
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
        evidence = replace(
            evidence,
            screenshot=Attachment("screenshot", "pending", reason=shot.reason),
            warnings=(*evidence.warnings, "SCREENSHOT_PENDING"),
        )
    if archive is None:
        return None, None, None, want_shot
    archived = await asyncio.to_thread(
        archive_evidence,
        archive,
        sample_ref(row),
        int(row["attempt_no"]),
        evidence,
        str(row["screenshot_policy"]),
    )
    return archived, None, None, want_shot
