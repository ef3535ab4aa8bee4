"""Planting runs and answers for the analysis tests: a run created the way the product creates
one, and samples moved through the allowed transitions up to stored evidence, as the worker and
the evidence recorder would leave them."""

from __future__ import annotations

import hashlib
from datetime import date
from typing import Any

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run

BRAND = {"name": "瑞幸咖啡", "aliases": ["Luckin", "瑞幸"], "domains": ["luckincoffee.com"]}
COMPETITORS = [
    {"name": "星巴克", "aliases": ["Starbucks"], "domains": ["starbucks.com"]},
    {"name": "Manner Coffee", "aliases": ["Manner", "咖啡"]},  # 咖啡 is a common word: ambiguous
]


def make_run(
    conn: Any,
    run_id: str,
    *,
    questions: list[str],
    channels: list[dict[str, Any]],
    repeats: int,
    monitor: str | None = None,
    scheduled_for: date | None = None,
    tenant: str = "acme",
    question_tags: dict[str, dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Create the run; return its samples ordered by channel, question, repeat."""
    raw = {
        "tenant": tenant,
        "monitor": monitor,
        "brand": BRAND,
        "competitors": COMPETITORS,
        "questions": questions,
        "channels": channels,
        "repeats": repeats,
        **({"question_tags": question_tags} if question_tags else {}),
    }
    caps = load_registry().capabilities()
    config = normalise_and_validate(raw, caps)
    q = quote(config, {p: c.prices for p, c in caps.items()})
    plan = build_plan(config, q, run_id)
    create_run(conn, plan, scheduled_for=scheduled_for, confirm=False, dispatch=False)
    rows = conn.execute(
        "SELECT sample_id, channel, region, mode, question_index, repeat_index"
        " FROM geo.samples WHERE run_id = %s ORDER BY channel, question_index, repeat_index",
        (run_id,),
    ).fetchall()
    conn.commit()
    return [dict(r) for r in rows]


def store_answer(
    conn: Any,
    sample_id: str,
    text: str,
    *,
    validity: str = "valid",
    reason: str | None = None,
    citations: list[tuple[str, str]] = (),  # type: ignore[assignment]
    revision: int = 1,
    evidence: str = "stored",
) -> None:
    """Move a sample to collection completed + evidence stored (or partial) through the allowed
    transitions, with one answer revision and its citations (relation, registrable domain)."""
    with conn.transaction():
        state = conn.execute(
            "SELECT collection_state FROM geo.samples WHERE sample_id = %s", (sample_id,)
        ).fetchone()
        if state["collection_state"] != "completed":
            conn.execute(
                "UPDATE geo.samples SET submission_state = 'submitting' WHERE sample_id = %s",
                (sample_id,),
            )
            conn.execute(
                "UPDATE geo.samples SET submission_state = 'accepted', upstream_id = %s,"
                " collection_state = 'running', lease_until = now() + interval '1 minute',"
                " fencing_token = fencing_token + 1, attempt_no = 1 WHERE sample_id = %s",
                (f"up-{sample_id}", sample_id),
            )
            conn.execute(
                "UPDATE geo.samples SET collection_state = 'completed', completed_at = now(),"
                " lease_until = NULL, evidence_state = %s WHERE sample_id = %s",
                (evidence, sample_id),
            )
        conn.execute(
            "INSERT INTO geo.answers (sample_id, revision, attempt_no, upstream_id, raw_text,"
            " sanitized_html, raw_sha256, captured_at, validity, validity_reason,"
            " validity_rule_version) VALUES (%s, %s, 1, %s, %s, %s, %s, now(), %s, %s, 'test')",
            (
                sample_id,
                revision,
                f"up-{sample_id}",
                text,
                text,
                hashlib.sha256(text.encode()).hexdigest(),
                validity,
                reason,
            ),
        )
        for i, (relation, domain) in enumerate(citations):
            conn.execute(
                "INSERT INTO geo.citations (sample_id, revision, ordinal, relation, raw_url,"
                " normalized_url, registrable_domain) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (sample_id, revision, i, relation, f"https://{domain}/p", f"https://{domain}/p",
                 domain),
            )  # fmt: skip
