"""Retention of a day's runs over a history of days (issue 39): the pass that expires the newest
day's run, after every older day's was expired by earlier passes, should cost that day's rows,
not the history's. Counted by PostgreSQL (rows and index entries read, buffers), never a clock:
3 -> 30 days of daily 200-sample runs.

Seen failing before sql/migrations/0057_runs_unexpired.sql (with the history vacuumed as autovacuum
leaves it, 3 -> 30 days: 2,075 -> 5,885 buffers, 5,659 -> 16,128 rows): the due check read every
run, and its "raw text left?" and "log left?" tests were answered by one hashed pass over every
sample (and a scan of the whole transition log) when the planner guessed few matches. Now the
unmarked runs come through runs_unexpired and each run's samples are probed one by one.

Seen failing before sql/migrations/0050_run_retention_marks.sql (3 -> 30 days: 8,407 -> 38,439
rows read): ops.retention_due_runs checked every run past its window on every pass, and for a run
already expired its EXISTS tests read all of that run's samples before finding nothing. Now the
pass marks a window it left nothing of (runs.raw_expired_at / log_expired_at) and skips it after.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from geo_pipeline.evidence.archive import LocalArchive
from geo_pipeline.flows import retention
from geo_pipeline_tests.scale_data import completed_run, counted, quiet_autovacuum

BASE = datetime(2026, 1, 1, 12, tzinfo=UTC)
WINDOW = timedelta(days=30)  # the tenants' default retention_days


def _history(db: Any, tenant: str, days: int) -> None:
    for d in range(days):
        run_id = f"ret-{tenant}-{d:03d}"
        completed_run(db, run_id, 200, tenant=tenant)
        db.execute(
            "UPDATE geo.runs SET created_at = %s WHERE run_id = %s",
            (BASE + timedelta(days=d), run_id),
        )
    db.commit()


def _vacuum(db: Any) -> None:
    """As autovacuum leaves a table between passes: no dead row versions nor stale index entries
    (the history's runs moved through their states), statistics current."""
    db.commit()
    db.autocommit = True
    try:
        db.execute("VACUUM ANALYZE")
    finally:
        db.autocommit = False


def _last_day_pass(db: Any, archive: LocalArchive, tenant: str, days: int) -> Any:
    """Expire every day but the last (earlier passes), then count the pass that expires it."""
    last = BASE + timedelta(days=days - 1)
    first = retention.apply_retention(db, archive, last + WINDOW - timedelta(hours=1), False)
    assert {r.run_id for r in first.runs} >= {f"ret-{tenant}-{d:03d}" for d in range(days - 1)}
    _vacuum(db)
    with counted(db) as work:
        rep = retention.apply_retention(db, archive, last + WINDOW + timedelta(hours=1), False)
    assert [r.run_id for r in rep.runs] == [f"ret-{tenant}-{days - 1:03d}"]
    assert rep.transitions > 0  # it did expire the day's log
    return work


def test_retention_of_the_last_day_costs_that_day_not_the_history(db: Any, tmp_path: Any) -> None:
    quiet_autovacuum(db)
    archive = LocalArchive(tmp_path / "evidence")
    work = {}
    for tenant, days in (("ret-short", 3), ("ret-long", 30)):
        _history(db, tenant, days)
        work[days] = _last_day_pass(db, archive, tenant, days)
        print(days, work[days])
    # 10x the history (and the short one beside it): the same work but for a few pages of the
    # tables and indexes the history widens (measured 3,423 -> 3,793 buffers, 8,415 -> 4,854
    # rows; before 0057 and the per-sample probes: 2,075 -> 5,885 and 5,659 -> 16,128)
    assert work[30].rows_read <= 1.2 * work[3].rows_read, work
    assert work[30].buffers <= 1.2 * work[3].buffers, work
