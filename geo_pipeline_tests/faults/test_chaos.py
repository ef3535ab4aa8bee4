"""The chaos soak of bench/chaos.py, short: about a minute of random SIGKILLs, SIGSTOPs past the
lease, simulator stalls past the submit timeout, terminated PostgreSQL backends, Redis restarts
and a cancelled run, against the simulator with lost responses and a register delay; then every
invariant, from the database and from the simulator's own task list, must hold. The 20-minute
soak is the benchmark (``python bench/chaos.py``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


def load_chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_chaos", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def assert_clean(result: object) -> None:
    violations: dict[str, list[object]] = result.violations  # type: ignore[attr-defined]
    broken = {k: v[:3] for k, v in violations.items() if v}
    assert not broken, "invariants broken under chaos:\n" + json.dumps(
        {k: {"count": len(violations[k]), "examples": ex} for k, ex in broken.items()},
        default=str,
        ensure_ascii=False,
        indent=1,
    )


def test_chaos_soak_short(db_url: str, tmp_path: Path) -> None:
    chaos = load_chaos()
    # The suite runs this beside other heavy tests on 2 cores (pytest -n 2): a restarted worker
    # or sweeper then takes seconds to start, and the storm restarts them often (CI measured one
    # takeover at 24.1 s while the sweeper was being restarted beside the whole suite). The
    # takeover bound keeps its meaning with a wider slack here (lease 5 + sweep 1 + 30 s; a
    # lease never taken over is caught apart, as still held at the end); the 20-minute
    # benchmark (`python bench/chaos.py`) holds the strict one (+5 s).
    cfg = chaos.SoakConfig(
        samples=3000,
        minutes=1.0,
        runs=6,
        fault_every_s=1.2,
        drain_timeout_s=40.0,
        takeover_slack_s=30.0,
    )
    result = chaos.run_soak(cfg, db_url, tmp_path, log=lambda _msg: None)
    chaos.print_result(result)  # shown by pytest on failure
    assert result.samples == 3000
    assert result.injected >= 25, dict(result.faults)
    assert result.faults["worker_kill"] >= 1 and result.faults["run_cancel"] == 1
    assert_clean(result)


@pytest.mark.slow
def test_chaos_soak_twenty_minutes(db_url: str, tmp_path: Path) -> None:
    chaos = load_chaos()
    result = chaos.run_soak(chaos.SoakConfig(), db_url, tmp_path, log=print)
    chaos.print_result(result)
    assert result.injected >= 200, dict(result.faults)
    assert_clean(result)
