"""Launch to brand_visibility: how long from creating a run through the launchpad job until
brand_visibility of its partitions is materialised, with every step in its own process (the
multiprocess executor, Dagster's default) vs every step in the run's process (in_process, what
the jobs now use).

    python bench/dagster_launch.py                      # 2 channels x 2 questions x 2 repeats
    python bench/dagster_launch.py --rounds 3           # alternate the order, 3 times each
    python bench/dagster_launch.py --dev [--rounds N]   # issue 36: click-to-published and dev
                                                        # start-up on the shipped instance

``--dev`` (bench/_dagster_dev.py) starts ``geo-pipeline dev`` (the shipped dagster.yaml: queued
coordinator, daemon, code server; sensors on their intervals) and clicks "Launch Run" through
the webserver's GraphQL, against the goals of issue 36 (<= 20 s each). Without it:

What is measured, per executor, in this one process against a real Dagster instance (SQLite
storage in a temporary DAGSTER_HOME, so the multiprocess executor can start step processes),
real PostgreSQL (a fresh database migrated from sql/) and Redis:

1. ``create``: the launchpad job ``create_collection_run`` with its pre-filled example config
   (2 channels x 2 questions x 2 repeats = 8 samples), run with ``dagster.execute_job`` on a
   reconstructable job, so the executor is the real one;
2. ``plan``: one ``sampling_plan_sensor`` tick (``build_sensor_context``, as the daemon would)
   and the ``sampling_plan_job`` run of each requested partition, one after the other;
3. ``collect``: the samples completed in SQL as a worker would (claim, acceptance record,
   answer, archived evidence, charge: ``geo_pipeline_tests.dagster.conftest.finish``) — no
   engine, so this stage is the same for both executors and small;
4. ``downstream``: one ``completion_sensor`` tick (a sweep) and the ``partition_downstream_job``
   run (collection_results, validated_evidence, brand_analysis, brand_visibility and their
   checks) of each requested partition, one after the other; billing is not waited for.

``total`` is the wall time of 1-4, ending when the instance records brand_visibility for every
partition of the run. The daemons' polling intervals (sensor ticks every 15-30 s, the run queue's
dequeue interval) are not included: they add the same to both executors.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
from _machine import REDIS_URL, print_table, scratch  # noqa: E402

EXECUTORS = {"multiprocess": dg.multiprocess_executor, "in_process": dg.in_process_executor}


# --------------------------------------------------------------------------- reconstructable jobs
# The multiprocess executor re-imports the job in each step's process: module-level functions
# returning the deployment's job (geo_pipeline.definitions, resources from GEO_* variables set by
# main() before anything is imported) with the executor under test.
def _job(name: str, executor: str) -> dg.JobDefinition:
    from geo_pipeline.definitions import defs

    return defs.resolve_job_def(name).with_executor_def(EXECUTORS[executor])


def create_multiprocess() -> dg.JobDefinition:
    return _job("create_collection_run", "multiprocess")


def create_in_process() -> dg.JobDefinition:
    return _job("create_collection_run", "in_process")


def plan_multiprocess() -> dg.JobDefinition:
    return _job("sampling_plan_job", "multiprocess")


def plan_in_process() -> dg.JobDefinition:
    return _job("sampling_plan_job", "in_process")


def downstream_multiprocess() -> dg.JobDefinition:
    return _job("partition_downstream_job", "multiprocess")


def downstream_in_process() -> dg.JobDefinition:
    return _job("partition_downstream_job", "in_process")


RECONSTRUCTABLE = {
    ("create_collection_run", "multiprocess"): create_multiprocess,
    ("create_collection_run", "in_process"): create_in_process,
    ("sampling_plan_job", "multiprocess"): plan_multiprocess,
    ("sampling_plan_job", "in_process"): plan_in_process,
    ("partition_downstream_job", "multiprocess"): downstream_multiprocess,
    ("partition_downstream_job", "in_process"): downstream_in_process,
}


def run_job(
    instance: dg.DagsterInstance,
    name: str,
    executor: str,
    *,
    run_config: dict[str, Any] | None = None,
    request: dg.RunRequest | None = None,
) -> dg.JobExecutionResult:
    """What the daemon's run worker does with a run: execute the job with its executor."""
    recon = dg.reconstructable(RECONSTRUCTABLE[(name, executor)])
    tags: dict[str, str] = {}
    if request is not None:
        tags = dict(request.tags)
        if request.partition_key is not None:
            job = RECONSTRUCTABLE[(name, executor)]()
            tags.update(job.get_tags_for_partition_key(request.partition_key, None))
    with dg.execute_job(recon, instance, run_config=run_config, tags=tags) as result:
        if not result.success:
            failures = [
                e.message for e in result.all_events if e.is_step_failure or e.is_run_failure
            ]
            raise RuntimeError(f"{name} ({executor}) failed: {failures}")
        return result


# --------------------------------------------------------------------------- one launch
def launch_to_visibility(
    instance: dg.DagsterInstance,
    executor: str,
    resources: dict[str, Any],
    conn: psycopg.Connection[Any],
    run_id: str,
) -> dict[str, Any]:
    from geo_pipeline.defs import names
    from geo_pipeline.defs.collection.sensors import completion_sensor, sampling_plan_sensor
    from geo_pipeline_tests.dagster.conftest import finish

    def tick(sensor: Any) -> list[dg.RunRequest]:
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            result = sensor(ctx)
        return [r for r in result.run_requests or [] if r.tags.get("geo/run_id") == run_id]

    t0 = time.perf_counter()
    run_job(instance, "create_collection_run", executor, run_config=example_config(run_id))
    t_create = time.perf_counter()
    plans = tick(sampling_plan_sensor)
    for req in plans:
        run_job(instance, "sampling_plan_job", executor, request=req)
    t_plan = time.perf_counter()
    channels = sorted(r.tags["geo/channel"] for r in plans)
    for ch in channels:
        finish(conn, run_id, ch)
    t_collect = time.perf_counter()
    downstream = [r for r in tick(completion_sensor) if r.job_name == "partition_downstream_job"]
    for req in downstream:
        run_job(instance, "partition_downstream_job", executor, request=req)
    done = {
        k for k in instance.get_materialized_partitions(names.BRAND_VISIBILITY) if run_id in str(k)
    }
    t_end = time.perf_counter()
    if len(done) != len(channels) or len(downstream) != len(channels):
        raise RuntimeError(f"{executor}: brand_visibility for {sorted(done)} of {channels}")
    return {
        "executor": executor,
        "partitions": len(channels),
        "dagster runs": 1 + len(plans) + len(downstream),
        "create s": f"{t_create - t0:.1f}",
        "plan s": f"{t_plan - t_create:.1f}",
        "collect s": f"{t_collect - t_plan:.2f}",
        "downstream s": f"{t_end - t_collect:.1f}",
        "total s": f"{t_end - t0:.1f}",
    }


def example_config(run_id: str) -> dict[str, Any]:
    """The launchpad's pre-filled example (the job's default config) with a run id of ours."""
    from geo_pipeline.defs.launchpad import EXAMPLE

    return {"ops": {"create_run_op": {"config": {"collection": dict(EXAMPLE), "run_id": run_id}}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1, help="launches per executor (alternating)")
    ap.add_argument("--dev", action="store_true", help="through `geo-pipeline dev` (issue 36)")
    args = ap.parse_args()
    with scratch("geo_bench_launch") as (db_url, ns):
        if args.dev:
            from _dagster_dev import bench_dev

            rows, start, per_run = bench_dev(args.rounds, db_url, ns)
            print(f"load average (1, 5, 15 min) when the launches ended: {os.getloadavg()}")
            print_table([start], "geo-pipeline dev start-up (shipped dagster.yaml)")
            print_table(per_run, "every Dagster run of the launches (one run-worker process each)")
            print_table(rows, "click-to-published: launchpad example, 8 samples, 2 channels")
            for what, key, table in (
                ("dev start-up", "dev start-up s (UI answers)", [start]),
                *(("click-to-published " + r["run"], "click-to-published s", [r]) for r in rows),
            ):
                value = float(table[0][key])
                verdict = "MET" if value <= 20.0 else "NOT MET"
                print(f"GOAL {what}: {value:.1f} s against <= 20 s: {verdict}")
            return
        bench(args, db_url, ns)


def bench(args: argparse.Namespace, db_url: str, ns: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="geo_bench_launch_"))
    evidence = tmp / "evidence"
    # The deployment's definitions read these (in this process and in every step process).
    os.environ.update(
        {
            "GEO_DATABASE_URL": db_url,
            "GEO_REDIS_URL": REDIS_URL,
            "GEO_REDIS_PREFIX": ns,
            "GEO_EVIDENCE_URL": evidence.as_uri(),
        }
    )
    try:
        from geo_pipeline.billing import ledger
        from geo_pipeline.definitions import defs
        from geo_pipeline.evidence import LocalArchive
        from geo_pipeline.store import migrate
        from geo_pipeline_tests.dagster import conftest as dagster_fixtures

        dagster_fixtures._ARCHIVE["current"] = LocalArchive(evidence)  # where finish() archives
        repo = defs.get_repository_def()
        resources = {
            k: repo.get_top_level_resources()[k] for k in ("db", "redis", "settings", "registry")
        }
        rows = []
        with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
            migrate.upgrade(conn)  # type: ignore[arg-type]
            ledger.deposit(conn, "acme", 10**12, "CNY", "bench-deposit")  # type: ignore[arg-type]
            (tmp / "dagster_home").mkdir()
            with dg.instance_for_test(temp_dir=str(tmp / "dagster_home")) as instance:
                order = ["multiprocess", "in_process"]
                for i in range(args.rounds):
                    for executor in order if i % 2 == 0 else order[::-1]:
                        run_id = f"bench-{executor.replace('_', '')}-{i}"
                        rows.append(
                            launch_to_visibility(instance, executor, resources, conn, run_id)
                        )
        print_table(
            rows,
            "launch to brand_visibility: launchpad job, sampling_plan, collection (SQL), "
            "downstream assets; 2 channels x 2 questions x 2 repeats per run",
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
