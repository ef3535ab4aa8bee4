"""The sweeper re-hints due work per (run, channel, batch), like the planner's batch hints: a
large run whose hints Redis lost gets one outbox row and stream entry per batch and channel,
not one per sample (section 4: Redis carries hints, PostgreSQL decides what is due)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.store import execution as ex
from geo_pipeline.worker.sweeper import SweepSettings, sweep_once
from geo_pipeline_tests.integration.execution.helpers import (
    FakeConnector,
    check_invariants,
    fetch,
    make_run,
    states,
)
from geo_pipeline_tests.integration.execution.test_worker_flow import (
    all_terminal,
    run_worker_until,
)

CHANNELS = [{"platform": "deepseek", "device": "web"}, {"platform": "qwen", "device": "web"}]


def _age_everything(db_url: str, seconds: int = 120) -> None:
    """The planner's hints were published long ago and their stream entries are gone."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE geo.outbox SET created_at = created_at - make_interval(secs => %s), "
            "published_at = coalesce(published_at, now())",
            (seconds,),
        )
        conn.execute(
            "UPDATE geo.samples SET next_attempt_at = next_attempt_at - make_interval(secs => %s)",
            (seconds,),
        )


def _sweep(db_url: str, **settings: Any) -> dict[str, int]:
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        return sweep_once(
            conn,  # type: ignore[arg-type]
            actor="sweeper:t",
            settings=SweepSettings(**settings),
            lookup_platforms=["deepseek", "qwen"],
        )


def _new_hints(db_url: str) -> list[dict[str, Any]]:
    return fetch(
        db_url,
        "SELECT sample_id, run_id, channel, batch_no, stream, payload FROM geo.outbox "
        "WHERE kind = 'collect' AND published_at IS NULL ORDER BY outbox_id",
    )


def test_lost_batch_hints_are_renewed_per_batch_and_channel(db_url):
    # 120 questions x 2 channels = 240 samples; the per-submit cap splits them into batches.
    ids = make_run(db_url, "r-rehint", questions=120, channels=CHANNELS)
    batches = fetch(
        db_url,
        "SELECT DISTINCT batch_no, channel FROM geo.samples WHERE run_id = 'r-rehint'",
    )
    assert len(batches) >= 4  # at least two batches per channel
    _age_everything(db_url)
    got = _sweep(db_url)
    hints = _new_hints(db_url)
    assert len(hints) == len(batches), f"{len(hints)} hint rows for {len(batches)} batches"
    assert all(h["sample_id"] is None for h in hints)
    assert {(h["batch_no"], h["channel"]) for h in hints} == {
        (b["batch_no"], b["channel"]) for b in batches
    }
    assert sum(int(h["payload"]["samples"]) for h in hints) == len(ids)
    assert {h["payload"]["reason"] for h in hints} == {"sweep"}
    assert {h["stream"] for h in hints} == {"collect:deepseek", "collect:qwen"}
    assert got["hinted"] == len(ids)
    # The renewed hints are live: the next pass adds nothing.
    assert _sweep(db_url)["hinted"] == 0
    assert len(_new_hints(db_url)) == len(batches)


def test_rehint_skips_what_has_its_own_live_hint_and_what_may_not_run(db_url):
    ids = make_run(db_url, "r-rehint2", questions=3)
    cancelled = make_run(db_url, "r-rehint-c", questions=3)
    _age_everything(db_url)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        c: Any = conn
        ex.cancel_run(c, "r-rehint-c", actor="operator:ops")
        # One sample of the live run has a fresh hint of its own (its lease expired just now).
        c.execute(
            "INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, payload) "
            "SELECT 'collect:deepseek', 'collect', sample_id, run_id, tenant_id, '{}' "
            "FROM geo.samples WHERE sample_id = %s",
            (ids[0],),
        )
    _sweep(db_url)
    hints = [h for h in _new_hints(db_url) if h["sample_id"] is None]
    assert [(h["run_id"], h["payload"]["samples"]) for h in hints] == [("r-rehint2", 2)]
    assert not any(h["run_id"] == "r-rehint-c" for h in _new_hints(db_url))
    assert cancelled  # the cancelled run's samples were failed, never hinted


def test_worker_finishes_a_run_whose_hints_were_lost(db_url, redis_url, redis_ns):
    """End to end: the planner's hints never reach Redis; the sweeper's batch hints wake the
    worker, which claims and completes every sample."""
    ids = make_run(db_url, "r-lost", questions=20, channels=CHANNELS)
    _age_everything(db_url)  # marks the planner's hints published: nothing reaches Redis
    _sweep(db_url, grace_s=0.0)
    fakes = {"deepseek": FakeConnector("deepseek"), "qwen": FakeConnector("qwen")}
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            fakes,
            all_terminal(db_url),
            idle_claim_s=30.0,  # only a hint wakes the lanes within the test
        )
    )
    assert states(db_url) == {"completed": len(ids)}
    check_invariants(db_url, expected_samples=len(ids))
