"""R6/R7: layered transition rules and the aggregation rule."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.states import (
    LayerCounts,
    TransitionError,
    check_transition,
    derive_status,
)


def test_planned_cannot_jump_to_completed():
    with pytest.raises(TransitionError) as err:
        check_transition("collection", "queued", "completed")
    assert "allowed moves are ['failed', 'running']" in str(err.value)


def test_completed_is_terminal():
    with pytest.raises(TransitionError, match="none \\(terminal\\)"):
        check_transition("collection", "completed", "running")


def counts(total, col, ev=None, an=None, sub=None):
    return LayerCounts(
        total=total, collection=col, evidence=ev or {}, analysis=an or {}, submission=sub or {}
    )


def test_in_progress_until_every_sample_is_terminal():
    st = derive_status(counts(3, {"completed": 2, "running": 1}, {"stored": 2, "pending": 1}))
    assert st.overall == "in_progress" and not st.terminal


def test_full_success_needs_all_evidence_stored():
    assert derive_status(counts(2, {"completed": 2}, {"stored": 2})).overall == "full_success"
    # Text done, screenshot missing: collection completed, evidence partial -> partial (R6).
    assert (
        derive_status(counts(2, {"completed": 2}, {"stored": 1, "partial": 1})).overall == "partial"
    )


def test_all_failed_and_partial():
    assert derive_status(counts(2, {"failed": 2}, {"pending": 2})).overall == "all_failed"
    assert (
        derive_status(counts(2, {"failed": 1, "completed": 1}, {"stored": 1})).overall == "partial"
    )


def test_pending_analysis_shows_analysing_not_unmentioned():
    c = counts(2, {"completed": 2}, {"stored": 2}, {"pending": 1, "accepted": 1})
    st = derive_status(LayerCounts(**{**c.__dict__, "awaiting_analysis": 1}))
    assert st.analysing is True


def test_a_failed_sample_with_nothing_to_analyse_is_not_analysing():
    # One analysed sample, one failed one: its analysis is pending but there is nothing to analyse.
    c = counts(
        2, {"completed": 1, "failed": 1}, {"stored": 1, "pending": 1}, {"pending": 1, "accepted": 1}
    )
    assert derive_status(c).analysing is False


def test_uncertain_is_reported():
    st = derive_status(counts(1, {"running": 1}, sub={"uncertain": 1}))
    assert st.uncertain == 1 and st.overall == "in_progress"


def test_empty_scope():
    assert derive_status(counts(0, {})).overall == "empty"
