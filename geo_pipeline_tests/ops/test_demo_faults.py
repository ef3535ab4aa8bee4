"""The demo says which of its documented faults occurred in this run (issue #34, a fourth
newcomer's read: operations.md promises hostile answers and a disagreeing fee statement; a run
that drew none of either said nothing, so the reader looked for them in vain)."""

from __future__ import annotations

from geo_pipeline.ops import demo


def test_the_demo_counts_the_faults_that_occurred_and_names_those_that_did_not() -> None:
    stats = {
        "faults": {"kimi:rate_limited": 2, "deepseek:transient": 1, "doubao:transient": 2},
        "injected": {"kimi:answer_bad": 1, "deepseek:screenshot_never": 3},
    }
    counts = demo.fault_counts(stats)
    assert counts["transient"] == 3 and counts["answer_hostile"] == 0, counts
    said = demo.faults_text(counts)
    assert said[0].startswith("faults the simulator injected in this demo"), said
    assert "transient errors (HTTP 5xx) 3" in said[0] and "rate limits (HTTP 429) 2" in said[0]
    assert said[1].startswith("did not occur this time:"), said
    for kind in ("hostile answers", "fee-statement lines that disagree", "late screenshots"):
        assert kind in said[1], said
    assert "hostile" not in said[0]
