"""``evidence_bridge.screenshot_pending`` (the worker's answer whose screenshot comes later)
makes what ``dataclasses.replace`` makes, field for field (issue 33: the event loop's CPU)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from geo_pipeline.connectors.base import Attachment, Evidence
from geo_pipeline.worker.evidence_bridge import screenshot_pending
from geo_pipeline_tests.unit.evidence.test_warc_stored_fields import simulator_evidence


def general(evidence: Evidence, reason: str | None) -> Evidence:
    return replace(
        evidence,
        screenshot=Attachment("screenshot", "pending", reason=reason),
        warnings=(*evidence.warnings, "SCREENSHOT_PENDING"),
    )


def _evidence() -> list[Evidence]:
    out = [ev for _, _, ev, _ in simulator_evidence(12)]
    base = out[0]
    out += [
        replace(base, warnings=()),
        replace(base, warnings=("SCREENSHOT_PENDING", "注意")),
        replace(base, exchange=None, capture={"device": "手机"}, search_queries=("a", "b")),
        replace(base, screenshot=None, page_html=b"", usage=None, vendor_credits=3),
        Evidence("s", "u", "completed", "", b"", "", base.captured_at),  # defaults only
    ]
    return out


@pytest.mark.parametrize("reason", [None, "", "PLATFORM: 截图稍后", "x" * 600])
def test_screenshot_pending_is_replace(reason: str | None) -> None:
    for ev in _evidence():
        want, got = general(ev, reason), screenshot_pending(ev, reason)
        assert type(got) is Evidence and got == want
        assert vars(got) == vars(want)
        assert set(vars(got)) == {f.name for f in fields(Evidence)}
        assert type(got.screenshot) is Attachment and vars(got.screenshot) == vars(want.screenshot)
        assert set(vars(got.screenshot)) == {f.name for f in fields(Attachment)}
        assert got.capture is ev.capture  # shared as replace shares it, not copied
        assert ev.screenshot is not got.screenshot  # the input is left as it was
