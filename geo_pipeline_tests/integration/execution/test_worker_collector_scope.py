"""A Worker run in process leaves the process's cyclic collector as it found it: the quieter
collector of issue 33 (gc.freeze, young threshold GC_GEN0_THRESHOLD) is the worker process's
choice, made by its entry points (`geo-pipeline worker`, bench/throughput.py's worker child),
not by Worker.run. Set from the library, every test that ran a worker in the pytest process
changed the collector of every test after it."""

from __future__ import annotations

import asyncio
import gc

from geo_pipeline_tests.integration.execution.helpers import FakeConnector, make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import all_terminal, run_worker_until


def test_an_in_process_worker_leaves_the_collector_alone(db_url, redis_url, redis_ns):
    make_run(db_url, "r-gc", questions=2)
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    report = asyncio.run(
        run_worker_until(
            db_url, redis_url, redis_ns, {"deepseek": FakeConnector("deepseek")},
            all_terminal(db_url),
        )
    )  # fmt: skip
    assert report["completed"] == 2, report
    assert gc.get_threshold() == threshold
    assert gc.get_freeze_count() == frozen
