"""One truth for trends and changes (issue 39): analytics.brand_changes and analytics.brand_trends
now read rows the refresh stores per monitor x channel x brand x day
(sql/migrations/0049_brand_rollup.sql) instead of recomputing the monitor's whole history on each
query. The stored rows must be the numbers the views returned before: each test builds the views
exactly as the schema defined them before 0049 (their definitions read from a database migrated
up to 0048) and compares every row and column on the same data -- planted out of order, with
gaps, a day rewritten and a day deleted, each followed by the refresh's rollup step; and through
the product's own path, runs analysed out of order (analyse_run -> refresh_analytics)."""

from __future__ import annotations

import math
import random
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from geo_pipeline.analysis import analyse_run
from geo_pipeline.store import migrate
from geo_pipeline_tests.fixtures.postgres import create_database, drop_database
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

FIRST_ROLLUP_MIGRATION = 49
CHANGES_KEY = "monitor_id, scheduled_for, comparison, channel, brand"
TRENDS_KEY = "monitor_id, scheduled_for, channel, brand"


@pytest.fixture(scope="module")
def old_views(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The definitions of analytics.brand_changes and analytics.brand_trends as the migrations
    before 0049 left them (pg_get_viewdef of a database migrated up to 0048)."""
    folder = tmp_path_factory.mktemp("migrations-0048")
    for mig in migrate.migrations():
        if mig.version < FIRST_ROLLUP_MIGRATION:
            shutil.copy(mig.path, folder / mig.path.name)
    name = f"geo_before_rollup_{uuid.uuid4().hex[:8]}"
    url = create_database(pg_admin_url, name)
    try:
        with psycopg.connect(url) as conn:
            migrate.upgrade(conn, Path(folder))
            return {
                v: conn.execute(  # type: ignore[index]
                    "SELECT pg_get_viewdef(%s::regclass)", (f"analytics.{v}",)
                ).fetchone()[0]
                for v in ("brand_changes", "brand_trends")
            }
    finally:
        drop_database(pg_admin_url, name)


@pytest.fixture
def reference(db: Any, old_views: dict[str, str]) -> Iterator[None]:
    """pg_temp.old_brand_changes / old_brand_trends: the old views, over this database's rows."""
    db.execute(f"CREATE TEMP VIEW old_brand_changes AS {old_views['brand_changes']}")
    trends = old_views["brand_trends"].replace(
        "FROM analytics.brand_changes", "FROM old_brand_changes brand_changes"
    )
    assert trends != old_views["brand_trends"]
    db.execute(f"CREATE TEMP VIEW old_brand_trends AS {trends}")
    db.commit()
    yield


def _same(db: Any, new: str, old: str, key: str) -> int:
    """Assert the two relations hold the same rows (floats to 1e-12 relative: a sum's last bit
    depends on the order a plan adds its rows in, for the old view too); returns the count."""
    got = db.execute(f"SELECT * FROM {new} ORDER BY {key}").fetchall()
    want = db.execute(f"SELECT * FROM {old} ORDER BY {key}").fetchall()
    db.commit()
    assert [list(r) for r in got] == [list(r) for r in want]  # same keys and column names
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        for col, value in w.items():
            if isinstance(value, float) and isinstance(g[col], float):
                assert math.isclose(g[col], value, rel_tol=1e-12, abs_tol=1e-15), (col, g, w)
            else:
                assert g[col] == value, (col, g, w)
    return len(got)


def _plant(db: Any, monitor: str, day: date, rng: random.Random, shift: float) -> None:
    """One day of a monitor as the refresh writes it: brand_metrics per channel x question x
    brand, channel_brand_metrics per channel x brand. Channel 'c2' skips days 10-24 (its next
    day-over-day reaches back over the gap); brand 'b2' has n = 0 on every fifth day."""
    offset = (day - date(2026, 1, 1)).days
    rows = []
    for channel in ("c1", "c2"):
        if channel == "c2" and 10 <= offset <= 24:
            continue
        for q in range(3):
            for b, base in (("b0", 0.5), ("b1", 0.3), ("b2", 0.2)):
                n = 0 if b == "b2" and offset % 5 == 0 else 8 + q
                rate = min(1.0, base + (shift if b == "b0" else 0.0) + 0.1 * q)
                x = sum(rng.random() < rate for _ in range(n))
                rows.append((channel, q, b, n, x))
    run_id = f"r-{monitor}-{day:%Y%m%d}"
    for channel, q, b, n, x in rows:
        db.execute(
            "INSERT INTO analytics.brand_metrics (run_id, tenant_id, monitor_id, scheduled_for,"
            " channel, platform, device, region, mode, question_revision, question_index, brand,"
            " is_target, samples, valid_samples, invalid_samples, analysing_samples,"
            " review_samples, n, mentions, mention_rate, domain_cited, domain_retrieved)"
            " VALUES (%s, 'acme', %s, %s, %s, 'p', 'web', 'cn', 'standard', %s, %s, %s, %s,"
            " %s, %s, 0, 0, 0, %s, %s, %s, 0, 0)",
            (run_id, monitor, day, channel, f"q{q}", q, b, b == "b0", n, n, n, x,
             x / n if n else None),
        )  # fmt: skip
    db.execute(
        "INSERT INTO analytics.channel_brand_metrics (run_id, tenant_id, monitor_id,"
        " scheduled_for, channel, platform, brand, is_target, samples, valid_samples,"
        " invalid_samples, analysing_samples, review_samples, n, mentions, domain_cited)"
        " SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand,"
        " bool_or(is_target), sum(samples), sum(valid_samples), 0, 0, 0, sum(n), sum(mentions), 0"
        " FROM analytics.brand_metrics WHERE run_id = %s"
        " GROUP BY run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand",
        (run_id,),
    )


def _drop_day(db: Any, monitor: str, day: date) -> None:
    for table in ("brand_metrics", "channel_brand_metrics"):
        db.execute(
            f"DELETE FROM analytics.{table} WHERE monitor_id = %s AND scheduled_for = %s",
            (monitor, day),
        )


def _refresh(db: Any, monitor: str, day: date) -> None:
    """The rollup step of refresh_analytics for a run of (monitor, day)."""
    db.execute("SELECT analytics.refresh_brand_rollup(%s, %s)", (monitor, day))
    db.commit()


def test_stored_rows_equal_the_old_views_on_a_history_planted_out_of_order(db, reference):
    rng = random.Random(39)
    first = date(2026, 1, 1)
    days = [first + timedelta(days=d) for d in range(40)]
    order = days[:]
    rng.shuffle(order)
    for monitor in ("m-a", "m-b"):
        for day in order:
            # b0 jumps 25 points from day 20: changes to flag
            shift = 0.25 if (day - first).days >= 20 else 0.0
            _plant(db, monitor, day, rng, shift)
            _refresh(db, monitor, day)
    # a day re-analysed with other numbers, and a day whose runs are gone
    _drop_day(db, "m-a", days[12])
    _plant(db, "m-a", days[12], rng, 0.3)
    _refresh(db, "m-a", days[12])
    _drop_day(db, "m-a", days[30])
    _refresh(db, "m-a", days[30])

    changes = _same(db, "analytics.brand_changes", "old_brand_changes", CHANGES_KEY)
    trends = _same(db, "analytics.brand_trends", "old_brand_trends", TRENDS_KEY)
    flagged = db.execute("SELECT count(*) AS n FROM analytics.brand_changes WHERE flagged")
    assert flagged.fetchone()["n"] > 0  # the comparison covers flags and q-values too
    gap = db.execute(
        "SELECT count(*) AS n FROM analytics.brand_changes WHERE comparison = 'day_over_day'"
        " AND scheduled_for - prev_from > 1"
    ).fetchone()["n"]
    assert gap > 0  # and day-over-day comparisons across a gap
    assert changes > 300 and trends > 300, (changes, trends)
    db.commit()


def test_runs_analysed_out_of_order_leave_the_rows_the_old_views_return(db, reference):
    """Through the product's path: each run analysed (analyse_run -> refresh_analytics) in the
    order 3, 1, 2."""
    hits = {date(2026, 11, 1): (2, 6), date(2026, 11, 2): (9, 3), date(2026, 11, 3): (8, 5)}
    samples = {}
    for day in (date(2026, 11, 3), date(2026, 11, 1), date(2026, 11, 2)):
        run_id = f"r-m1-{day:%Y%m%d}"
        samples[day] = make_run(
            db,
            run_id,
            questions=["哪个咖啡品牌最好？", "哪家咖啡店性价比高？"],
            channels=[{"platform": "kimi", "device": "web"}],
            repeats=10,
            monitor="m1",
            scheduled_for=day,
        )
        for i, s in enumerate(samples[day]):
            k = hits[day][s["question_index"]]
            store_answer(db, s["sample_id"], "推荐瑞幸。" if i % 10 < k else "推荐星巴克。")
        analyse_run(db, run_id)
    assert _same(db, "analytics.brand_changes", "old_brand_changes", CHANGES_KEY) > 0
    assert _same(db, "analytics.brand_trends", "old_brand_trends", TRENDS_KEY) == 3 * 3


def test_two_refreshes_of_a_monitor_at_once_wait_for_each_other(db, db_url, reference):
    """Two runs of neighbouring days refreshed at once (two Dagster partitions): the second
    rollup step waits for the first transaction, then recomputes with its rows; no key
    collision, and the stored rows are the old views' numbers."""
    rng = random.Random(7)
    first = date(2026, 3, 1)
    for d in range(8):
        _plant(db, "m-c", first + timedelta(days=d), rng, 0.0)
        _refresh(db, "m-c", first + timedelta(days=d))
    day_a, day_b = first + timedelta(days=8), first + timedelta(days=9)
    _plant(db, "m-c", day_a, rng, 0.2)
    _plant(db, "m-c", day_b, rng, 0.2)
    db.commit()
    with psycopg.connect(db_url) as other:
        db.execute("SELECT analytics.refresh_brand_rollup('m-c', %s)", (day_a,))  # open
        done: list[Any] = []

        def second() -> None:
            other.execute("SELECT analytics.refresh_brand_rollup('m-c', %s)", (day_b,))
            other.commit()
            done.append(True)

        thread = threading.Thread(target=second)
        thread.start()
        waiting = 0
        for _ in range(2400):  # until the second one is seen waiting on the monitor's lock
            waiting = db.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND pid = %s",
                (other.info.backend_pid,),
            ).fetchone()["n"]
            if waiting or done:
                break
            time.sleep(0.05)
        assert waiting == 1 and not done
        db.commit()
        thread.join()
    assert done
    _same(db, "analytics.brand_changes", "old_brand_changes", CHANGES_KEY)
    _same(db, "analytics.brand_trends", "old_brand_trends", TRENDS_KEY)
