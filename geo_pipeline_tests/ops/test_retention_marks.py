"""Retention's per-run marks (sql/migrations/0050_run_retention_marks.sql): a pass marks the
windows of a run it left nothing of, later passes skip them, and new work on the run (anything
that writes a state transition) clears the marks so the next pass expires that work too."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from geo_pipeline.flows import retention
from geo_pipeline_tests.ops.test_retention import _counts, _setup


def _marks(db: Any, run_id: str = "run-ops") -> tuple[Any, Any]:
    row = db.execute(
        "SELECT raw_expired_at, log_expired_at FROM geo.runs WHERE run_id = %s", (run_id,)
    ).fetchone()
    db.rollback()
    return row["raw_expired_at"], row["log_expired_at"]


def test_a_marked_run_is_skipped_until_new_work_reopens_it(db: Any, tmp_path: Any) -> None:
    samples, archive, _ = _setup(db, tmp_path)
    assert _marks(db) == (None, None)
    now = retention.database_now(db) + timedelta(days=31)
    first = retention.apply_retention(db, archive, now, dry_run=False)
    assert [r.run_id for r in first.runs] == ["run-ops"]
    assert _marks(db) == (now, now)  # nothing left of either window
    assert retention.apply_retention(db, archive, now, dry_run=True).runs == []

    # New work on the old run: an attempt, with the transition every state change writes.
    s = samples[0]
    db.execute(
        "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id, outcome) "
        "VALUES (%s, 2, 2, 'w2', 'completed')",
        (s["sample_id"],),
    )
    db.execute(
        "INSERT INTO geo.state_transitions (sample_id, run_id, layer, from_state, to_state,"
        " fencing_token, attempt_no) VALUES (%s, 'run-ops', 'collection', 'failed', 'queued',"
        " 2, 2)",
        (s["sample_id"],),
    )
    db.commit()
    assert _marks(db) == (None, None)  # the transition cleared them

    later = now + timedelta(days=1)
    again = retention.apply_retention(db, archive, later, dry_run=False)
    assert [r.run_id for r in again.runs] == ["run-ops"] and again.attempts == 1
    assert _counts(db)["attempts"] == 0
    assert _marks(db) == (later, later)
