"""The browser lane's waits through the real worker (PostgreSQL, Redis): a login wall, a captcha
page or a changed page before the send hands the sample back to wait, far past the rate-limit and
attempt budgets, never failed and never charged; the reason names the cause; the waits spend
neither real attempts nor the time budget (R13)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from geo_pipeline.connectors.base import Acceptance, ConnectorError, SubmitRequest, TransientError
from geo_pipeline.connectors.browser.spec import AccountSuspended, InvalidCapability, NeedsLogin
from geo_pipeline.domain.retry import RetryPolicy
from geo_pipeline_tests.integration.execution.helpers import (
    FakeConnector,
    check_invariants,
    fetch,
    make_run,
    states,
)
from geo_pipeline_tests.integration.execution.test_worker_flow import all_terminal, run_worker_until


class WallsFirst(FakeConnector):
    """Raises the given errors, in order, before the first sends succeed (nothing is sent)."""

    def __init__(self, platform: str, errors: Iterator[ConnectorError]) -> None:
        super().__init__(platform)
        self.errors = errors
        self.refused = 0

    async def submit(self, request: SubmitRequest) -> Acceptance:
        exc = next(self.errors, None)
        if exc is not None:
            self.refused += 1
            raise exc
        return await super().submit(request)


def test_waits_outlast_every_budget_and_charge_nothing(db_url, redis_url, redis_ns):
    ids = make_run(db_url, "r-waits", questions=1, max_attempts=2)
    walls: list[ConnectorError] = [
        *(NeedsLogin("login wall") for _ in range(5)),
        *(AccountSuspended("captcha") for _ in range(4)),
        *(InvalidCapability("no chat input") for _ in range(3)),
        TransientError("503", status=503),  # the first real failure after the waits
    ]
    fake = WallsFirst("deepseek", iter(walls))
    policy = RetryPolicy(
        max_attempts=2,
        max_rate_limited=2,  # as a rate limit, the third login wall would fail the sample
        max_total_s=3.0,  # the waits alone outlast this (checked below); they do not spend it
        base_delay_s=0.01,
        max_delay_s=0.05,
        wait_base_s=0.1,  # at least half of 0.1, 0.2, 0.4, then 0.8 each: >= 3.95 s of waits
        wait_max_s=0.8,
    )
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            all_terminal(db_url),
            timeout_s=60.0,
            retry=policy,
        )
    )
    assert fake.refused == len(walls)
    assert states(db_url) == {"completed": len(ids)}
    check_invariants(db_url, expected_samples=len(ids))
    rows = fetch(
        db_url,
        "SELECT error_class, outcome, count(*) AS n FROM geo.attempts GROUP BY 1, 2 ORDER BY 1",
    )
    got = {(r["error_class"], r["outcome"]): r["n"] for r in rows}
    assert got[("unavailable", "not_accepted")] == 12
    assert got[("transient", "not_accepted")] == 1
    assert got[(None, "completed")] == len(ids)
    reasons = {
        r["reason"]
        for r in fetch(db_url, "SELECT DISTINCT reason FROM geo.state_transitions")
        if (r["reason"] or "").startswith("unavailable:")
    }
    assert reasons == {
        "unavailable:needs_login",
        "unavailable:account_suspended",
        "unavailable:invalid_capability",
    }
    charged = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.ledger_entries l JOIN geo.attempts a "
        "USING (sample_id, attempt_no) WHERE l.kind = 'charge' AND a.error_class IS NOT NULL",
    )
    assert charged[0]["n"] == 0
    # The test proves the time budget is not spent by waits only if they outlasted it.
    span = fetch(
        db_url,
        "SELECT extract(epoch FROM min(started_at) FILTER (WHERE error_class IS DISTINCT FROM "
        "'unavailable') - min(started_at))::float8 AS s FROM geo.attempts",
    )[0]["s"]
    assert span > policy.max_total_s, span
