"""Late screenshots travel on their own stream (R10) and repair the evidence layer without
touching the stored text (R21): partial (SCREENSHOT_PENDING) -> stored."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace

from PIL import Image

from geo_pipeline.connectors.base import Attachment, Evidence, SubmitRequest
from geo_pipeline.evidence import LocalArchive
from geo_pipeline_tests.integration.execution.helpers import FakeConnector, fetch, make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _run_until_all_stored(db_url, redis_url, redis_ns, tmp_path, connector) -> None:
    def done() -> bool:
        rows = fetch(db_url, "SELECT evidence_state FROM geo.samples")
        return bool(rows) and all(r["evidence_state"] == "stored" for r in rows)

    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": connector},
            done,
            timeout_s=40,
            archive=LocalArchive(str(tmp_path / "ev")),
            screenshot_retry_s=0.3,
        )
    )
    assert done()


class LateShots(FakeConnector):
    def __init__(self) -> None:
        super().__init__("deepseek")
        self.asked: dict[str, int] = {}

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        ev = await super().fetch_evidence(upstream_id, request)
        return replace(ev, screenshot=Attachment("screenshot", "pending"))

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        self.asked[upstream_id] = self.asked.get(upstream_id, 0) + 1
        if self.asked[upstream_id] == 1:
            return Attachment("screenshot", "pending")  # not ready the first time
        return Attachment("screenshot", "available", _png(), "image/png")


def test_late_screenshot_moves_evidence_from_partial_to_stored(
    db_url, redis_url, redis_ns, tmp_path
):
    ids = make_run(db_url, "r-shot", questions=3, screenshot="required")
    conn = LateShots()
    _run_until_all_stored(db_url, redis_url, redis_ns, tmp_path, conn)
    log = fetch(
        db_url,
        "SELECT from_state, to_state, count(*) AS n FROM geo.state_transitions "
        "WHERE layer = 'evidence' GROUP BY 1, 2 ORDER BY 1",
    )
    assert {(r["from_state"], r["to_state"]): r["n"] for r in log} == {
        ("pending", "partial"): len(ids),
        ("partial", "stored"): len(ids),
    }
    assert all(n == 2 for n in conn.asked.values())  # asked again after "pending"
    shots = fetch(
        db_url, "SELECT count(*) AS n FROM geo.evidence_objects WHERE kind = 'screenshot'"
    )
    assert shots[0]["n"] == len(ids)
    answers = fetch(db_url, "SELECT count(*) AS n FROM geo.answers")
    assert answers[0]["n"] == len(ids)  # the text was not re-recorded


class StatusOnlyShots(FakeConnector):
    """Like the simulator's task API: the result says the screenshot is available but carries
    no bytes; they are downloaded separately (fetch_screenshot)."""

    def __init__(self) -> None:
        super().__init__("deepseek")
        self.asked: dict[str, int] = {}

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        ev = await super().fetch_evidence(upstream_id, request)
        return replace(ev, screenshot=Attachment("screenshot", "available"))

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        self.asked[upstream_id] = self.asked.get(upstream_id, 0) + 1
        return Attachment("screenshot", "available", _png(), "image/png")


def test_available_screenshot_without_bytes_is_downloaded_not_reported_missing(
    db_url, redis_url, redis_ns, tmp_path
):
    ids = make_run(db_url, "r-shot2", questions=3, screenshot="required")
    conn = StatusOnlyShots()
    _run_until_all_stored(db_url, redis_url, redis_ns, tmp_path, conn)
    reasons = fetch(
        db_url,
        "SELECT DISTINCT reason FROM geo.state_transitions "
        "WHERE layer = 'evidence' AND to_state = 'partial'",
    )
    assert [r["reason"] for r in reasons] == ["SCREENSHOT_PENDING"]  # never "unavailable"
    shots = fetch(
        db_url, "SELECT count(*) AS n FROM geo.evidence_objects WHERE kind = 'screenshot'"
    )
    assert shots[0]["n"] == len(ids) and sorted(conn.asked.values()) == [1] * len(ids)


class NeverReadyShots(FakeConnector):
    """The screenshot stays pending for as long as this test runs."""

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        ev = await super().fetch_evidence(upstream_id, request)
        return replace(ev, screenshot=Attachment("screenshot", "pending"))

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "pending")


def test_sweeper_requeues_a_pending_screenshot_whose_hint_was_lost(
    db_url, redis_url, redis_ns, tmp_path
):
    """Redis may lose a screenshot hint (stream deleted or trimmed): the sweeper queues a new one
    for a required screenshot still pending once its last hint is older than the ttl, and
    only then; a sample whose screenshot is archived is never hinted again."""
    import psycopg
    from psycopg.rows import dict_row

    from geo_pipeline.store import execution as ex

    ids = make_run(db_url, "r-shot-lost", questions=3, screenshot="required")

    def all_partial() -> bool:
        rows = fetch(db_url, "SELECT evidence_state FROM geo.samples")
        return bool(rows) and all(r["evidence_state"] == "partial" for r in rows)

    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": NeverReadyShots("deepseek")},
            all_partial,
            timeout_s=30,
            archive=LocalArchive(str(tmp_path / "ev")),
        )
    )
    assert all_partial()
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        # Young hints: nothing to do.
        assert ex.sweep_screenshots(conn, ttl_s=300) == []
        # The hints were lost long ago; one sample got its screenshot meanwhile.
        conn.execute(
            "UPDATE geo.outbox SET created_at = now() - interval '10 minutes' "
            "WHERE kind = 'screenshot'"
        )
        conn.execute("UPDATE geo.samples SET completed_at = now() - interval '10 minutes'")
        conn.execute(
            "UPDATE geo.samples SET evidence_state = 'stored', evidence_reason = NULL "
            "WHERE sample_id = %s",
            (ids[0],),
        )
        again = ex.sweep_screenshots(conn, ttl_s=300)
        assert sorted(again) == sorted(ids[1:])
        rows = conn.execute(
            "SELECT stream, sample_id, payload ->> 'reason' AS reason FROM geo.outbox "
            "WHERE kind = 'screenshot' AND created_at > now() - interval '1 minute'"
        ).fetchall()
        assert sorted(r["sample_id"] for r in rows) == sorted(ids[1:])
        assert {r["stream"] for r in rows} == {"screenshot:deepseek"}
        assert {r["reason"] for r in rows} == {"sweep"}
        # The new hints are young: the next pass queues nothing more.
        assert ex.sweep_screenshots(conn, ttl_s=300) == []
