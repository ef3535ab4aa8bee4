"""Stance per mention over stored analyses (issue 37 item 5; migration 0048).

``analyse_run`` records the baseline's stance beside every mention it writes. ``restance_run``
computes the stances of another stance detector or version over a run's current analyses --
history re-computed without re-running mention detection -- and keeps the older versions' rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.mentions import BrandSet, mention_spans
from geo_pipeline.domain.stance import BASELINE, StanceDetector
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

CHUNK_SIZE = 2000


@dataclass
class RestanceSummary:
    run_id: str
    stance_version: str
    answers: int = 0
    stances: int = 0


def restance_run(
    conn: Conn, run_id: str, detector: StanceDetector = BASELINE, *, chunk_size: int = CHUNK_SIZE
) -> RestanceSummary:
    """Stance of every mentioned brand of the run's current analyses that has none of
    ``detector.version`` yet. Idempotent: a second call finds nothing missing."""
    runstore.get_run(conn, run_id)  # RunNotFound names the run
    config: NormalisedConfig = runstore.run_config(conn, run_id)
    brand_set = BrandSet.from_config(config)
    summary = RestanceSummary(run_id, detector.version)
    with conn.cursor() as cur:
        cur.execute(Q("stance.missing"), {"run_id": run_id, "stance_version": detector.version})
        todo = cur.fetchall()
    conn.commit()
    for i in range(0, len(todo), chunk_size):
        rows: list[tuple[Any, ...]] = []
        for r in todo[i : i + chunk_size]:
            wanted = set(r["brands"])
            spans = {
                b: v
                for b, v in mention_spans(r["raw_text"], brand_set, r["question"]).items()
                if b in wanted
            }
            for ms in detector.detect(r["raw_text"], spans).values():
                rows.append(
                    (r["sample_id"], r["detector_version"], r["answer_revision"], ms.brand,
                     detector.version, ms.stance, list(ms.attributes))
                )  # fmt: skip
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(Q("stance.copy")) as copy:  # type: ignore[arg-type]
                for row in rows:
                    copy.write_row(row)
        summary.answers += min(chunk_size, len(todo) - i)
        summary.stances += len(rows)
    return summary
