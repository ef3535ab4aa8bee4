"""Helpers of the operations tests: a small real run in the database, moved through its states
by guarded transitions exactly as a worker would (the triggers check every move)."""

from __future__ import annotations

import hashlib
from typing import Any

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}


def make_run(db: Any, run_id: str = "run-ops", tenant: str = "acme") -> list[dict[str, Any]]:
    """A persisted run of 2 questions x 2 channels x 2 repeats = 8 samples; returns the samples."""
    config = {
        "tenant": tenant,
        "brand": {"name": "瑞幸咖啡", "aliases": ["Luckin"]},
        "competitors": [{"name": "星巴克", "aliases": ["Starbucks"]}],
        "questions": ["国内性价比最高的连锁咖啡品牌有哪些？", "Best coffee app in China?"],
        "channels": [
            {"platform": "deepseek", "device": "web", "screenshot": "required"},
            {"platform": "kimi", "device": "web"},
        ],
        "repeats": 2,
    }
    n = normalise_and_validate(config, CAPS)
    plan = build_plan(n, quote(n, PRICES), run_id)
    db.execute(
        "INSERT INTO geo.tenants (tenant_id, name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (tenant, tenant),
    )
    db.commit()
    create_run(db, plan, confirm=False, dispatch=False)
    db.commit()
    return db.execute(
        "SELECT * FROM geo.samples WHERE run_id = %s ORDER BY sample_id", (run_id,)
    ).fetchall()


def complete(
    db: Any,
    sample: dict[str, Any],
    evidence: str = "stored",
    reason: str | None = None,
    html: str = "<p>answer</p>",
    raw: str = "answer",
) -> None:
    """Claim, accept and complete one sample with an answer (guarded transitions)."""
    sid = sample["sample_id"]
    db.execute(
        "UPDATE geo.samples SET submission_state='submitting', collection_state='running', "
        "lease_until=now()+interval '1 min', fencing_token=fencing_token+1, attempt_no=1 "
        "WHERE sample_id=%s",
        (sid,),
    )
    db.execute(
        "UPDATE geo.samples SET submission_state='accepted', upstream_id='u-'||sample_id "
        "WHERE sample_id=%s",
        (sid,),
    )
    db.execute(
        "UPDATE geo.samples SET collection_state='completed', evidence_state=%s, "
        "evidence_reason=%s, completed_at=now() WHERE sample_id=%s",
        (evidence, reason, sid),
    )
    db.execute(
        "INSERT INTO geo.answers (sample_id, revision, attempt_no, raw_text, sanitized_html, "
        "raw_sha256, captured_at, validity, validity_rule_version) "
        "VALUES (%s, 1, 1, %s, %s, %s, now(), 'valid', 'v1')",
        (sid, raw, html, hashlib.sha256(raw.encode()).hexdigest()),
    )
    db.commit()


def fail(db: Any, sample: dict[str, Any], reason: str) -> None:
    db.execute(
        "UPDATE geo.samples SET collection_state='failed', collection_reason=%s WHERE sample_id=%s",
        (reason, sample["sample_id"]),
    )
    db.commit()


def add_evidence(db: Any, sample: dict[str, Any], kind: str, key: str, data: bytes) -> None:
    db.execute(
        "INSERT INTO geo.evidence_objects (sample_id, tenant_id, run_id, revision, kind, "
        "storage_key, sha256, size_bytes, mime_type, attempt_no, captured_at) "
        "VALUES (%s, %s, %s, 1, %s, %s, %s, %s, 'image/png', 1, now())",
        (
            sample["sample_id"],
            sample["tenant_id"],
            sample["run_id"],
            kind,
            key,
            hashlib.sha256(data).hexdigest(),
            len(data),
        ),
    )
    db.commit()
