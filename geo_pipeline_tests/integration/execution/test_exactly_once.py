"""Side effects the database cannot fence (docs/design.md section 8): each test drives the real Worker
against real PostgreSQL and Redis into one hole that was found by review, and judges by what the
PLATFORM saw (the connector's own task counts per sample), not only by the database.

Holes covered here: a timed-out submit whose task is registered late (double execution), a
worker paused past its lease that still sends, an upstream id forgotten after a failed write, a
paid synchronous answer lost on hand-back, a failure before the send parked as uncertain, one
worker re-claiming its own expired sample, a drain racing a queued completion, and errors that
never end (a lone completion hitting a database error, a non-connector exception)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
import redis.asyncio as aioredis
from psycopg.rows import dict_row

from geo_pipeline.connectors.base import (
    AcceptanceUnknown,
    Evidence,
    InvalidParams,
    SubmitRequest,
    TransientError,
)
from geo_pipeline.connectors.protocols import SyncProtocolConnector
from geo_pipeline.domain.retry import PollSchedule, RetryPolicy
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline.worker.runner import Worker, WorkerSettings
from geo_pipeline.worker.sweeper import SweepSettings, sweep_once
from geo_pipeline_tests.fixtures.simulator import registry_for
from geo_pipeline_tests.integration.execution.helpers import (
    CAPS,
    FakeConnector,
    StallWatch,
    check_invariants,
    fetch,
    make_run,
    states,
)
from geo_pipeline_tests.integration.execution.test_worker_flow import relay_all

# A platform with neither an idempotency-key lookup nor safe re-sends: what the worker knows it
# must never lose, because nothing upstream can be asked again.
NO_LOOKUP = {
    **CAPS,
    "deepseek": dataclasses.replace(CAPS["deepseek"], lookup_by_key=False, idempotency_keys=False),
}


# Only a run that never stops moving (a livelock) reaches this: a hung one stops at its
# timeout_s without progress. Under the module's hang guard below, with room for two runs.
CAP_S = 120.0


def sweep(db_url: str) -> None:
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        sweep_once(
            conn,  # type: ignore[arg-type]
            actor="sweeper:test",
            settings=SweepSettings(grace_s=0, hint_ttl_s=0.5),
            lookup_platforms=["deepseek"],
        )


async def run_worker(
    db_url: str,
    redis_url: str,
    ns: str,
    connectors: dict[str, Any],
    done: Callable[[], bool],
    *,
    timeout_s: float = 20.0,
    caps: Any = CAPS,
    prepare: Callable[[Worker], None] | None = None,
    stop_when: Callable[[], bool] | None = None,
    sweeper: bool = True,
    worker_id: str = "worker:test:1",
    **settings: Any,
) -> tuple[Worker, dict[str, int]]:
    """One real Worker with the relay and (optionally) the sweeper run by the test loop."""
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    s = WorkerSettings(
        platforms=list(connectors),
        worker_id=worker_id,
        **{
            "poll": PollSchedule(first_s=0.01, min_s=0.02, ratio=0.5, max_s=0.2),
            "retry": RetryPolicy(base_delay_s=0.05, max_delay_s=0.2),
            "flush_s": 0.002,
            "idle_claim_s": 0.2,
            **settings,
        },
    )
    worker = Worker(s, db_url=db_url, redis=redis, ns=ns, capabilities=caps, connectors=connectors)
    if prepare is not None:
        prepare(worker)
    task = asyncio.create_task(worker.run())
    # timeout_s is seconds WITHOUT progress (a sample changing state, a transition logged): a
    # loaded box slows the run down; only a run that stands still that long is given up on.
    watch = StallWatch(db_url, stall_s=timeout_s, cap_s=CAP_S)
    try:
        while not await asyncio.to_thread(done) and await asyncio.to_thread(watch.moving):
            if stop_when is not None and await asyncio.to_thread(stop_when):
                break
            await asyncio.to_thread(relay_all, db_url, redis_url, ns)
            if sweeper:
                await asyncio.to_thread(sweep, db_url)
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        report = await task
        await redis.aclose()
    return worker, report


def terminal(db_url: str) -> Callable[[], bool]:
    return lambda: set(states(db_url)) <= {"completed", "failed"}


def uncertain_moves(db_url: str) -> list[dict[str, Any]]:
    return fetch(
        db_url,
        "SELECT sample_id, reason FROM geo.state_transitions "
        "WHERE layer = 'submission' AND to_state = 'uncertain'",
    )


def tasks_per_sample(fake: FakeConnector) -> Counter[str]:
    return Counter(sid for (_key, _done, sid) in fake.tasks.values())


class LateRegistry(FakeConnector):
    """A platform that takes every first send of a key but answers it with a timeout, and shows
    the task to key lookups only ``register_delay_s`` later (lookups are not linearizable with
    submits, as on real platforms). A re-send of the same key returns the same task at once."""

    def __init__(self, platform: str, register_delay_s: float = 0.5, **kw: Any) -> None:
        super().__init__(platform, **kw)
        self.delay = register_delay_s
        self.visible_at: dict[str, float] = {}

    async def submit(self, request: SubmitRequest):  # type: ignore[no-untyped-def]
        key = request.idempotency_key
        first = key not in self.by_key
        acc = await super().submit(request)
        if first:
            self.visible_at[key] = time.monotonic() + self.delay
            raise AcceptanceUnknown("read timeout after the request was sent")
        return acc

    async def lookup(self, idempotency_key: str):  # type: ignore[no-untyped-def]
        if time.monotonic() < self.visible_at.get(idempotency_key, 0.0):
            return None
        return await super().lookup(idempotency_key)


# --------------------------------------------------------------------------- 1. double execution
def test_timeout_with_late_registration_never_runs_a_second_task(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-late", questions=6)
    fake = LateRegistry("deepseek", latency_s=0.05)
    asyncio.run(run_worker(db_url, redis_url, redis_ns, {"deepseek": fake}, terminal(db_url)))
    per_sample = tasks_per_sample(fake)
    assert set(per_sample) == set(ids)
    assert max(per_sample.values()) == 1, f"the platform ran two tasks for one sample: {per_sample}"
    assert states(db_url) == {"completed": len(ids)}
    # The one attempt is the one that completed: the re-send used the same key.
    attempts = fetch(db_url, "SELECT max(attempt_no) AS m FROM geo.samples")[0]["m"]
    assert attempts == 1
    check_invariants(db_url, expected_samples=len(ids))


class RejectsResend(LateRegistry):
    """Like LateRegistry, but the re-send of a key is rejected (a platform that validates
    before it replays a known key): the first send was taken all the same."""

    async def submit(self, request: SubmitRequest):  # type: ignore[no-untyped-def]
        if request.idempotency_key in self.by_key:
            self.submits[request.idempotency_key] += 1
            raise InvalidParams("simulated: the platform rejected a parameter", status=400)
        return await super().submit(request)


def test_rejected_resend_does_not_open_a_second_task(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-rejresend", questions=3)
    fake = RejectsResend("deepseek", latency_s=0.05)
    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            lease_s=1.0,
            submit_timeout_s=0.5,  # quiet period: 1.5 s after the last send
            timeout_s=20,
        )
    )
    per_sample = tasks_per_sample(fake)
    assert max(per_sample.values()) == 1, f"a second task after a rejected re-send: {per_sample}"
    assert states(db_url) == {"completed": len(ids)}
    check_invariants(db_url, expected_samples=len(ids))


# --------------------------------------------------------------------------- 2. stale sender
def test_worker_paused_past_its_lease_does_not_send(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-pause", questions=1)
    sid = ids[0]
    fake = FakeConnector("deepseek")
    took_over = threading.Event()
    lanes: list[Any] = []

    def prepare(worker: Worker) -> None:
        lane = worker.lanes["deepseek"]
        lanes.append(lane)
        real = lane.submit_limit.acquire

        async def stalled() -> None:
            if not took_over.is_set():
                # The whole process stalls (GC, SIGSTOP): no renewal runs either. Meanwhile the
                # lease runs out and another worker takes the sample over.
                time.sleep(1.3)
                with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
                    assert ex.sweep_expired(conn, actor="sweeper:test") == [sid]  # type: ignore[arg-type]
                    assert ex.claim_ids(conn, [sid], owner="worker:other", lease_s=30)  # type: ignore[arg-type]
                took_over.set()
            await real()

        lane.submit_limit.acquire = stalled  # type: ignore[method-assign]

    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            # Done once the worker, after the takeover, has decided and let the sample go. A
            # fixed half second after the takeover stopped the run wherever the worker was; its
            # decision was then left to the stop's drain, which cancels an attempt still held
            # after drain_timeout_s: on a slow enough box, before any send (a pass that says
            # nothing).
            lambda: took_over.is_set() and sid not in lanes[0].held,
            prepare=prepare,
            sweeper=False,
            lease_s=1.0,
            timeout_s=10,
        )
    )
    assert took_over.is_set()
    assert fake.submits[f"{sid}:1"] == 0, "the stale worker sent attempt 1 after losing its lease"
    owner = fetch(db_url, "SELECT lease_owner FROM geo.samples")[0]
    assert owner == {"lease_owner": "worker:other"}
    # Nothing was even marked sent by the paused worker: the record still says 'prepared'.
    req = fetch(db_url, "SELECT state, sends FROM geo.upstream_requests")
    assert req == [{"state": "prepared", "sends": 0}]


# --------------------------------------------------------------------------- 3. forgotten ids
def test_failed_acceptance_write_never_forgets_the_upstream_id(
    db_url, redis_url, redis_ns, monkeypatch
):
    ids = make_run(db_url, "r-accfail", questions=2)
    fake = FakeConnector("deepseek", latency_s=0.05, lookup=False)
    real = ex.record_acceptances
    fails = {"left": 1}

    def flaky(*a: Any, **kw: Any) -> Any:
        if fails["left"] > 0:
            fails["left"] -= 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(*a, **kw)

    monkeypatch.setattr(ex, "record_acceptances", flaky)
    asyncio.run(
        run_worker(
            db_url, redis_url, redis_ns, {"deepseek": fake}, terminal(db_url), caps=NO_LOOKUP
        )
    )
    assert fails["left"] == 0
    assert states(db_url) == {"completed": len(ids)}, uncertain_moves(db_url)
    assert not uncertain_moves(db_url)
    assert max(tasks_per_sample(fake).values()) == 1
    check_invariants(db_url, expected_samples=len(ids))


def test_completion_batch_failing_twice_keeps_the_task(db_url, redis_url, redis_ns, monkeypatch):
    ids = make_run(db_url, "r-finfail", questions=3)
    # The answer comes within the acceptance's write window, so the acceptance is folded into
    # the completion write: when that write fails, the upstream id is only in memory.
    fake = FakeConnector("deepseek", latency_s=0.0, lookup=False)
    real = complete.finish_batch
    fails = {"left": 2}

    def flaky(*a: Any, **kw: Any) -> Any:
        if fails["left"] > 0 and any(i.col_to == "completed" for i in kw["items"]):
            fails["left"] -= 1
            raise psycopg.OperationalError("could not serialize access")
        return real(*a, **kw)

    monkeypatch.setattr(complete, "finish_batch", flaky)
    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            caps=NO_LOOKUP,
            lease_s=2.0,
            flush_s=0.05,
        )
    )
    assert fails["left"] == 0
    assert states(db_url) == {"completed": len(ids)}, uncertain_moves(db_url)
    assert not uncertain_moves(db_url)
    assert max(tasks_per_sample(fake).values()) == 1
    check_invariants(db_url, expected_samples=len(ids))


# --------------------------------------------------------------------------- 4. paid answers
class SlowFetch(SyncProtocolConnector):
    """The real OpenAI-compatible connector whose answer parsing stalls once, long enough for the
    worker to be stopped while the paid answer lives only in its memory."""

    stalled = threading.Event()

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        if not SlowFetch.stalled.is_set():
            SlowFetch.stalled.set()
            await asyncio.sleep(5)
        return await super().fetch_evidence(upstream_id, request)


def test_synchronous_answer_survives_a_hand_back(
    db_url, redis_url, redis_ns, simulator_url, tmp_path
):
    ids = make_run(
        db_url, "r-sync", questions=1, channels=[{"platform": "openai_sim", "device": "web"}]
    )
    entry = registry_for(simulator_url).entry("openai_sim")
    archive = LocalArchive(str(tmp_path / "evidence"))
    first = SlowFetch(entry)
    SlowFetch.stalled.clear()

    async def scenario() -> None:
        # Worker 1 gets the (paid) answer, then is stopped while it holds it: hand-back.
        await run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"openai_sim": first},
            terminal(db_url),
            stop_when=SlowFetch.stalled.is_set,
            prepare=lambda w: setattr(w, "archive", archive),
            drain_timeout_s=0.2,
            timeout_s=15,
        )
        await first.aclose()
        # Worker 2 is another process: a connector with empty memory.
        second = SyncProtocolConnector(entry)
        await run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"openai_sim": second},
            terminal(db_url),
            prepare=lambda w: setattr(w, "archive", archive),
            worker_id="worker:test:2",
            timeout_s=15,
        )
        await second.aclose()

    asyncio.run(scenario())
    assert SlowFetch.stalled.is_set()
    assert states(db_url) == {"completed": 1}, fetch(
        db_url, "SELECT collection_state, collection_reason FROM geo.samples"
    )
    charges = fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge'")
    assert charges[0]["n"] == 1
    stats = httpx.get(f"{simulator_url}/_control/stats").json()
    created = sum(
        k["tasks_created"]
        for plat in stats["keys"].values()
        for key, k in plat.items()
        if key.startswith(ids[0] + ":")
    )
    assert created == 1, "the platform was asked (and paid) twice for one answer"
    check_invariants(db_url, expected_samples=1)


# --------------------------------------------------------------------------- 6. nothing sent
def test_failure_before_the_send_is_not_parked_as_uncertain(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-presend", questions=2)
    fake = FakeConnector("deepseek", latency_s=0.05, lookup=False)
    broken = {"left": 1}

    def prepare(worker: Worker) -> None:
        lane = worker.lanes["deepseek"]
        real = lane.submit_limit.acquire

        async def redis_down() -> None:
            if broken["left"] > 0:
                broken["left"] -= 1
                raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
            await real()

        lane.submit_limit.acquire = redis_down  # type: ignore[method-assign]

    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            caps=NO_LOOKUP,
            prepare=prepare,
            timeout_s=12,
        )
    )
    assert broken["left"] == 0
    assert not uncertain_moves(db_url), "parked although nothing was ever sent"
    assert states(db_url) == {"completed": len(ids)}
    assert max(tasks_per_sample(fake).values()) == 1


# --------------------------------------------------------------------------- 7. own re-claim
def _live_sample_tasks(sample_id: str) -> int:
    """Tasks of this event loop working on ``sample_id`` (a coroutine holding it as ``h``)."""
    n = 0
    for t in asyncio.all_tasks():
        frame = getattr(t.get_coro(), "cr_frame", None)
        h = frame.f_locals.get("h") if frame is not None else None
        if h is not None and getattr(h, "sample_id", None) == sample_id and not t.done():
            n += 1
    return n


def test_reclaiming_its_own_expired_sample_leaves_one_live_task(
    db_url, redis_url, redis_ns, monkeypatch
):
    ids = make_run(db_url, "r-reclaim", questions=1)
    sid = ids[0]
    fake = FakeConnector("deepseek", latency_s=2.5)
    real = ex.renew
    t0 = time.monotonic()

    def renew_down(*a: Any, **kw: Any) -> Any:
        if time.monotonic() - t0 < 1.5:
            raise psycopg.OperationalError("connection timeout")
        return real(*a, **kw)

    monkeypatch.setattr(ex, "renew", renew_down)
    most = {"n": 0}

    def prepare(worker: Worker) -> None:
        async def watch() -> None:
            while not worker.stopping.is_set():
                most["n"] = max(most["n"], _live_sample_tasks(sid))
                await asyncio.sleep(0.02)

        worker._watch = asyncio.get_event_loop().create_task(watch())  # type: ignore[attr-defined]

    async def go() -> None:
        await run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            prepare=prepare,
            lease_s=0.6,
            renew_every_s=0.2,
            timeout_s=15,
        )

    asyncio.run(go())
    claims = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.state_transitions "
        "WHERE layer = 'collection' AND to_state = 'running'",
    )[0]["n"]
    assert claims >= 2, "the scenario did not re-claim the sample"
    assert most["n"] == 1, f"{most['n']} live tasks for one sample in one worker"
    assert states(db_url) == {"completed": 1}


# --------------------------------------------------------------------------- 9. drain
def test_drain_waits_for_a_completion_already_being_written(
    db_url, redis_url, redis_ns, monkeypatch
):
    make_run(db_url, "r-drain", questions=1)
    fake = FakeConnector("deepseek")
    real = complete.finish_batch
    writing = threading.Event()

    def slow(*a: Any, **kw: Any) -> Any:
        if any(i.col_to == "completed" for i in kw["items"]):
            writing.set()
            time.sleep(0.6)  # the database is slow to take the completion
        return real(*a, **kw)

    monkeypatch.setattr(complete, "finish_batch", slow)
    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            stop_when=writing.is_set,
            drain_timeout_s=0.05,
            sweeper=False,
        )
    )
    assert writing.is_set()
    row = fetch(db_url, "SELECT collection_state, collection_reason FROM geo.samples")[0]
    assert row["collection_state"] == "completed", f"the answer was handed back instead: {row}"
    check_invariants(db_url, expected_samples=1)


# --------------------------------------------------------------------------- 10. errors that end
def test_lone_completion_hitting_a_database_error_still_ends(
    db_url, redis_url, redis_ns, monkeypatch
):
    make_run(db_url, "r-dberr", questions=1)
    fake = FakeConnector("deepseek")
    real = complete.finish_batch
    t0 = time.monotonic()

    def down(*a: Any, **kw: Any) -> Any:
        if time.monotonic() - t0 < 2.0:
            raise psycopg.OperationalError("the database system is in recovery mode")
        return real(*a, **kw)

    monkeypatch.setattr(complete, "finish_batch", down)
    asyncio.run(
        run_worker(db_url, redis_url, redis_ns, {"deepseek": fake}, terminal(db_url), timeout_s=12)
    )
    assert states(db_url) == {"completed": 1}
    check_invariants(db_url, expected_samples=1)


class PollOutage(FakeConnector):
    """Polls fail (a platform or network outage) more often in a row than the poll budget."""

    def __init__(self, platform: str, failures: int, **kw: Any) -> None:
        super().__init__(platform, **kw)
        self.failures = failures

    async def poll(self, upstream_id: str):  # type: ignore[no-untyped-def]
        if self.failures > 0:
            self.failures -= 1
            raise TransientError("503 while polling", status=503)
        return await super().poll(upstream_id)


def test_a_poll_outage_longer_than_the_budget_does_not_lose_the_paid_task(
    db_url, redis_url, redis_ns
):
    make_run(db_url, "r-pollout", questions=1)
    fake = PollOutage("deepseek", failures=14)  # the budget is 10 consecutive failures
    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            timeout_s=15,
            retry=RetryPolicy(base_delay_s=0.01, max_delay_s=0.05),
        )
    )
    assert fake.failures == 0
    row = fetch(db_url, "SELECT collection_state, collection_reason FROM geo.samples")[0]
    assert row["collection_state"] == "completed", row
    assert sum(fake.submits.values()) == 1  # followed again, never re-submitted
    check_invariants(db_url, expected_samples=1)


class BuggyPoll(FakeConnector):
    async def poll(self, upstream_id: str):  # type: ignore[no-untyped-def]
        raise KeyError(upstream_id)  # a bug, not a connector error


def test_unexpected_exception_ends_operator_visible_with_its_summary(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-bug", questions=1)
    fake = BuggyPoll("deepseek")
    asyncio.run(
        run_worker(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            terminal(db_url),
            timeout_s=12,
            worker_error_delay_s=0.1,
            max_worker_errors=3,
        )
    )
    row = fetch(
        db_url,
        "SELECT collection_state, collection_reason, upstream_id, attempt_no FROM geo.samples",
    )[0]
    assert row["collection_state"] == "failed", f"never ended: {row}"
    assert row["collection_reason"].startswith("worker_error"), row
    assert row["upstream_id"], "the upstream task's id was dropped"
    dead = fetch(db_url, "SELECT sample_id, reason FROM geo.dead_letters")
    assert [d["sample_id"] for d in dead] == ids and "KeyError" in dead[0]["reason"], dead
    assert sum(fake.submits.values()) == 1
    # No charge we cannot prove: the answer was never fetched.
    assert (
        fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge'")[0]["n"]
        == 0
    )


# A hang guard only (the project's default): the worker loops above stop on their own once
# nothing moved for their timeout_s; 120 s here cut off a run still moving on a loaded box.
pytestmark = pytest.mark.timeout(300)
