"""The worker's cyclic collector after start-up (worker.runner.quiet_collector, issue 33): the
start-up's objects frozen, young collections every GC_GEN0_THRESHOLD net allocations."""

from __future__ import annotations

import gc
import subprocess
import sys

from geo_pipeline.worker.runner import GC_GEN0_THRESHOLD, quiet_collector


def test_quiet_collector_freezes_start_up_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        quiet_collector()
        assert gc.get_freeze_count() > 0, "the start-up's objects were not frozen"
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD, before[1], before[2])
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
    assert GC_GEN0_THRESHOLD > 700, "no quieter than CPython's default"


def test_a_collection_still_runs_at_the_raised_threshold() -> None:
    # In a fresh interpreter: cycles made after start-up are still collected by the young
    # generation's own collections (the collector is quieter, not off).
    code = (
        "import gc\n"
        "from geo_pipeline.worker.runner import GC_GEN0_THRESHOLD, quiet_collector\n"
        "quiet_collector()\n"
        "runs = [0]\n"
        "gc.callbacks.append(lambda phase, info: runs.__setitem__(0, runs[0] + (phase == 'stop')))\n"
        "keep = []\n"
        "for _ in range(3 * GC_GEN0_THRESHOLD):\n"
        "    a = []; a.append(a); keep.append(a)\n"
        "print(runs[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert int(done.stdout.strip()) >= 2, f"stdout: {done.stdout}\nstderr: {done.stderr}"


def test_dropped_cycles_stay_bounded_at_the_raised_threshold() -> None:
    # In a fresh interpreter: cycles dropped as fast as they are made (ten thresholds' worth)
    # never hold more than about one young generation's worth of objects: memory stays bounded.
    code = (
        "import gc\n"
        "from geo_pipeline.worker.runner import GC_GEN0_THRESHOLD, quiet_collector\n"
        "quiet_collector()\n"
        "base = len(gc.get_objects())\n"
        "peak = 0\n"
        "for i in range(10 * GC_GEN0_THRESHOLD):\n"
        "    a = []; a.append(a); del a\n"
        "    if i % 10000 == 0:\n"
        "        peak = max(peak, len(gc.get_objects()) - base)\n"
        "print(peak)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    assert int(done.stdout.strip()) <= 2 * GC_GEN0_THRESHOLD, done.stdout
