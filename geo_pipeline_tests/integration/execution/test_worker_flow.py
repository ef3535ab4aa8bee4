"""The execution core end to end on real PostgreSQL and Redis, with an in-test connector:
outbox -> relay -> stream -> fair claim -> submit -> poll -> evidence -> fenced completion ->
completion stream (R8-R15)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import psycopg
import pytest
import redis as redis_lib
import redis.asyncio as aioredis
from psycopg.rows import dict_row

from geo_pipeline.domain.retry import PollSchedule, RetryPolicy
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline.streams.keys import COMPLETIONS, stream_key
from geo_pipeline.streams.relay import relay_once
from geo_pipeline.worker.runner import Worker, WorkerSettings
from geo_pipeline.worker.sweeper import SweepSettings, sweep_once
from geo_pipeline_tests.integration.execution.helpers import (
    CAPS,
    FakeConnector,
    StallWatch,
    check_invariants,
    fetch,
    make_run,
    states,
)


def relay_all(db_url: str, redis_url: str, ns: str) -> int:
    r = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    total = 0
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        while n := relay_once(conn, r, ns):  # type: ignore[arg-type]
            total += n
    r.close()
    return total


async def run_worker_until(
    db_url: str,
    redis_url: str,
    ns: str,
    connectors: dict[str, Any],
    done: Any,
    timeout_s: float = 30.0,
    archive: Any = None,
    capabilities: Any = None,
    **settings: Any,
) -> dict[str, int]:
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    s = WorkerSettings(
        platforms=list(connectors),
        worker_id="worker:test:1",
        **{
            "poll": PollSchedule(first_s=0.01, min_s=0.02, ratio=0.5, max_s=0.2),
            "retry": RetryPolicy(base_delay_s=0.05, max_delay_s=0.2),
            "flush_s": 0.002,
            "idle_claim_s": 0.2,
            **settings,  # a test's own settings win
        },
    )
    worker = Worker(
        s,
        db_url=db_url,
        redis=redis,
        ns=ns,
        capabilities=capabilities or CAPS,
        connectors=connectors,
        archive=archive,
    )
    task = asyncio.create_task(worker.run())
    # timeout_s is seconds WITHOUT progress (a sample changing state, a transition logged), not
    # the run's length: a fixed bound ran out on a loaded CI box while the run still moved.
    watch = StallWatch(db_url, stall_s=timeout_s)
    try:
        while not await asyncio.to_thread(done) and await asyncio.to_thread(watch.moving):
            relay_all(db_url, redis_url, ns)
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        report = await task
        await redis.aclose()
    return report


def all_terminal(db_url: str) -> Any:
    return lambda: set(states(db_url)) <= {"completed", "failed"}


def test_run_completes_end_to_end_with_one_event_per_sample(db_url, redis_url, redis_ns, tmp_path):
    ids = make_run(
        db_url,
        "r-flow",
        questions=10,
        repeats=2,
        channels=[{"platform": "deepseek", "device": "web"}, {"platform": "qwen", "device": "web"}],
    )
    fakes = {"deepseek": FakeConnector("deepseek"), "qwen": FakeConnector("qwen", latency_s=0.1)}
    report = asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            fakes,
            all_terminal(db_url),
            archive=LocalArchive(str(tmp_path / "evidence")),
        )
    )
    relay_all(db_url, redis_url, redis_ns)
    assert states(db_url) == {"completed": len(ids)}
    assert report["completed"] == len(ids)
    check_invariants(db_url, expected_samples=len(ids))
    # Never submitted twice for one attempt.
    for f in fakes.values():
        assert f.submits and max(f.submits.values()) == 1
    # The completion stream carries exactly the sensor's fields, one entry per sample.
    r = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    entries = r.xrange(stream_key(redis_ns, COMPLETIONS))
    r.close()
    assert sorted(e[1]["sample_id"] for e in entries) == sorted(ids)
    assert set(entries[0][1]) == {"event_id", "sample_id", "run_id", "channel", "collection_state"}
    # Evidence is recorded inside the completion transaction (archive given => stored).
    log = fetch(
        db_url,
        "SELECT DISTINCT actor FROM geo.state_transitions WHERE layer = 'collection'",
    )
    assert {r["actor"] for r in log} == {"worker:test:1"}
    ev = fetch(db_url, "SELECT evidence_state, count(*) AS n FROM geo.samples GROUP BY 1")
    assert {r["evidence_state"]: r["n"] for r in ev} == {"stored": len(ids)}
    answers = fetch(db_url, "SELECT count(*) AS n FROM geo.answers")[0]["n"]
    assert answers == len(ids)


def test_rate_limits_and_transient_errors_retry_as_new_attempts(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-retry", questions=6)
    fake = FakeConnector("deepseek", rate_limit_first=4, transient_first=2)
    asyncio.run(
        run_worker_until(db_url, redis_url, redis_ns, {"deepseek": fake}, all_terminal(db_url))
    )
    assert states(db_url) == {"completed": len(ids)}
    check_invariants(db_url, expected_samples=len(ids))
    assert max(fake.submits.values()) == 1  # each retry used a new idempotency key
    rows = fetch(
        db_url,
        "SELECT error_class, outcome, count(*) AS n FROM geo.attempts GROUP BY 1, 2 ORDER BY 1",
    )
    got = {(r["error_class"], r["outcome"]): r["n"] for r in rows}
    assert got[("rate_limited", "not_accepted")] == 4
    assert got[("transient", "not_accepted")] == 2
    assert got[(None, "completed")] == len(ids)
    # Repeats and retries are different numbers (R15): retries live in attempt_no only.
    assert fetch(db_url, "SELECT max(repeat_index) AS m FROM geo.samples")[0]["m"] == 0


def test_no_lookup_platform_goes_uncertain_and_operator_resolves(db_url, redis_url, redis_ns):
    """A crash between send and record on a platform without lookup: uncertain, never re-sent;
    an operator verdict moves it on as a guarded transition (R12)."""
    ids = make_run(db_url, "r-unc", questions=1)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        rows = ex.claim_ids(conn, ids, owner="worker:dead:1", lease_s=0.1)  # type: ignore[arg-type]
        assert rows and rows[0]["submission_state"] == "submitting"
        # It got as far as the send (marked in the record), then died.
        held = [(rows[0]["sample_id"], rows[0]["fencing_token"])]
        assert ex.mark_sent(conn, owner="worker:dead:1", held=held)  # type: ignore[arg-type]
    time.sleep(0.2)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        assert (
            sweep_once(
                conn,  # type: ignore[arg-type]
                actor="sweeper:test",
                settings=SweepSettings(grace_s=0, hint_ttl_s=0),
                lookup_platforms=[],
            )["expired"]
            == 1
        )
    fake = FakeConnector("deepseek", lookup=False)
    # Neither a lookup nor safe re-sends (no idempotency keys): only an operator can tell.
    caps = {
        **CAPS,
        "deepseek": dataclasses.replace(
            CAPS["deepseek"], lookup_by_key=False, idempotency_keys=False
        ),
    }
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            lambda: (
                fetch(db_url, "SELECT submission_state FROM geo.samples")[0]["submission_state"]
                == "uncertain"
            ),
            timeout_s=10,
            capabilities=caps,
        )
    )
    assert sum(fake.submits.values()) == 0  # never blindly re-submitted
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        listed = ex.list_uncertain(conn)  # type: ignore[arg-type]
        assert [r["sample_id"] for r in listed] == ids
        assert listed[0]["idempotency_key"] == f"{ids[0]}:1"
        verdict = ex.resolve_uncertain(
            conn,  # type: ignore[arg-type]
            ids[0],
            accepted_upstream_id=None,
            note="checked the console",
            actor="operator:ops",
        )
        assert verdict == "not_accepted"
        with pytest.raises(ex.NotUncertain):
            ex.resolve_uncertain(
                conn,
                ids[0],
                accepted_upstream_id="x",
                note=None,
                actor="operator:ops",  # type: ignore[arg-type]
            )
    asyncio.run(
        run_worker_until(db_url, redis_url, redis_ns, {"deepseek": fake}, all_terminal(db_url))
    )
    assert states(db_url) == {"completed": 1}
    assert dict(fake.submits) == {f"{ids[0]}:2": 1}  # the next attempt has a new key
    log = fetch(
        db_url,
        "SELECT actor FROM geo.state_transitions WHERE layer = 'submission' "
        "AND from_state = 'uncertain'",
    )
    assert [r["actor"] for r in log] == ["operator:ops"]
    check_invariants(db_url, expected_samples=1)


def test_stale_token_writes_nothing(db_url):
    ids = make_run(db_url, "r-stale", questions=1)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        c: Any = conn
        first = ex.claim_ids(c, ids, owner="worker:a:1", lease_s=0.05)[0]
        time.sleep(0.1)
        ex.sweep_expired(c, actor="sweeper:t")
        second = ex.claim_ids(c, ids, owner="worker:b:2", lease_s=30)[0]
        assert second["fencing_token"] == first["fencing_token"] + 1
        res = complete.finish_batch(
            c,
            owner="worker:a:1",
            items=[complete.Finish(ids[0], first["fencing_token"], "failed", reason="late")],
        )
        assert res.stale == ids and not res.done
        assert (
            ex.record_acceptances(
                c,
                owner="worker:a:1",
                items=[ex.AcceptanceRecord(ids[0], first["fencing_token"], "u1")],
            )
            == set()
        )
        row = c.execute("SELECT * FROM geo.samples").fetchone()
        assert row["collection_state"] == "running" and row["lease_owner"] == "worker:b:2"


def test_cancel_stops_new_submissions_without_refund(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-cancel", questions=4)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        out = ex.cancel_run(conn, "r-cancel", actor="operator:ops")  # type: ignore[arg-type]
    assert out["cancelled_locally"] == len(ids)
    fake = FakeConnector("deepseek")
    asyncio.run(
        run_worker_until(
            db_url, redis_url, redis_ns, {"deepseek": fake}, lambda: False, timeout_s=1.0
        )
    )
    assert sum(fake.submits.values()) == 0
    assert states(db_url) == {"failed": len(ids)}
    assert (
        fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'refund'")[0]["n"]
        == 0
    )
    check_invariants(db_url, expected_samples=len(ids))


class _ResultNeverReady(FakeConnector):
    """Accepts and reports the task completed, but its result can never be fetched."""

    def __init__(self, platform: str) -> None:
        super().__init__(platform)
        self.fetches = 0

    async def fetch_evidence(self, upstream_id: str, request: Any) -> Any:
        from geo_pipeline.connectors.base import TransientError

        self.fetches += 1
        raise TransientError("503 result store down", status=503)


def test_unfetchable_result_stops_at_the_total_time_budget(db_url, redis_url, redis_ns):
    """R13: an accepted task whose result keeps failing to download is re-queued (never
    re-submitted) until max_total_s since acceptance, then fails with the upstream id kept and
    no charge."""
    ids = make_run(db_url, "r-fetch-budget", questions=2)
    fake = _ResultNeverReady("deepseek")
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            all_terminal(db_url),
            timeout_s=30,
            retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, max_total_s=1.5),
        )
    )
    rows = fetch(
        db_url,
        "SELECT collection_state, collection_reason, submission_state, upstream_id "
        "FROM geo.samples",
    )
    assert len(rows) == len(ids)
    for r in rows:
        assert r["collection_state"] == "failed"
        assert r["collection_reason"] == "fetch:transient:budget_exhausted"
        assert r["submission_state"] == "accepted" and r["upstream_id"]
    assert max(fake.submits.values()) == 1  # followed, never submitted again
    assert fake.fetches > len(ids)  # it did retry the download before giving up
    charges = fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge'")
    assert charges[0]["n"] == 0
    check_invariants(db_url, expected_samples=len(ids))


def test_acceptance_is_written_with_the_completion_when_it_comes_first(db_url, redis_url, redis_ns):
    """An acceptance on a platform with lookup is folded into the completion write when the
    answer arrives within accept_defer_s: the log still shows submitting -> accepted, the
    acceptance record is 'accepted' with the upstream id, and no separate write happened."""
    ids = make_run(db_url, "r-fold", questions=5)
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": FakeConnector("deepseek")},
            all_terminal(db_url),
            accept_defer_s=30.0,
        )
    )
    assert states(db_url) == {"completed": len(ids)}
    reqs = fetch(
        db_url,
        "SELECT u.state, u.upstream_id = s.upstream_id AS same, s.accepted_at = s.completed_at "
        "AS together FROM geo.upstream_requests u JOIN geo.samples s USING (sample_id)",
    )
    assert len(reqs) == len(ids)
    assert all(r["state"] == "accepted" and r["same"] and r["together"] for r in reqs)
    log = fetch(
        db_url,
        "SELECT from_state, to_state, count(*) AS n FROM geo.state_transitions "
        "WHERE layer = 'submission' GROUP BY 1, 2",
    )
    assert {(r["from_state"], r["to_state"]): r["n"] for r in log} == {
        ("planned", "submitting"): len(ids),
        ("submitting", "accepted"): len(ids),
    }
    check_invariants(db_url, expected_samples=len(ids))


def test_undispatched_channel_is_never_claimed_until_dispatched(db_url, redis_url, redis_ns):
    """A confirmed run whose partitions were not dispatched (the Dagster sampling_plan checks
    them first) is left alone by workers and the sweeper; dispatching one channel releases that
    channel only. Meanwhile a dispatched run behind it is worked on (nothing hides it)."""
    from geo_pipeline.store import runs as runstore

    channels = [
        {"platform": "deepseek", "device": "web"},
        {"platform": "deepseek", "device": "app"},
    ]
    held = make_run(db_url, "r-held", questions=4, channels=channels, dispatch=False)
    free = make_run(db_url, "r-free", questions=3)
    fake = FakeConnector("deepseek")

    def free_done() -> bool:
        rows = fetch(
            db_url,
            "SELECT count(*) AS n FROM geo.samples WHERE run_id = 'r-free' "
            "AND collection_state = 'completed'",
        )
        return rows[0]["n"] == len(free)

    asyncio.run(run_worker_until(db_url, redis_url, redis_ns, {"deepseek": fake}, free_done))
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        swept = sweep_once(
            conn,  # type: ignore[arg-type]
            actor="sweeper:test",
            settings=SweepSettings(grace_s=0.0),
            lookup_platforms=["deepseek"],
        )
    assert swept["hinted"] == 0  # the sweeper does not hint what was never dispatched
    untouched = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.samples WHERE run_id = 'r-held' "
        "AND collection_state = 'queued' AND attempt_no = 0",
    )
    assert untouched[0]["n"] == len(held)
    assert not any(k.split(":")[0] in held for k in fake.submits)
    # Dispatch one channel: only its samples are worked on.
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        covered = runstore.dispatch(conn, "r-held", "deepseek__web")  # type: ignore[arg-type]
        conn.commit()
    assert covered == 4

    def web_done() -> bool:
        rows = fetch(
            db_url,
            "SELECT channel, collection_state, count(*) AS n FROM geo.samples "
            "WHERE run_id = 'r-held' GROUP BY 1, 2",
        )
        got = {(r["channel"], r["collection_state"]): r["n"] for r in rows}
        return got.get(("deepseek__web", "completed")) == 4

    asyncio.run(run_worker_until(db_url, redis_url, redis_ns, {"deepseek": fake}, web_done))
    rows = fetch(
        db_url,
        "SELECT channel, collection_state, count(*) AS n FROM geo.samples "
        "WHERE run_id = 'r-held' GROUP BY 1, 2",
    )
    assert {(r["channel"], r["collection_state"]): r["n"] for r in rows} == {
        ("deepseek__web", "completed"): 4,
        ("deepseek__app", "queued"): 4,
    }
