"""Accepted samples are claimed in the order of their fetch deadline (issue 31; new coverage): a
service keeps a result only so long (cloro 24 h), so a paid result waiting in the queue (after a
deferred poll, a hand-back, a dead worker's lease) is fetched before it expires -- ahead of new
submissions that have waited longer, and the earliest-accepted first. On real PostgreSQL, through
the claim the worker uses (store.execution.claim_fair)."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.retry import Candidate, fair_pick
from geo_pipeline.store import execution as ex
from geo_pipeline_tests.integration.execution.helpers import fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import make_cloro_run

PLATFORM = "chatgpt_cloro"


def test_fair_pick_takes_the_earliest_fetch_deadline_first() -> None:
    cands = [
        Candidate("new-old", "t", 9, 3600.0),  # a new submission, due for an hour, priority 9
        Candidate("acc-late", "t", 1, 0.0, fetch_deadline_s=80_000.0),
        Candidate("acc-soon", "t", 1, 0.0, fetch_deadline_s=600.0),
        Candidate("other-tenant", "u", 5, 10.0),
    ]
    assert fair_pick(cands, {}, 4) == ["acc-soon", "other-tenant", "acc-late", "new-old"]
    assert fair_pick(cands, {"t": 1}, 4) == ["acc-soon", "other-tenant"]


def test_accepted_samples_are_claimed_by_fetch_deadline(db_url, monkeypatch) -> None:
    monkeypatch.setenv("GEO_CLORO_API_KEY", "sim-cloro-key")  # enables the platform; no call
    registry = load_registry()
    ids = make_cloro_run(db_url, registry, "r-deadline", 4)
    accepted = {ids[1]: "3 hours", ids[2]: "1 hour"}
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        # Two new submissions due for a day; two accepted tasks queued again just now.
        conn.execute(
            "UPDATE geo.samples SET next_attempt_at = now() - interval '1 day' "
            "WHERE sample_id = ANY(%s)",
            ([ids[0], ids[3]],),
        )
        for sid, age in accepted.items():
            # planned -> submitting -> accepted, as a worker's send and acceptance would.
            conn.execute(
                "UPDATE geo.samples SET submission_state = 'submitting' WHERE sample_id = %s",
                (sid,),
            )
            conn.execute(
                "UPDATE geo.samples SET submission_state = 'accepted', "
                f"upstream_id = 'task-' || sample_id, accepted_at = now() - interval '{age}', "
                "next_attempt_at = now() WHERE sample_id = %s",
                (sid,),
            )
    retention = {PLATFORM: registry.capabilities()[PLATFORM].result_retention_s}
    assert retention[PLATFORM] == 86400
    order = []
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        for _ in range(4):
            rows = ex.claim_fair(
                conn,  # type: ignore[arg-type]
                owner="worker:test:1",
                platforms=[PLATFORM],
                want=1,
                lease_s=30,
                retention_s=retention,
            )
            order += [r["sample_id"] for r in rows]
    assert order[:2] == [ids[1], ids[2]], order  # the result that expires first, first
    assert set(order) == set(ids)
    running = fetch(
        db_url, "SELECT count(*) AS n FROM geo.samples WHERE collection_state = 'running'"
    )
    assert running[0]["n"] == 4
