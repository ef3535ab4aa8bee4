"""The browser lane's failure classes in the R13 retry table: a login wall, a captcha page, a
changed layout or no free account mean nothing was sent. The sample waits (never failed, never
charged, no attempt or time budget spent) with a named reason and a delay that grows, so a
logged-out account cannot cause a retry storm."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.connectors.base import ConnectorError, InvalidParams, RateLimited
from geo_pipeline.connectors.browser.spec import (
    AccountSuspended,
    InvalidCapability,
    NeedsLogin,
    NoAccountReady,
)
from geo_pipeline.domain.retry import ErrorFacts, RetryPolicy, classify

P = RetryPolicy(
    max_attempts=3,
    max_rate_limited=4,
    max_total_s=100,
    base_delay_s=1,
    max_delay_s=30,
    wait_base_s=20,
    wait_max_s=600,
)
WAITS = [
    (NeedsLogin, "needs_login"),
    (AccountSuspended, "account_suspended"),
    (InvalidCapability, "invalid_capability"),
    (NoAccountReady, "no_account"),
]


def facts(exc: ConnectorError, **kw: Any) -> ErrorFacts:
    """What the worker builds from a failed submit (worker.attempt.submit_failed)."""
    cause = getattr(exc, "cause", None)
    return ErrorFacts(exc.error_class, "submit", retry_after_s=exc.retry_after_s, cause=cause, **kw)


@pytest.mark.parametrize(("cls", "cause"), WAITS)
def test_browser_failures_are_waits_not_rate_limits_or_bad_params(cls, cause):
    exc = cls("the page says so")
    assert exc.error_class == "unavailable" and exc.cause == cause
    # As a RateLimited the sample failed after max_rate_limited tries; as an InvalidParams at once.
    assert not isinstance(exc, (RateLimited, InvalidParams))


@pytest.mark.parametrize(("cls", "cause"), WAITS)
def test_a_wait_never_fails_whatever_the_budgets_spent(cls, cause):
    d = classify(
        facts(cls("x"), attempt_no=500, rate_limited_so_far=40, elapsed_s=1e6, waited_so_far=450),
        P,
        rnd=0.5,
    )
    assert d.action == "retry"
    assert d.reason == f"unavailable:{cause}"
    assert P.wait_base_s / 2 <= d.delay_s <= P.wait_max_s


@given(st.integers(0, 60), st.floats(0, 0.999))
def test_wait_delay_is_never_short_and_grows_to_a_cap(waited, rnd):
    d = classify(facts(NeedsLogin("x"), attempt_no=waited + 1, waited_so_far=waited), P, rnd=rnd)
    ceiling = min(P.wait_max_s, P.wait_base_s * 2**waited)
    assert ceiling / 2 <= d.delay_s <= ceiling  # equal jitter: spread, but never a storm


def test_wait_honours_when_an_account_is_free():
    d = classify(facts(NoAccountReady("x", retry_after_s=2.0), attempt_no=1), P, rnd=0.0)
    assert d.action == "retry" and 2.0 <= d.delay_s <= 3.0  # the pacing gap, spread a little
    far = classify(facts(NoAccountReady("x", retry_after_s=900.0), attempt_no=1), P, rnd=0.0)
    assert far.delay_s >= 900.0  # never sooner than the account may send


def test_waits_do_not_spend_real_attempts():
    # Four waits then one transient error: the first real failure, so a new attempt follows.
    d = classify(ErrorFacts("transient", "submit", 5, waited_so_far=4), P, rnd=0.0)
    assert d.action == "retry"
    spent = classify(ErrorFacts("transient", "submit", 7, waited_so_far=4), P, rnd=0.0)
    assert spent.action == "fail" and spent.reason == "transient:attempts_spent"
