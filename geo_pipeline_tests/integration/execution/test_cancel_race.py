"""A cancel that races an attempt ending in a retry (R16, R24): the sample must not go back to
queued/planned, where no claim, sweep or later cancel would touch it. The database decides,
in the finish statement; the sweeper cancels whatever unsubmitted sample of a cancelled run is
left anyway; the run then closes and its reservation is released."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import redis.asyncio as aioredis
from click.testing import CliRunner
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.cli.main import cli
from geo_pipeline.connectors.base import Acceptance, SubmitRequest, TransientError
from geo_pipeline.domain.retry import PollSchedule, RetryPolicy
from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline.worker.runner import Worker, WorkerSettings
from geo_pipeline.worker.sweeper import SweepSettings, sweep_once
from geo_pipeline_tests.integration.execution.helpers import (
    CAPS,
    FakeConnector,
    StallWatch,
    check_invariants,
    fetch,
    make_run,
)
from geo_pipeline_tests.integration.execution.test_worker_flow import relay_all

STALL_S = 60.0
CAP_S = 120.0  # a sample back in the queue would be claimed and retried for ever


def _samples(db_url: str, run_id: str) -> list[dict[str, Any]]:
    return fetch(
        db_url,
        "SELECT sample_id, submission_state, collection_state, collection_reason "
        "FROM geo.samples WHERE run_id = %s ORDER BY sample_id",
        (run_id,),
    )


def _assert_closes(db_url: str, run_id: str) -> None:
    """Every sample terminal, one completion event each, and the run closes: the reservation
    left over is released (nothing was charged, so all of it)."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        before = ledger.run_ledger(conn, run_id)  # type: ignore[arg-type]
        closed = ledger.close_run(conn, run_id)  # type: ignore[arg-type]
        conn.commit()
    assert closed.closed_now
    assert before["totals"]["charged_minor"] == 0
    assert closed.released.amount_minor == before["totals"]["reservation_left_minor"] > 0
    run = fetch(db_url, "SELECT closed_at FROM geo.runs WHERE run_id = %s", (run_id,))[0]
    assert run["closed_at"] is not None


def test_retry_finishing_after_cancel_fails_cancelled_in_the_database(db_url):
    """The race, step by step with the store functions: claimed, then cancelled (the worker has
    not renewed yet, so it does not know), then the attempt ends in a retry."""
    ids = make_run(db_url, "r-race", questions=3)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        c: Any = conn
        rows = ex.claim_ids(c, ids, owner="worker:w:1", lease_s=30)
        assert len(rows) == 3
        out = ex.cancel_run(c, "r-race", actor="operator:ops")
        assert out["cancelled_locally"] == 0  # all three are in flight
        tokens = {r["sample_id"]: r["fencing_token"] for r in rows}
        res = complete.finish_batch(
            c,
            owner="worker:w:1",
            items=[
                # the submit failed with a retryable error
                complete.Finish(ids[0], tokens[ids[0]], "queued", sub_to="planned", reason="transient",
                          delay_s=0.0, outcome="not_accepted", error_class="transient",
                          req_state="not_accepted"),
                # a lookup found nothing: abandon the attempt, retry now
                complete.Finish(ids[1], tokens[ids[1]], "queued", sub_to="planned",
                          reason="lookup:absent", outcome="not_accepted",
                          req_state="not_accepted"),
                # handed back still submitting (may have reached upstream): not cancelled here
                complete.Finish(ids[2], tokens[ids[2]], "queued", reason="drain"),
            ],
        )  # fmt: skip
    assert res.done == {ids[0]: "failed", ids[1]: "failed", ids[2]: "queued"}
    got = {r["sample_id"]: r for r in _samples(db_url, "r-race")}
    for sid in ids[:2]:
        assert got[sid]["collection_reason"] == "CANCELLED"
        assert got[sid]["submission_state"] == "planned"
    # The attempt keeps its own outcome and error; only the sample's end is the cancel.
    att = fetch(db_url, "SELECT outcome, error_class FROM geo.attempts WHERE sample_id = %s",
                (ids[0],))  # fmt: skip
    assert att == [{"outcome": "not_accepted", "error_class": "transient"}]
    assert got[ids[2]]["submission_state"] == "submitting"
    check_invariants(db_url, expected_samples=3)
    # What the cancel could not decide was listed for the operator.
    assert sorted(s["sample_id"] for s in out.get("submitting", [])) == sorted(ids)


class GatedConnector(FakeConnector):
    """Each submit waits for the test's signal, then fails with a retryable error: the worker
    is inside the call when the run is cancelled, and the attempt ends in a retry."""

    def __init__(self, platform: str) -> None:
        super().__init__(platform)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def submit(self, request: SubmitRequest) -> Acceptance:
        self.submits[request.idempotency_key] += 1
        self.entered.set()
        await self.release.wait()
        raise TransientError("503 after the cancel", status=503)


async def _race_with_worker(db_url: str, redis_url: str, ns: str, run_id: str) -> dict[str, Any]:
    fake = GatedConnector("deepseek")
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    worker = Worker(
        WorkerSettings(
            platforms=["deepseek"],
            worker_id="worker:race:1",
            lease_s=60.0,  # no renewal inside the test: the worker never hears of the cancel
            poll=PollSchedule(first_s=0.01, min_s=0.02, ratio=0.5, max_s=0.2),
            retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.2),
            flush_s=0.002,
            idle_claim_s=0.2,
        ),
        db_url=db_url,
        redis=redis,
        ns=ns,
        capabilities=CAPS,
        connectors={"deepseek": fake},
    )
    task = asyncio.create_task(worker.run())
    out: dict[str, Any] = {}
    try:
        relay_all(db_url, redis_url, ns)
        # Waits bounded by the run's progress, not the clock (fixed 15 s and 5 s bounds were
        # speeds): nothing here waits longer than the retry's 0.2 s, so STALL_S without a
        # sample or the transition log changing is a hang.
        watch = StallWatch(db_url, stall_s=STALL_S, cap_s=CAP_S)
        while not fake.entered.is_set():
            if not await asyncio.to_thread(watch.moving):
                rows = await asyncio.to_thread(_samples, db_url, run_id)
                raise AssertionError(f"the worker never entered submit: {rows}")
            await asyncio.sleep(0.05)

        def cancel() -> dict[str, Any]:
            with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
                return ex.cancel_run(conn, run_id, actor="operator:ops")  # type: ignore[arg-type]

        out = await asyncio.to_thread(cancel)
        fake.release.set()
        watch = StallWatch(db_url, stall_s=STALL_S, cap_s=CAP_S)
        while await asyncio.to_thread(watch.moving):
            rows = await asyncio.to_thread(_samples, db_url, run_id)
            if all(r["collection_state"] in ("completed", "failed") for r in rows):
                break
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await task
        await redis.aclose()
    out["submits"] = sum(fake.submits.values())
    return out


def test_real_worker_retry_after_cancel_ends_the_sample(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-race-w", questions=1)
    out = asyncio.run(_race_with_worker(db_url, redis_url, redis_ns, "r-race-w"))
    assert out["submits"] == 1
    rows = _samples(db_url, "r-race-w")
    assert [(r["collection_state"], r["collection_reason"]) for r in rows] == [
        ("failed", "CANCELLED")
    ], rows
    assert [s["sample_id"] for s in out.get("submitting", [])] == ids
    check_invariants(db_url, expected_samples=1)
    _assert_closes(db_url, "r-race-w")


def test_sweeper_cancels_unsubmitted_samples_left_on_a_cancelled_run(db_url):
    """The safety net: an uncertain sample of a cancelled run that an operator resolves as
    never accepted goes back to planned; the next sweep fails it CANCELLED."""
    ids = make_run(db_url, "r-net", questions=2)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        c: Any = conn
        row = ex.claim_ids(c, ids[:1], owner="worker:w:1", lease_s=30)[0]
        complete.finish_batch(
            c,
            owner="worker:w:1",
            items=[complete.Finish(ids[0], row["fencing_token"], "queued", sub_to="uncertain",
                             reason="acceptance_unknown:no_lookup", delay_s=3600,
                             outcome="uncertain", req_state="uncertain")],
        )  # fmt: skip
        out = ex.cancel_run(c, "r-net", actor="operator:ops")
        assert out["cancelled_locally"] == 1 and out.get("submitting", []) == []
        ex.resolve_uncertain(c, ids[0], accepted_upstream_id=None, note="console: none",
                             actor="operator:ops")  # fmt: skip
        left = {r["sample_id"]: r for r in _samples(db_url, "r-net")}[ids[0]]
        assert (left["collection_state"], left["submission_state"]) == ("queued", "planned")
        got = sweep_once(c, actor="sweeper:t", settings=SweepSettings(), lookup_platforms=[])
        rows = _samples(db_url, "r-net")
        assert {(r["collection_state"], r["collection_reason"]) for r in rows} == {
            ("failed", "CANCELLED")
        }, rows
        assert got.get("cancelled") == 1
        again = sweep_once(c, actor="sweeper:t", settings=SweepSettings(), lookup_platforms=[])
        assert again.get("cancelled") == 0
    actors = fetch(
        db_url,
        "SELECT actor FROM geo.state_transitions WHERE sample_id = %s AND layer = 'collection' "
        "AND to_state = 'failed'",
        (ids[0],),
    )
    assert [a["actor"] for a in actors] == ["sweeper:t"]
    check_invariants(db_url, expected_samples=2)
    _assert_closes(db_url, "r-net")


def test_cancel_output_lists_submitting_samples(db_url):
    ids = make_run(db_url, "r-cli-sub", questions=3)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        ex.claim_ids(conn, ids[:1], owner="worker:w:1", lease_s=30)  # type: ignore[arg-type]
    env = {"GEO_DATABASE_URL": db_url}
    res = CliRunner().invoke(cli, ["runs", "cancel", "r-cli-sub", "--json"], env=env)
    assert res.exit_code == 0, res.output
    body = json.loads(res.output)
    assert body["cancelled_locally"] == 2
    assert [s["sample_id"] for s in body["submitting"]] == ids[:1]
    assert body["submitting"][0]["lease_owner"] == "worker:w:1"
    res = CliRunner().invoke(cli, ["runs", "cancel", "r-cli-sub"], env=env)
    assert res.exit_code == 0, res.output
    assert "1 samples in flight" in res.output and ids[0] in res.output
