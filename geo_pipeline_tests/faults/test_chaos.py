"""The chaos soak of bench/chaos.py, short: about a minute of random SIGKILLs, SIGSTOPs past the
lease, simulator stalls past the submit timeout, terminated PostgreSQL backends, Redis restarts
and a cancelled run, against the simulator with lost responses and a register delay; then every
invariant, from the database and from the simulator's own task list, must hold. The 20-minute
soak is the benchmark (``python bench/chaos.py``)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline_tests.integration.execution.helpers import DB_INVARIANTS, fetch, make_run

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"
OWNER = "worker:test:1"


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


# pytest-timeout's wall clock is only the suite's safety net here: the soak's own drain cap
# (below) ends a drain that keeps moving without settling, and reports it as a violation.
@pytest.mark.timeout(1800)
def test_chaos_soak_short(db_url: str, tmp_path: Path) -> None:
    chaos = load_chaos()
    # The suite runs this beside other heavy tests on 2 cores: a restarted worker or sweeper
    # may then take many seconds to start. The verdict measures that (bench/chaos.py Timing):
    # the drain waits while work moves and each takeover is held to its own measured bound, so
    # a loaded machine makes the soak slower, never red; a sample that stops moving still
    # fails it (test_the_drain_fails_on_a_stranded_sample).
    cfg = chaos.SoakConfig(samples=3000, minutes=1.0, runs=6, fault_every_s=1.2, drain_cap_s=1200)
    result = chaos.run_soak(cfg, db_url, tmp_path, log=lambda _msg: None)
    chaos.print_result(result)  # shown by pytest on failure
    assert result.samples == 3000
    assert result.injected >= 25, dict(result.faults)
    assert result.faults["worker_kill"] >= 1 and result.faults["run_cancel"] == 1
    assert_clean(result)


CHANNELS = [{"platform": "kimi", "device": "web"}, {"platform": "openai_sim", "device": "web"}]
LOOKUP = ["deepseek", "doubao", "kimi", "qwen"]  # the soak's recoverable platforms


def _claim(conn: Any, sample_id: str) -> int:
    (row,) = ex.claim_ids(conn, [sample_id], owner=OWNER, lease_s=30)
    return int(row["fencing_token"])


def _end(conn: Any, fin: complete.Finish) -> None:
    assert complete.finish_batch(conn, owner=OWNER, items=[fin]).done, fin


def _uncertain(sample_id: str, token: int, delay_s: float) -> complete.Finish:
    return complete.Finish(
        sample_id, token, "queued", sub_to="uncertain", reason="acceptance_unknown:test",
        delay_s=delay_s, outcome="uncertain", req_state="uncertain",
    )  # fmt: skip


def _by_platform(db_url: str, run_id: str) -> dict[str, str]:
    rows = fetch(db_url, "SELECT sample_id, platform FROM geo.samples WHERE run_id = %s", (run_id,))
    return {r["platform"]: r["sample_id"] for r in rows}


def test_an_uncertain_sample_a_worker_will_recover_is_not_settled(db_url: str, db: Any) -> None:
    """The stranded `queued/planned upstream_failed` of issue 30: the drain counted an
    `uncertain` sample as settled (it is visible to an operator) although its platform looks
    requests up and a worker claims it when due; the soak then stopped the processes while that
    sample moved on (lookup -> accepted -> upstream failed -> planned again), and the check
    found it half-way. Due now, such a sample is still moving; parked for an operator (no
    lookup: openai_sim) it is settled."""
    chaos = load_chaos()
    make_run(db_url, "r-settle", questions=1, channels=CHANNELS)
    ids = _by_platform(db_url, "r-settle")
    _end(db, _uncertain(ids["kimi"], _claim(db, ids["kimi"]), 0.0))  # e.g. its lease expired
    _end(db, _uncertain(ids["openai_sim"], _claim(db, ids["openai_sim"]), 7 * 86400.0))
    # Both pass terminal_or_visible: the old drain saw nothing left to wait for.
    assert fetch(db_url, DB_INVARIANTS["terminal_or_visible"]) == []
    rows = chaos.unsettled_samples(db_url, lookup_platforms=LOOKUP, horizon_s=5.0)
    assert [(r["sample_id"], r["submission_state"]) for r in rows] == [(ids["kimi"], "uncertain")]


def test_the_drain_fails_on_a_stranded_sample_and_passes_once_it_settles(
    db_url: str, db: Any
) -> None:
    """The verdict can still fail: a sample left `queued/planned upstream_failed`, due, with no
    process to move it, is reported stuck once nothing has moved for the stall bound; once it
    is terminal the same drain passes. (Driven directly: no chaos timing involved.)"""
    chaos = load_chaos()
    make_run(db_url, "r-stranded", questions=1, channels=CHANNELS)
    ids = _by_platform(db_url, "r-stranded")
    kimi = ids["kimi"]
    token = _claim(db, kimi)
    ex.record_acceptances(db, owner=OWNER, items=[ex.AcceptanceRecord(kimi, token, "kimi-task-1")])
    _end(db, complete.Finish(
        kimi, token, "queued", sub_to="planned", reason="upstream_failed", outcome="failed",
        error_class="upstream_failed",
    ))  # fmt: skip
    _end(db, _uncertain(ids["openai_sim"], _claim(db, ids["openai_sim"]), 7 * 86400.0))
    drain = chaos.await_drain(
        db_url, lookup_platforms=LOOKUP, horizon_s=5.0, stall_bound_s=lambda: 0.2, cap_s=600,
        poll_s=0.05,
    )  # fmt: skip
    assert drain.drain_s is None and not drain.capped
    assert [(r["sample_id"], r["collection_state"], r["submission_state"],
             r["collection_reason"]) for r in drain.stuck] == [
        (kimi, "queued", "planned", "upstream_failed")
    ]  # fmt: skip
    _end(db, complete.Finish(kimi, _claim(db, kimi), "failed", reason="test", outcome="failed"))
    drain = chaos.await_drain(
        db_url, lookup_platforms=LOOKUP, horizon_s=5.0, stall_bound_s=lambda: 0.2, cap_s=600,
        poll_s=0.05,
    )  # fmt: skip
    assert drain.drain_s is not None and drain.stuck == []


def test_a_takeover_bound_counts_the_time_no_sweeper_was_up() -> None:
    chaos = load_chaos()
    up = [(0.0, 10.0), (25.0, math.inf)]
    assert chaos.uncovered_s(5.0, 30.0, up) == 15.0
    assert chaos.uncovered_s(5.0, 9.0, up) == 0.0
    assert chaos.uncovered_s(12.0, 20.0, up) == 8.0
    assert chaos.uncovered_s(30.0, 20.0, up) == 0.0


@pytest.mark.slow
def test_chaos_soak_twenty_minutes(db_url: str, tmp_path: Path) -> None:
    chaos = load_chaos()
    result = chaos.run_soak(chaos.SoakConfig(), db_url, tmp_path, log=print)
    chaos.print_result(result)
    assert result.injected >= 200, dict(result.faults)
    assert_clean(result)
