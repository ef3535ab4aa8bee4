"""Fault-test fixtures: a simulator process per test (its own counters and fault profile) and a
cluster of real relay / worker / sweeper processes that the test kills and restarts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from geo_pipeline_tests.faults.harness import Cluster, start_simulator


@pytest.fixture
def sim_sets() -> list[str]:
    """Override per test with ``@pytest.mark.parametrize("sim_sets", [[...]])`` or a fixture."""
    return []


@pytest.fixture
def cluster(db_url, redis_url, redis_ns, tmp_path, sim_sets) -> Iterator[Cluster]:
    sim, url = start_simulator(sim_sets)
    c = Cluster(db_url, redis_url, redis_ns, url, tmp_path)
    try:
        yield c
    finally:
        c.shutdown()
        sim.kill()
        sim.wait(timeout=10)
        if sim.stdout:
            sim.stdout.close()
