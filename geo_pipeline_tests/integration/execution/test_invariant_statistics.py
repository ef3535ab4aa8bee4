"""The invariant checks run on current planner statistics (issue 30, found in the 1-minute chaos
soak beside ``stress``: the test server runs with autovacuum off, so after the storm no table of
the soak's database had ever been analysed; the planner estimated ~370 of 100,123
state_transitions rows and joined the table to itself in a nested loop for ``no_stale_write``,
which ran for minutes). The checker analyses the database first; this test sees that it does,
whether or not autovacuum would have."""

from __future__ import annotations

import psycopg

from geo_pipeline_tests.integration.execution.helpers import fetch, invariant_violations, make_run

CHANNELS = [{"platform": "kimi", "device": "web"}, {"platform": "openai_sim", "device": "web"}]
PENDING = (
    "SELECT relname, n_mod_since_analyze AS n FROM pg_stat_user_tables "
    "WHERE schemaname = 'geo' AND n_mod_since_analyze > 0 ORDER BY relname"
)


def test_the_invariants_are_checked_on_statistics_that_count_the_rows(db_url: str) -> None:
    make_run(db_url, "r-stats", questions=3, channels=CHANNELS)
    with psycopg.connect(db_url, autocommit=True) as conn:  # as on the test server, for these
        for table in ("samples", "state_transitions"):
            conn.execute(f"ALTER TABLE geo.{table} SET (autovacuum_enabled = false)")  # type: ignore[arg-type]
    before = {r["relname"]: r["n"] for r in fetch(db_url, PENDING)}
    assert before.get("samples", 0) > 0, before
    invariant_violations(db_url)  # (a run just created: its samples are not settled yet)
    after = {r["relname"]: r["n"] for r in fetch(db_url, PENDING)}
    assert after == {}, f"tables changed since their last ANALYZE: {after}"
