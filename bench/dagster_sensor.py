"""Completion-sensor tick time: 50,000 completions across 1,000 partitions.

    python bench/dagster_sensor.py                 # 200 runs x 5 channels x 50 samples
    python bench/dagster_sensor.py --runs 40 --samples-per-partition 10   # quick

Setup: a fresh database migrated from sql/, ``runs`` collection runs of 5 channels each (one
partition per run x channel), every sample moved to a terminal collection state through the
guarded transitions, one completion entry per sample XADDed (pipelined) to a namespaced
``<ns>:completions`` stream, and a Dagster instance holding the runs' dynamic partitions.

Ticks measured (``build_sensor_context`` + the real sensor, against real PostgreSQL and Redis):
- ``stream``: the cursor is at the stream's start and the sweep is not due — the normal path:
  read every entry in bounded XRANGE pages, ask PostgreSQL which touched partitions are
  terminal, build one request per finished partition plus one billing request per finished run;
- ``stream+sweep``: the same with the PostgreSQL catch-up sweep forced (as after a trim);
- ``idle``: nothing new in the stream, sweep not due.
Goal: the 50k tick under 10 s (a tick has 60 s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import redis as redis_lib
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
from _machine import REDIS_URL, print_table, scratch  # noqa: E402

from geo_pipeline.billing import ledger  # noqa: E402
from geo_pipeline.defs.collection.jobs import plan_from_config  # noqa: E402
from geo_pipeline.defs.collection.sensors import completion_sensor  # noqa: E402
from geo_pipeline.defs.partitions import register_run_partitions  # noqa: E402
from geo_pipeline.defs.resources import (  # noqa: E402
    ConnectorRegistryResource,
    PipelineSettingsResource,
    PostgresResource,
    RedisResource,
)
from geo_pipeline.flows.create_run import create_run  # noqa: E402
from geo_pipeline.store import migrate  # noqa: E402

CHANNELS = [("deepseek", "web"), ("deepseek", "app"), ("doubao", "web"), ("qwen", "web"),
            ("kimi", "web")]  # fmt: skip


def config(samples_per_partition: int) -> dict[str, Any]:
    repeats = 2
    questions = max(1, samples_per_partition // repeats)
    return {
        "tenant": "bench",
        "brand": {"name": "Acme"},
        "questions": [f"question number {i} about project tools?" for i in range(questions)],
        "channels": [
            {"platform": p, "device": d, "regions": ["cn"], "modes": ["standard"]}
            for p, d in CHANNELS
        ],
        "repeats": repeats,
        "screenshot": "off",
    }


def setup(db_url: str, runs: int, per_partition: int) -> tuple[list[str], float]:
    t0 = time.perf_counter()
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        migrate.upgrade(conn)  # type: ignore[arg-type]
        ledger.deposit(conn, "bench", 10**12, "CNY", "bench-deposit")  # type: ignore[arg-type]
        run_ids = []
        cfg = config(per_partition)
        for i in range(runs):
            plan = plan_from_config(cfg, ConnectorRegistryResource(), f"bench-{i:05d}", conn)
            rid, _ = create_run(conn, plan, dispatch=False)  # type: ignore[arg-type]
            run_ids.append(rid)
        # queued -> failed is an allowed move: every sample terminal, each one logged.
        conn.execute(
            "UPDATE geo.samples SET collection_state = 'failed', collection_reason = 'BENCH'"
        )
    return run_ids, time.perf_counter() - t0


def publish(client: redis_lib.Redis, stream: str, db_url: str) -> int:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT sample_id, run_id, channel FROM geo.samples").fetchall()
    pipe = client.pipeline(transaction=False)
    for i, r in enumerate(rows):
        pipe.xadd(stream, {"event_id": uuid.uuid4().hex, "sample_id": r["sample_id"],
                           "run_id": r["run_id"], "channel": r["channel"],
                           "collection_state": "failed"})  # fmt: skip
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    return len(rows)


def tick(
    instance: dg.DagsterInstance, resources: dict[str, Any], cursor: str | None
) -> tuple[dg.SensorResult, float]:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    t0 = time.perf_counter()
    result = completion_sensor(ctx)
    elapsed = time.perf_counter() - t0
    assert isinstance(result, dg.SensorResult)
    return result, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--samples-per-partition", type=int, default=50)
    args = ap.parse_args()
    with scratch("geo_bench_sensor") as (db_url, ns):
        client = redis_lib.Redis.from_url(REDIS_URL, decode_responses=True)
        try:
            bench(args, db_url, ns, client)
        finally:
            client.close()


def bench(args: argparse.Namespace, db_url: str, ns: str, client: redis_lib.Redis) -> None:
    run_ids, setup_s = setup(db_url, args.runs, args.samples_per_partition)
    stream = f"{ns}:completions"
    entries = publish(client, stream, db_url)
    resources = {
        "db": PostgresResource(url=db_url),
        "redis": RedisResource(url=REDIS_URL, prefix=ns),
        "settings": PipelineSettingsResource(),
    }
    rows = []
    with dg.instance_for_test() as instance:
        for rid in run_ids:
            register_run_partitions(instance, rid, [f"{p}__{d}" for p, d in CHANNELS])
        now = time.time()
        # Cursor at the stream's start (no id: "0-0" reads as entries trimmed after the cursor
        # once the stream has a first entry, and sweeps), sweep done a moment ago: the normal path.
        fresh = json.dumps({"id": None, "swept": now})
        for label, cursor in (
            ("stream", fresh),
            ("stream+sweep", json.dumps({"id": None, "swept": 0})),
        ):
            result, secs = tick(instance, resources, cursor)
            reqs = result.run_requests or []
            rows.append({
                "tick": label, "entries": entries,
                "partitions": args.runs * len(CHANNELS),
                "requests": len(reqs),
                "billing_requests": sum(1 for r in reqs if r.job_name == "billing_job"),
                "seconds": f"{secs:.2f}",
                "goal": "< 10 s",
            })  # fmt: skip
            last_cursor = result.cursor
        idle_cursor = json.dumps({"id": json.loads(last_cursor or "{}")["id"], "swept": now})
        result, secs = tick(instance, resources, idle_cursor)
        rows.append({
            "tick": "idle", "entries": 0, "partitions": args.runs * len(CHANNELS),
            "requests": len(result.run_requests or []), "billing_requests": 0,
            "seconds": f"{secs:.3f}", "goal": "-",
        })  # fmt: skip
    print_table(
        rows,
        f"completion sensor tick: {entries} completions, {args.runs} runs x {len(CHANNELS)} "
        f"channels (setup {setup_s:.1f} s, not timed)",
    )


if __name__ == "__main__":
    main()
