"""The completion sensor's tick costs PostgreSQL work in proportion to the partitions it is told
about, and nothing for the history beside them (issue #39): counted, never timed.

A tick's work is what its own database connection did (geo_pipeline.store.work: statements
sent, rows and index entries read, buffers), measured around the connection the sensor opens.
Every sample was set terminal by one UPDATE; a VACUUM ANALYZE after it clears the dead rows and
stale index entries that UPDATE leaves (with few rows and no autovacuum yet, those entries are
what a rows-read count would mostly measure), so the count is the tick's own.
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
from geo_pipeline.defs.partitions import register_run_partitions
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.domain.plan import build_plan
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.db import Conn
from geo_pipeline.store.work import Work, measured
from geo_pipeline_tests.dagster.conftest import collection_config, fund
from geo_pipeline_tests.growth import assert_linear

CHANNELS = [("deepseek", "web"), ("deepseek", "app"), ("doubao", "web"), ("qwen", "web"),
            ("kimi", "web")]  # fmt: skip
SMALL, LARGE = 20, 200  # runs of 5 channels: 100 and 1,000 partitions (one sample each)
pytestmark = pytest.mark.timeout(900)  # 1,320 runs created on a loaded 2-core box


class MeteredPostgres(PostgresResource):
    """The system's PostgreSQL, every connection the sensor opens measured as one block."""

    @contextmanager
    def connect(self) -> Iterator[Conn]:
        with super().connect() as conn, measured(conn) as work:
            yield conn
        _TICKS.append(work)


_TICKS: list[Work] = []


def _runs(conn: Any, dg_instance: dg.DagsterInstance, first: int, count: int) -> list[str]:
    """``count`` runs of 5 partitions of one sample each, registered in Dagster, every sample
    terminal. One quote, each run planned from it (setup time)."""
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
    quoted = plan_from_config(config, ConnectorRegistryResource(), "grow-q", conn)
    ids = []
    for i in range(first, first + count):
        plan = build_plan(quoted.config, quoted.quote, f"grow-{i:04d}")
        run_id, _ = create_run(conn, plan, dispatch=False)
        register_run_partitions(dg_instance, run_id, plan.config.channels)
        ids.append(run_id)
    conn.execute(
        "UPDATE geo.samples SET collection_state = 'failed', collection_reason = 'X'"
        " WHERE run_id = ANY(%s)",
        (ids,),
    )
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
    dg_instance: dg.DagsterInstance, resources: dict[str, Any], after: str | None
) -> tuple[Work, int]:
    """One tick reading the stream after ``after`` (the sweep not due): its work and how many
    runs it requested."""
    _TICKS.clear()
    metered = {**resources, "db": MeteredPostgres(url=resources["db"].url)}
    now = time.time()
    cursor = json.dumps({"id": after, "swept": now})
    with dg.build_sensor_context(instance=dg_instance, cursor=cursor, resources=metered) as ctx:
        result = completion_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    assert len(_TICKS) == 1, _TICKS  # the tick's one connection, measured
    assert json.loads(result.cursor or "{}")["swept"] == cursor_time(now)  # no sweep: no gap
    return _TICKS[0], len(result.run_requests or [])


@pytest.fixture
def sized(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], redis_url: str
) -> Callable[[], tuple[Work, Work]]:
    """The work of a tick told about 100 partitions, then of one told about 1,000."""

    def measure() -> tuple[Work, Work]:
        client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
        stream = resources["redis"].completions_stream
        try:
            small = _runs(conn, dg_instance, 0, SMALL)
            small_tick, small_requests = _tick(
                dg_instance, resources, _publish(client, stream, conn, small)
            )
            large = _runs(conn, dg_instance, SMALL, LARGE)
            large_tick, large_requests = _tick(
                dg_instance, resources, _publish(client, stream, conn, large)
            )
        finally:
            client.close()
        # Every partition and every run is publishable: one request each (5 + billing's 1).
        assert (small_requests, large_requests) == (6 * SMALL, 6 * LARGE)
        return small_tick, large_tick

    return measure


def test_a_completion_tick_grows_linearly_with_its_partitions(
    sized: Callable[[], tuple[Work, Work]],
) -> None:
    """100 -> 1,000 partitions touched (50 runs of history beside the second): the statements
    stay the same (each query takes the tick's partitions at once) and the rows and buffers
    grow at most ~linearly."""
    small, large = sized()
    assert large.statements == small.statements, (small, large)
    assert_linear("completion tick", small, large)


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
