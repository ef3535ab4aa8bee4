"""Scale-sweep paths of the completion sensor (bench/scale.py loads ``PATHS``):

- one real tick at 100 -> 1,000 -> 10,000 partitions whose completions are in the stream (every
  partition publishable: one request each, plus one billing request per run);
- one real tick reading the completions of 100 partitions only, beside 100 -> 1,000 -> 10,000
  registered partitions (the same worlds, the cursor just before the last 100 partitions'
  entries): the work should follow the partitions that changed, not all of them.

The world of each size is built in bulk (geo_pipeline_tests/sensor_world.py): one run created by
``create_run`` (bench/dagster_sensor.py's config: 5 channels x 2 samples), copied with
``INSERT ... SELECT`` to partitions // 5 runs, every sample failed (terminal) by one guarded
UPDATE, a VACUUM ANALYZE (no dead rows nor stale index entries left to count), one completion
entry per sample XADDed (pipelined) to a namespaced stream, and the runs' dynamic partitions added
to a Dagster instance of its own (``dg.instance_for_test``: a temporary DAGSTER_HOME with the
SQLite storages the tests use) in two calls. 10,000 partitions are set up in seconds.

The tick is the daemon's: ``build_sensor_context`` with that instance and the real resources,
``completion_sensor`` evaluated, its cursor at the stream's start and the PostgreSQL sweep not
due (the normal path). Counted: the tick's own PostgreSQL connection (geo_pipeline.store.work:
statements, rows and index entries read, buffers), plus the Dagster instance's side: the SQL
statements its storages ran (SQLAlchemy) in ``dg_statements``, and the rows its calls returned
(dynamic partition keys, run records, materialised partitions) in ``dg_rows`` — printed beside
the table. ``statements`` and ``rows`` in the table are PostgreSQL's plus Dagster's.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import dagster as dg
import psycopg
import redis as redis_lib
from _machine import REDIS_URL, scratch
from dagster_sensor import CHANNELS
from dagster_sensor import config as sensor_config
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.defs.collection.jobs import plan_from_config
from geo_pipeline.defs.collection.sensors import completion_sensor
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    PipelineSettingsResource,
    PostgresResource,
    RedisResource,
)
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import migrate
from geo_pipeline.store.work import Work, measured
from geo_pipeline_tests.sensor_world import clone_runs, dagster_metered, end_samples, register_all

_exit = contextlib.ExitStack()
atexit.register(_exit.close)
_worlds: dict[int, tuple[dg.DagsterInstance, dict[str, Any], str]] = {}


def world(partitions: int) -> tuple[dg.DagsterInstance, dict[str, Any], str]:
    """(instance, resources, database URL) of ``partitions`` // 5 runs."""
    if partitions in _worlds:
        return _worlds[partitions]
    url, ns = _exit.enter_context(scratch(f"geo_scale_sensor{partitions}"))
    instance = _exit.enter_context(dg.instance_for_test())
    channels = [f"{p}__{d}" for p, d in CHANNELS]
    runs = max(1, partitions // len(channels))
    t0 = time.perf_counter()
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:  # type: ignore[arg-type]
        migrate.upgrade(conn)  # type: ignore[arg-type]
        ledger.deposit(conn, "bench", 10**13, "CNY", "bench-deposit")  # type: ignore[arg-type]
        ids = [f"sensor-{i:05d}" for i in range(runs)]
        plan = plan_from_config(sensor_config(2), ConnectorRegistryResource(), ids[0], conn)
        create_run(conn, plan, dispatch=False)  # type: ignore[arg-type]
        with conn.transaction():
            clone_runs(conn, ids[0], ids[1:])
            end_samples(conn, ids)
        conn.execute("VACUUM ANALYZE")
        rows = conn.execute(
            "SELECT sample_id, run_id, channel FROM geo.samples ORDER BY run_id, channel, sample_id"
        ).fetchall()
    client = redis_lib.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        pipe = client.pipeline(transaction=False)
        for i, r in enumerate(rows):
            pipe.xadd(f"{ns}:completions", {"event_id": f"e-{r['sample_id']}",
                      "sample_id": r["sample_id"], "run_id": r["run_id"],
                      "channel": r["channel"], "collection_state": "failed"})  # fmt: skip
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
    finally:
        client.close()
    register_all(instance, {rid: channels for rid in ids})
    print(f"  (sensor world of {partitions:,} partitions, {len(rows):,} completions: "
          f"{time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    resources = {
        "db": PostgresResource(url=url),
        "redis": RedisResource(url=REDIS_URL, prefix=ns),
        "settings": PipelineSettingsResource(),
    }
    _worlds[partitions] = (instance, resources, url)
    return _worlds[partitions]


TOUCHED = 100  # partitions of the "beside history" path whose completions the tick reads


def measure_sensor_tick(partitions: int) -> dict[str, float]:
    """A tick reading the completions of all ``partitions`` from the stream's start."""
    return _tick(partitions, None, partitions)


def measure_tick_beside_history(partitions: int) -> dict[str, float]:
    """A tick reading the completions of the last 100 partitions only, beside ``partitions``
    registered ones (its cursor just before their entries): the work should not grow."""
    _, resources, _ = world(partitions)
    client = redis_lib.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        stream = resources["redis"].completions_stream
        # 2 entries per partition: the id before the last TOUCHED partitions' entries (none:
        # the stream holds only theirs, read it from its start).
        last = list(client.xrevrange(stream, count=2 * TOUCHED + 1) or [])
    finally:
        client.close()
    return _tick(partitions, str(last[-1][0]) if len(last) > 2 * TOUCHED else None, TOUCHED)


def _tick(partitions: int, after: str | None, touched: int) -> dict[str, float]:
    instance, resources, url = world(partitions)
    ticks: list[Work] = []

    class Metered(PostgresResource):
        @contextlib.contextmanager
        def connect(self) -> Iterator[Any]:
            with super().connect() as conn, measured(conn) as work:
                yield conn
            ticks.append(work)

    ctx = dg.build_sensor_context(
        instance=instance,
        # ``after`` None: from the stream's start without a gap ("0-0" reads as entries trimmed
        # after the cursor once the stream has entries, and the tick would sweep PostgreSQL).
        cursor=json.dumps({"id": after, "swept": time.time()}),
        resources={**resources, "db": Metered(url=url)},
    )
    with dagster_metered(instance) as dg_work:
        c0, t0 = time.process_time(), time.perf_counter()
        result = completion_sensor(ctx)
        t1, c1 = time.perf_counter(), time.process_time()
    assert isinstance(result, dg.SensorResult)
    requests = len(result.run_requests or [])
    assert requests == touched + touched // len(CHANNELS), (requests, touched)
    (work,) = ticks
    print(f"    tick @ {touched:,} of {partitions:,}: {t1 - t0:.3f} s, {requests:,} requests; "
          f"PostgreSQL: {work.statements} statements, {work.rows_read:,} rows, "
          f"{work.buffers:,} buffers; "
          f"Dagster: {dg_work['calls']} calls, {dg_work['statements']} statements, "
          f"{dg_work['rows']:,} rows returned", flush=True)  # fmt: skip
    return {
        "seconds": t1 - t0,
        "cpu_s": c1 - c0,  # this process only: the sensor's database backend is not followed
        "rows": work.rows_read + dg_work["rows"],
        "buffers": work.buffers,
        "statements": work.statements + dg_work["statements"],
    }


PATHS: list[tuple[Any, ...]] = [
    ("completion sensor tick (partitions)", [100, 1_000, 10_000], measure_sensor_tick),
    (
        "completion tick, 100 touched beside (registered partitions)",
        [100, 1_000, 10_000],
        measure_tick_beside_history,
    ),
]
