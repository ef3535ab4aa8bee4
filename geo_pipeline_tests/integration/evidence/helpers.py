"""Test data for the evidence tests: tenants, runs and samples inserted straight into a fresh
database, and connector results (``Evidence``) as a connector would return them."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from PIL import Image

from geo_pipeline.connectors.base import Attachment, Citation, Evidence
from geo_pipeline.domain.plan import sample_id_for
from geo_pipeline.evidence import SampleRef

ANSWER = (
    "## 推荐品牌\n\n| 品牌 | 评分 |\n|---|---|\n| Acme | 9 |\n\n"
    "Acme is a strong choice for most buyers, see [the review](https://review.example.com/a?utm_source=openai).\n"
)


def _hex(n: int) -> str:
    return uuid.uuid4().hex[:n]


def seed_sample(db: Any, tenant_id: str = "tenant-a", policy: str = "required") -> SampleRef:
    """One tenant (if new), run and sample; committed so other connections see it."""
    snapshot = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    quote = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    qrev = "q" + uuid.uuid4().hex[:20]
    run_id = f"run-{_hex(8)}"
    # The database keeps every sample id the hash of its identity (R5, migration 0033).
    sample_id = sample_id_for(run_id, qrev, "deepseek", "web", "cn", "default", 0)
    with db.transaction():
        db.execute(
            "INSERT INTO geo.tenants (tenant_id, name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (tenant_id, tenant_id),
        )
        db.execute(
            "INSERT INTO geo.config_snapshots (snapshot_id, tenant_id, config) VALUES (%s, %s, '{}')",
            (snapshot, tenant_id),
        )
        db.execute(
            "INSERT INTO geo.quote_snapshots (quote_id, tenant_id, currency, estimated_max_minor,"
            " price_versions) VALUES (%s, %s, 'CNY', 0, '{}')",
            (quote, tenant_id),
        )
        db.execute(
            "INSERT INTO geo.question_revisions (question_revision, text) VALUES (%s, 'q?')",
            (qrev,),
        )
        db.execute(
            "INSERT INTO geo.runs (run_id, tenant_id, snapshot_id, quote_id, sample_count)"
            " VALUES (%s, %s, %s, %s, 1)",
            (run_id, tenant_id, snapshot, quote),
        )
        db.execute(
            "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
            " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
            " VALUES (%s, %s, %s, 0, %s, 0, 'deepseek', 'web', 'cn', 'default', 0, %s)",
            (sample_id, run_id, tenant_id, qrev, policy),
        )
    return SampleRef(sample_id=sample_id, run_id=run_id, tenant_id=tenant_id)


def png_bytes(
    width: int = 1280, height: int = 2400, color: tuple[int, int, int] = (30, 90, 200)
) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def make_evidence(
    ref: SampleRef,
    *,
    text: str = ANSWER,
    screenshot: Attachment | None = None,
    raw: bytes | None = None,
    citations: tuple[Citation, ...] | None = None,
    warnings: tuple[str, ...] = (),
) -> Evidence:
    if citations is None:
        citations = (
            Citation(url="https://Review.Example.com:443/a?utm_source=openai&id=7#top", id="1"),
            Citation(url="https://www.shop.example.com.cn/p/9?spm=a.b.c", relation="retrieved"),
        )
    return Evidence(
        sample_id=ref.sample_id,
        upstream_id=f"up-{ref.sample_id}",
        collection_state="completed",
        answer_text=text,
        raw_body=raw
        if raw is not None
        else json.dumps({"answer": text}).encode("utf-8") + b"\r\n\x00\xff",
        raw_mime_type="application/json",
        captured_at=datetime(2026, 11, 29, 8, 0, tzinfo=UTC),
        citations=citations,
        screenshot=screenshot,
        warnings=warnings,
    )


def good_screenshot(**kw: Any) -> Attachment:
    return Attachment(
        kind="screenshot", status="available", data=png_bytes(**kw), mime_type="image/png"
    )


def apply_outcome(db: Any, ref: SampleRef, outcome: Any) -> None:
    """What the execution core's fenced completion does with an outcome (simplified): the
    sample is accepted, running, then completed with the evidence state and reason."""
    with db.transaction():
        state = db.execute(
            "SELECT collection_state FROM geo.samples WHERE sample_id = %s", (ref.sample_id,)
        ).fetchone()["collection_state"]
        if state == "queued":
            db.execute(
                "UPDATE geo.samples SET submission_state = 'submitting' WHERE sample_id = %s",
                (ref.sample_id,),
            )
            db.execute(
                "UPDATE geo.samples SET submission_state = 'accepted', upstream_id = 'u1',"
                " collection_state = 'running', lease_until = now() + interval '1 minute'"
                " WHERE sample_id = %s",
                (ref.sample_id,),
            )
            db.execute(
                "UPDATE geo.samples SET collection_state = 'completed' WHERE sample_id = %s",
                (ref.sample_id,),
            )
        db.execute(
            "UPDATE geo.samples SET evidence_state = %s, evidence_reason = %s"
            " WHERE sample_id = %s AND evidence_state IS DISTINCT FROM %s",
            (outcome.state, outcome.reason, ref.sample_id, outcome.state),
        )
