"""Analysing a run: every sample whose evidence is stored (or partial) and whose analysis is
pending, or was made by another detector version or of an older answer revision (R6).

One transaction per chunk writes the analysis results, one geo.mentions row per tracked brand
(mentioned or not), the current-result pointer, and the guarded state transition of each
sample, so a crash leaves every sample either analysed or still pending -- never half. Re-running
is idempotent; a newer ``detector_version`` re-analyses and keeps the older results as history.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Literal

from psycopg.types.json import Jsonb

from geo_pipeline.analysis.refresh import refresh_analytics
from geo_pipeline.domain.mentions import (
    DETECTOR_VERSION,
    INVALID_REVIEW_PREFIX,
    BrandSet,
    CitationRef,
    Detection,
    conclude,
    detect,
    mention_spans,
    verdict_for,
)
from geo_pipeline.domain.stance import BASELINE as STANCE_DETECTOR
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

CHUNK_SIZE = 2000
ANALYZE_AFTER = 5000  # samples analysed in one call


@dataclass
class AnalysisSummary:
    """What one analyse_run did. ``waiting_*`` samples stay pending: unknown, not unmentioned."""

    run_id: str
    detector_version: str
    analysed: int = 0
    accepted: int = 0
    review: int = 0
    failed: int = 0
    # of ``review``: invalid answers a person is to confirm (a truncated answer). They are
    # invalid answers first (in no rate): the words count them there, once (issue #34).
    invalid_review: int = 0
    reanalysed: int = 0
    waiting_evidence: int = 0
    waiting_answer: int = 0
    seconds: float = 0.0
    refresh_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyse_run(
    conn: Conn,
    run_id: str,
    channel: str | None = None,
    detector_version: str = DETECTOR_VERSION,
    *,
    chunk_size: int = CHUNK_SIZE,
    refresh: bool = True,
) -> AnalysisSummary:
    """Analyse the run's (or one channel's) analysable samples, then refresh the run's analyst
    tables (``refresh=False`` to skip). ``detector_version`` is the label stored with each
    result: the current detector's by default; a new label re-analyses everything once."""
    t0 = time.perf_counter()
    runstore.get_run(conn, run_id)  # RunNotFound names the run
    brand_set = BrandSet.from_config(runstore.run_config(conn, run_id))
    conn.commit()  # end the read transaction: each chunk is its own transaction
    summary = AnalysisSummary(run_id, detector_version)
    with conn.cursor() as cur:
        cur.execute(Q("analysis.tune"))
        cur.execute(
            Q("analysis.candidate_ids"),
            {"run_id": run_id, "channel": channel, "detector_version": detector_version},
        )
        todo = [r["sample_id"] for r in cur.fetchall()]
    conn.commit()
    for i in range(0, len(todo), chunk_size):
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(Q("analysis.set_actor"), {"actor": f"analysis:{detector_version}"})
            cur.execute(Q("analysis.tune"))
            cur.execute(Q("analysis.lock_chunk"), {"sample_ids": todo[i : i + chunk_size]})
            locked = [r["sample_id"] for r in cur.fetchall()]
            rows = []
            if locked:
                # A statement of its own: its snapshot sees every analysis committed before
                # the locks were ours (sql/queries/analysis.sql, lock_chunk).
                cur.execute(
                    Q("analysis.candidates"),
                    {"sample_ids": locked, "detector_version": detector_version},
                )
                rows = cur.fetchall()
            if rows:
                _analyse_chunk(conn, rows, brand_set, detector_version, summary)
    with conn.cursor() as cur:
        if summary.analysed >= ANALYZE_AFTER:
            # Bulk writes leave the planner's statistics stale until autovacuum comes by;
            # the refresh that follows joins these tables.
            cur.execute(Q("analysis.analyze_tables"))
        cur.execute(Q("analysis.waiting_counts"), {"run_id": run_id, "channel": channel})
        w = cur.fetchone()
    conn.commit()
    if w is not None:
        summary.waiting_evidence = int(w["evidence_not_ready"])
        summary.waiting_answer = int(w["no_answer"])
    summary.seconds = time.perf_counter() - t0
    if refresh:
        t1 = time.perf_counter()
        refresh_analytics(conn, run_id)
        summary.refresh_seconds = time.perf_counter() - t1
    return summary


def _analyse_chunk(
    conn: Conn,
    rows: list[dict[str, Any]],
    brand_set: BrandSet,
    version: str,
    summary: AnalysisSummary,
) -> None:
    ids = [r["sample_id"] for r in rows]
    revisions = [int(r["answer_revision"]) for r in rows]
    citations: dict[str, list[CitationRef]] = defaultdict(list)
    with conn.cursor() as cur:
        cur.execute(Q("analysis.citations_for"), {"sample_ids": ids, "revisions": revisions})
        for c in cur.fetchall():
            relation: Literal["cited", "retrieved"] = (
                "cited" if c["relation"] == "cited" else "retrieved"
            )
            citations[c["sample_id"]].append(
                CitationRef(relation, c["registrable_domain"], c["normalized_url"])
            )

    results: list[tuple[Any, ...]] = []
    mentions: list[tuple[Any, ...]] = []
    stances: list[tuple[Any, ...]] = []  # stance per mentioned brand (issue 37, migration 0048)
    states: list[str] = []
    reasons: list[str | None] = []
    for r, rev in zip(rows, revisions, strict=True):
        verdict = verdict_for(r["validity"], r["validity_reason"])
        detection: Detection | None = None
        if verdict.run_detector:
            detection = detect(
                r["raw_text"], brand_set, citations.get(r["sample_id"], ()), r["question"]
            )
            verdict = conclude(verdict, detection)
        results.append((r["sample_id"], version, rev, verdict.state, verdict.reason))
        states.append(verdict.state)
        reasons.append(verdict.reason)
        if detection is not None:
            for m in detection.mentions:
                mentions.append(
                    (
                        r["sample_id"], version, rev, m.brand, m.is_target, m.mentioned,
                        m.mention_count, m.first_offset, m.rank, m.first_block,
                        m.position_bucket, m.domain_cited, m.domain_retrieved, m.ambiguous,
                    )
                )  # fmt: skip
            if any(m.mentioned for m in detection.mentions):
                spans = mention_spans(r["raw_text"], brand_set, r["question"])
                for ms in STANCE_DETECTOR.detect(r["raw_text"], spans).values():
                    stances.append(
                        (r["sample_id"], version, rev, ms.brand, STANCE_DETECTOR.version,
                         ms.stance, list(ms.attributes))
                    )  # fmt: skip

    with conn.cursor() as cur:
        key = {"sample_ids": ids, "revisions": revisions, "detector_version": version}
        cur.execute(Q("analysis.delete_results"), key)
        with cur.copy(Q("analysis.copy_results")) as copy:  # type: ignore[arg-type]
            for row in results:
                copy.write_row(row)
        if mentions:
            with cur.copy(Q("analysis.copy_mentions")) as copy:  # type: ignore[arg-type]
                for row in mentions:
                    copy.write_row(row)
        if stances:
            with cur.copy(Q("stance.copy")) as copy:  # type: ignore[arg-type]
                for row in stances:
                    copy.write_row(row)
        cur.execute(
            Q("analysis.set_current"),
            {"sample_ids": ids, "detector_version": [version] * len(ids), "revisions": revisions},
        )
        reopen = [r["sample_id"] for r in rows if r["analysis_state"] != "pending"]
        if reopen:
            cur.execute(
                Q("analysis.reopen"), {"sample_ids": reopen, "reason": f"reanalyse:{version}"}
            )
        verdicts = {sid: [st, why] for sid, st, why in zip(ids, states, reasons, strict=True)}
        cur.execute(Q("analysis.conclude"), {"verdicts": Jsonb(verdicts), "sample_ids": ids})
        if cur.rowcount != len(ids):
            # The rows are locked FOR UPDATE by this transaction: nothing else can move them.
            raise RuntimeError(
                f"analysis of {len(ids)} samples concluded {cur.rowcount}; rolled back"
            )
    summary.analysed += len(ids)
    summary.reanalysed += len(reopen)
    summary.accepted += states.count("accepted")
    summary.review += states.count("review")
    summary.failed += states.count("failed")
    summary.invalid_review += sum(
        1
        for st, why in zip(states, reasons, strict=True)
        if st == "review" and str(why or "").startswith(INVALID_REVIEW_PREFIX)
    )
