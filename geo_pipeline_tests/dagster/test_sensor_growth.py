"""The completion sensor's tick costs PostgreSQL work in proportion to the partitions it is told
about, and nothing for the history beside them (issue #39): counted, never timed.

A tick's work is what its own database connection did (geo_pipeline.store.work: statements
sent, rows and index entries read, buffers), measured around the connection the sensor opens.
Every sample was set terminal by one UPDATE; a VACUUM ANALYZE after it clears the dead rows and
stale index entries that UPDATE leaves (with few rows and no autovacuum yet, those entries are
what a rows-read count would mostly measure), so the count is the tick's own. The tick's
Dagster side is counted too (sensor_world.dagster_metered: the instance storages' statements and
the rows its calls return). Runs are copied in bulk from one made by create_run
(geo_pipeline_tests/sensor_world.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
import pytest
import redis as redis_lib

from geo_pipeline.defs.collection.jobs import plan_from_config
from geo_pipeline.defs.collection.sensors import completion_sensor, cursor_time
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.db import Conn
from geo_pipeline.store.work import Work, measured
from geo_pipeline_tests.dagster.conftest import collection_config, fund
from geo_pipeline_tests.growth import MAX_EXPONENT, assert_linear, exponent
from geo_pipeline_tests.sensor_world import (
    clone_runs,
    dagster_metered,
    end_samples,
    register_all,
)

CHANNELS = [("deepseek", "web"), ("deepseek", "app"), ("doubao", "web"), ("qwen", "web"),
            ("kimi", "web")]  # fmt: skip
SMALL, LARGE = 20, 200  # runs of 5 channels: 100 and 1,000 partitions (one sample each)


class MeteredPostgres(PostgresResource):
    """The system's PostgreSQL, every connection the sensor opens measured as one block."""

    @contextmanager
    def connect(self) -> Iterator[Conn]:
        with super().connect() as conn, measured(conn) as work:
            yield conn
        _TICKS.append(work)


_TICKS: list[Work] = []
_DAGSTER: dict[str, dict[str, int]] = {"small": {}, "large": {}}


def _runs(conn: Any, dg_instance: dg.DagsterInstance, first: int, count: int) -> list[str]:
    """``count`` runs of 5 partitions of one sample each, registered in Dagster, every sample
    terminal: the first created by create_run, the others copied from it in bulk
    (geo_pipeline_tests/sensor_world.py; setup time)."""
    fund(conn, amount=10**12)
    config = {
        **collection_config(),
        "questions": ["best project tool for teams?"],
        "repeats": 1,
        "channels": [
            {"platform": p, "device": d, "regions": ["cn"], "modes": ["standard"]}
            for p, d in CHANNELS
        ],
    }
    ids = [f"grow-{i:04d}" for i in range(first, first + count)]
    plan = plan_from_config(config, ConnectorRegistryResource(), ids[0], conn)
    create_run(conn, plan, dispatch=False)
    with conn.transaction():
        clone_runs(conn, ids[0], ids[1:])
        end_samples(conn, ids)
    register_all(dg_instance, {rid: plan.config.channels for rid in ids})
    conn.execute("VACUUM ANALYZE")  # autocommit: see the module docstring
    return ids


def _publish(client: redis_lib.Redis, stream: str, conn: Any, run_ids: list[str]) -> str | None:
    """Each sample's completion entry; returns the id of the last entry before them (None: the
    stream was empty, read it from its start)."""
    before = client.xrevrange(stream, count=1)
    last = before[0][0] if before else None
    rows = conn.execute(
        "SELECT sample_id, run_id, channel FROM geo.samples WHERE run_id = ANY(%s)"
        " ORDER BY sample_id",
        (run_ids,),
    ).fetchall()
    pipe = client.pipeline(transaction=False)
    for r in rows:
        pipe.xadd(stream, {"event_id": f"e-{r['sample_id']}", "sample_id": r["sample_id"],
                           "run_id": r["run_id"], "channel": r["channel"],
                           "collection_state": "failed"})  # fmt: skip
    pipe.execute()
    return None if last is None else str(last)


def _tick(
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    after: str | None,
    dagster_work: dict[str, int] | None = None,
) -> tuple[Work, int]:
    """One tick reading the stream after ``after`` (the sweep not due): its work and how many
    runs it requested. ``dagster_work``, when given, receives what the tick asked of the Dagster
    instance (sensor_world.dagster_metered: calls, storage statements, rows returned)."""
    _TICKS.clear()
    metered = {**resources, "db": MeteredPostgres(url=resources["db"].url)}
    now = time.time()
    cursor = json.dumps({"id": after, "swept": now})
    with (
        dg.build_sensor_context(instance=dg_instance, cursor=cursor, resources=metered) as ctx,
        dagster_metered(dg_instance) as counts,
    ):
        result = completion_sensor(ctx)
    if dagster_work is not None:
        dagster_work.update(counts)
    assert isinstance(result, dg.SensorResult)
    assert len(_TICKS) == 1, _TICKS  # the tick's one connection, measured
    assert json.loads(result.cursor or "{}")["swept"] == cursor_time(now)  # no sweep: no gap
    return _TICKS[0], len(result.run_requests or [])


@pytest.fixture
def sized(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], redis_url: str
) -> Callable[[], tuple[Work, Work]]:
    """The work of a tick told about 100 partitions, then of one told about 1,000 (what they
    asked of the Dagster instance in ``_DAGSTER``)."""

    def measure() -> tuple[Work, Work]:
        client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
        stream = resources["redis"].completions_stream
        try:
            small = _runs(conn, dg_instance, 0, SMALL)
            small_tick, small_requests = _tick(
                dg_instance, resources, _publish(client, stream, conn, small), _DAGSTER["small"]
            )
            large = _runs(conn, dg_instance, SMALL, LARGE)
            large_tick, large_requests = _tick(
                dg_instance, resources, _publish(client, stream, conn, large), _DAGSTER["large"]
            )
        finally:
            client.close()
        # Every partition and every run is publishable: one ranged downstream request per run
        # (its 5 adjacent channels) and billing's 1 (issue 36: one Dagster run per run and stage).
        assert (small_requests, large_requests) == (2 * SMALL, 2 * LARGE)
        return small_tick, large_tick

    return measure


def test_a_completion_tick_grows_linearly_with_its_partitions(
    sized: Callable[[], tuple[Work, Work]],
) -> None:
    """100 -> 1,000 partitions touched (20 runs of history beside the second): the statements
    stay the same (each query takes the tick's partitions at once) and the rows and buffers
    grow at most ~linearly; so do the Dagster instance's statements and the rows its calls
    return."""
    small, large = sized()
    assert large.statements == small.statements, (small, large)
    assert_linear("completion tick", small, large)
    dg_small, dg_large = _DAGSTER["small"], _DAGSTER["large"]
    for field in ("statements", "rows"):
        a, b = dg_small[field], dg_large[field]
        assert a > 0, f"the Dagster meter counted no {field}"
        assert exponent(a, b, 10) <= MAX_EXPONENT, f"Dagster {field}: {a:,} -> {b:,}"


def test_the_growth_test_catches_a_tick_that_reads_every_partition_per_run(
    sized: Callable[[], tuple[Work, Work]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meter and the bound are not blind: a tick that asks for the state of all its
    partitions once per run (quadratic: 10x the runs, each reading 10x the partitions) fails
    the same assertion."""
    one_query = statusmod.publication_states

    def per_run(conn: Conn, pairs: Any) -> Any:
        pairs = sorted(set(pairs))
        out = {}
        for run_id in sorted({p[0] for p in pairs}):
            out.update({p: s for p, s in one_query(conn, pairs).items() if p[0] == run_id})
        return out

    monkeypatch.setattr(statusmod, "publication_states", per_run)
    small, large = sized()
    with pytest.raises(AssertionError, match="grew"):
        assert_linear("quadratic completion tick", small, large)


def test_a_completion_tick_does_not_read_the_history(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], redis_url: str
) -> None:
    """The same 100 partitions touched beside 10x more runs of history: the same statements,
    and rows and buffers far below the 10x a scan of the history would cost."""
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    stream = resources["redis"].completions_stream
    try:
        touched = _runs(conn, dg_instance, 0, SMALL)
        after = _publish(client, stream, conn, touched)
        before, _ = _tick(dg_instance, resources, after)
        _runs(conn, dg_instance, SMALL, LARGE)  # history: no entries in the stream
        later, _ = _tick(dg_instance, resources, after)
    finally:
        client.close()
    assert later.statements == before.statements, (before, later)
    for field in ("rows_read", "buffers"):
        a, b = getattr(before, field), getattr(later, field)
        assert a > 0, f"the meter counted no {field}"
        assert b <= 2 * a, f"{field}: {a:,} -> {b:,} with 10x the history"


def test_a_completion_tick_asks_dagster_only_about_the_partitions_it_touched(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], redis_url: str
) -> None:
    """100 new partitions touched, first with no history, then beside 10x more older registered
    partitions (runs of history, their keys in the instance): the rows the tick's Dagster calls
    return and the statements the instance runs stay the same. A tick that lists every dynamic
    partition of both definitions (to learn which of its keys exist, or their order for ranged
    runs) reads the whole history every 5 s; the order is read newest first, back to the oldest
    touched key, so a late completion of an old run reads what was registered since it."""
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    stream = resources["redis"].completions_stream
    before: dict[str, int] = {}
    later: dict[str, int] = {}
    try:
        touched = _runs(conn, dg_instance, 0, SMALL)
        _, requested = _tick(
            dg_instance, resources, _publish(client, stream, conn, touched), before
        )
        _runs(conn, dg_instance, SMALL, LARGE)  # history: registered, no entries in the stream
        touched = _runs(conn, dg_instance, SMALL + LARGE, SMALL)
        after = _publish(client, stream, conn, touched)
        _, requested_later = _tick(dg_instance, resources, after, later)
    finally:
        client.close()
    assert requested == requested_later == 2 * SMALL  # a range per run, and billing
    assert before["calls"] > 0 and before["statements"] > 0, before  # the meter is not blind
    assert later["statements"] == before["statements"], (before, later)
    assert later["rows"] <= 2 * before["rows"], (
        f"Dagster rows returned: {before['rows']:,} -> {later['rows']:,} with 10x the "
        "registered partitions beside 100 new ones touched"
    )
