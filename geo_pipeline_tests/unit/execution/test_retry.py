"""The pure execution policies: the R13 retry table, full-jitter backoff and Retry-After (R14),
poll intervals that grow with task age, and fair claims with priority aging (R10)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.domain.retry import (
    Candidate,
    ErrorFacts,
    PollSchedule,
    RetryPolicy,
    classify,
    dead_letter_due,
    effective_priority,
    fair_pick,
    full_jitter_backoff,
    poll_interval,
)

P = RetryPolicy(max_attempts=3, max_rate_limited=4, max_total_s=100, base_delay_s=1, max_delay_s=30)


def test_invalid_params_and_no_permission_never_retry():
    for ec in ("invalid_params", "no_permission"):
        d = classify(ErrorFacts(ec, "submit", 1), P)
        assert d.action == "fail" and d.reason == ec


def test_acceptance_unknown_looks_up_before_anything_else():
    assert classify(ErrorFacts("acceptance_unknown", "submit", 3), P).action == "lookup"


def test_unparseable_goes_to_review_never_re_asked():
    assert classify(ErrorFacts("unparseable", "fetch", 1), P).action == "review"


def test_rate_limited_honours_retry_after_as_a_floor():
    d = classify(ErrorFacts("rate_limited", "submit", 1, retry_after_s=7.5), P, rnd=0.0)
    assert d.action == "retry" and d.delay_s == 7.5
    d = classify(ErrorFacts("rate_limited", "submit", 1, retry_after_s=0.1), P, rnd=0.99)
    assert d.delay_s >= 0.1


def test_rate_limited_has_its_own_bounded_count():
    # Three rate-limited attempts do not spend the three real attempts...
    d = classify(ErrorFacts("rate_limited", "submit", 4, rate_limited_so_far=3), P, rnd=0.5)
    assert d.action == "retry"
    # ...but the rate-limit budget itself is bounded.
    d = classify(ErrorFacts("rate_limited", "submit", 5, rate_limited_so_far=4), P)
    assert d.action == "fail" and "budget" in d.reason


def test_transient_submit_errors_are_bounded_by_max_attempts():
    assert classify(ErrorFacts("transient", "submit", 2), P, rnd=0.5).action == "retry"
    d = classify(ErrorFacts("transient", "submit", 3), P)
    assert d.action == "fail" and d.reason.endswith("attempts_spent")
    # Rate-limited attempts are not counted against max_attempts.
    assert (
        classify(ErrorFacts("transient", "submit", 4, rate_limited_so_far=2), P).action == "retry"
    )


def test_total_time_bounds_every_retry():
    d = classify(ErrorFacts("transient", "submit", 1, elapsed_s=100), P)
    assert d.action == "fail" and "time_budget" in d.reason


def test_poll_failure_after_acceptance_keeps_polling_within_budget():
    d = classify(ErrorFacts("transient", "poll", 1, poll_errors=3), P, rnd=0.5)
    assert d.action == "poll_again"
    d = classify(ErrorFacts("transient", "poll", 1, poll_errors=P.poll_error_budget), P)
    assert d.action == "fail" and "poll_budget" in d.reason


def test_upstream_failed_retries_as_new_attempt_while_attempts_remain():
    assert classify(ErrorFacts("upstream_failed", "submit", 1), P, rnd=0.1).action == "retry"
    assert classify(ErrorFacts("upstream_failed", "submit", 3), P).action == "fail"


@given(st.integers(0, 30), st.floats(0, 0.999999))
def test_full_jitter_stays_within_the_capped_exponential(attempt, rnd):
    d = full_jitter_backoff(attempt, 0.5, 60.0, rnd)
    assert 0 <= d <= min(60.0, 0.5 * 2**attempt)


def test_full_jitter_spreads_retries():
    values = {round(full_jitter_backoff(5, 1.0, 60.0), 6) for _ in range(50)}
    assert len(values) > 40


def test_poll_interval_grows_with_age_and_is_capped():
    s = PollSchedule(first_s=0.05, min_s=0.1, ratio=0.5, max_s=10)
    assert poll_interval(0, s) == 0.05
    seq = [poll_interval(a, s) for a in (0.1, 1, 4, 10, 100, 1000)]
    assert seq == sorted(seq)
    assert seq[0] == 0.1 and seq[-1] == 10


def test_fair_pick_serves_the_small_tenant_at_once():
    a = [Candidate(f"a{i}", "A", 5, 100 - i) for i in range(100)]
    b = [Candidate(f"b{i}", "B", 5, 1.0) for i in range(10)]
    picked = fair_pick(a + b, {"A": 500, "B": 500}, 20, aging_s=60)
    assert {p for p in picked if p.startswith("b")} == {f"b{i}" for i in range(10)}
    assert picked[:2] == ["a0", "b0"] or picked[:2] == ["b0", "a0"]


def test_fair_pick_respects_tenant_room():
    a = [Candidate(f"a{i}", "A", 5, 1) for i in range(10)]
    b = [Candidate(f"b{i}", "B", 5, 1) for i in range(10)]
    picked = fair_pick(a + b, {"A": 2, "B": 0}, 10)
    assert picked == ["a0", "a1"] or sorted(picked) == ["a0", "a1"]


def test_priority_ages_so_nothing_starves():
    old_low = Candidate("low", "A", 1, waited_s=600)
    new_high = Candidate("high", "A", 9, waited_s=0)
    assert fair_pick([old_low, new_high], {}, 1, aging_s=60) == ["low"]
    assert fair_pick([old_low, new_high], {}, 1, aging_s=1e9) == ["high"]
    assert effective_priority(1, 600, 60) == 11


def test_dead_letter_after_max_deliveries():
    assert not dead_letter_due(5, 5)
    assert dead_letter_due(6, 5)
