"""The review queue: samples waiting for a person, and recording a person's decision.

A decision is two writes in one transaction: a geo.review_decisions row (who, what, why) and,
where it changes the analysis, the guarded state transition of the sample, logged with the
operator as actor (``SET LOCAL geo.actor``). The analyst tables of the run are refreshed after,
so the views show the decision at once.
"""

from __future__ import annotations

from typing import Any

from geo_pipeline.analysis.refresh import refresh_analytics
from geo_pipeline.domain.vocabulary import REVIEW_VERDICTS
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

VERDICTS = REVIEW_VERDICTS


class ReviewError(ValueError):
    """A decision that cannot be recorded; the message says why and what to do instead."""


def list_review_queue(
    conn: Conn, run_id: str | None = None, limit: int = 1000
) -> list[dict[str, Any]]:
    """Every sample waiting for a person, oldest first: analysis in review, an answer kept raw
    after a parse failure (R13), a validity verdict flagged as doubtful. ``evidence_key`` points
    at the stored raw answer (``geo-pipeline evidence`` serves it to authorised users)."""
    with conn.cursor() as cur:
        cur.execute(Q("analysis.review_queue"), {"run_id": run_id, "limit": limit})
        rows = [dict(r) for r in cur.fetchall()]
    conn.commit()
    return rows


def resolve(
    conn: Conn, sample_id: str, verdict: str, note: str, actor: str, *, refresh: bool = True
) -> dict[str, Any]:
    """Record a reviewer's verdict on a sample.

    ``accepted`` / ``failed``: the analysis in review is accepted (its mention facts count) or
    failed. ``valid`` / ``invalid``: the reviewer's validity verdict overrides the rules' one in
    every view; an analysis in review follows it (valid -> accepted, invalid -> failed); an
    analysis already concluded goes back to pending so the next analyse_run applies it."""
    if verdict not in VERDICTS:
        raise ReviewError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    if not note.strip():
        raise ReviewError("a note is required: say why, for the next person reading the log")
    actor = actor.strip()
    if not actor:
        raise ReviewError("an actor name is required (--actor NAME)")
    reason = f"operator:{actor}: {note.strip()}"[:500]
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("analysis.set_actor"), {"actor": f"operator:{actor}"})
        cur.execute(Q("analysis.sample_for_review"), {"sample_id": sample_id})
        sample = cur.fetchone()
        if sample is None:
            raise ReviewError(f"no sample with id {sample_id!r}")
        state = sample["analysis_state"]
        to_state: str | None = None
        if verdict in ("accepted", "failed"):
            if state != "review":
                raise ReviewError(
                    f"sample {sample_id} is not waiting for an analysis review (analysis is "
                    f"{state!r}); use --verdict valid|invalid to judge its answer instead"
                )
            subject, to_state = "analysis", verdict
        else:
            subject = "validity"
            if state == "review":
                to_state = "accepted" if verdict == "valid" else "failed"
            elif state in ("accepted", "failed") and sample["evidence_state"] in (
                "stored",
                "partial",
            ):
                to_state = "pending"  # re-analysed with the reviewed validity
        cur.execute(
            Q("analysis.insert_decision"),
            {
                "sample_id": sample_id,
                "subject": subject,
                "verdict": verdict,
                "note": note.strip(),
                "actor": actor,
            },
        )
        decision = cur.fetchone()
        assert decision is not None
        if to_state is not None:
            cur.execute(
                Q("analysis.resolve_analysis"),
                {"sample_id": sample_id, "state": to_state, "reason": reason, "from_state": state},
            )
            if cur.fetchone() is None:
                raise ReviewError(f"sample {sample_id} changed while deciding; try again")
    if refresh:
        refresh_analytics(conn, sample["run_id"])
    return {
        "decision_id": decision["decision_id"],
        "decided_at": decision["decided_at"],
        "sample_id": sample_id,
        "run_id": sample["run_id"],
        "subject": subject,
        "verdict": verdict,
        "analysis_state": to_state or state,
        "actor": actor,
    }
