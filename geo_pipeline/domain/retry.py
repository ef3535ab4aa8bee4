"""Execution policies as pure functions: what to do after an error (R13), how long to wait
(R14), how often to poll (R14), and which due sample to claim next (R10).

Values in, values out: the worker feeds these with what it knows (error class, attempt counts,
elapsed time, a random number) and acts on the returned decision. Nothing here reads a clock,
a database or a queue, so every rule is unit-tested directly.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

# --------------------------------------------------------------------------- retry table (R13)
Action = Literal[
    "fail",  # terminal: record the error, no retry (invalid params, no permission, budget spent)
    "retry",  # a NEW attempt after ``delay_s`` (the rejected one was never accepted upstream)
    "lookup",  # acceptance unknown: look the request up by its idempotency key first (R12)
    "poll_again",  # accepted task, poll failed: keep the upstream id, poll again later
    "review",  # unparseable: keep the raw bytes, send to review, never re-ask
]
Stage = Literal["submit", "poll", "fetch"]
# The cause of a browser page whose controls no longer match (connectors.browser PageChanged).
LAYOUT_CHANGED = "layout_changed"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the retry table. ``max_attempts`` comes from the run's config snapshot;
    rate-limited rejections have their own count so a 429 storm cannot exhaust real attempts,
    and every retry stops after ``max_total_s`` since the first attempt (R13)."""

    max_attempts: int = 3
    max_rate_limited: int = 8
    max_total_s: float = 600.0
    base_delay_s: float = 0.5
    max_delay_s: float = 60.0
    poll_error_budget: int = 10  # consecutive poll failures tolerated after acceptance
    # An ``unavailable`` sample (login wall, captcha, changed page, no free account) waits with
    # a delay doubling from ``wait_base_s`` up to ``wait_max_s``: no budget ends it, none storms.
    wait_base_s: float = 30.0
    wait_max_s: float = 1800.0
    # A changed page (``unavailable:layout_changed``: the browser lane's selectors miss) does
    # not change back by itself: the sample waits this many times (a page caught mid-rollout or
    # half-rendered gets another look), then ends failed, never re-asked forever (issue #32).
    max_layout_waits: int = 1


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class ErrorFacts:
    """What the worker knows when an operation failed."""

    error_class: str  # one of connectors.base.ErrorClass
    stage: Stage
    attempt_no: int  # attempts so far, this one included
    rate_limited_so_far: int = 0  # earlier rate-limited attempts of this sample
    elapsed_s: float = 0.0  # since the sample's first attempt started
    retry_after_s: float | None = None
    poll_errors: int = 0  # consecutive poll failures of the current attempt (this one included)
    waited_so_far: int = 0  # earlier ``unavailable`` attempts of this sample
    cause: str | None = None  # why an ``unavailable`` error happened (e.g. "needs_login")
    layout_waits: int = 0  # earlier waits of this sample because the page had changed


def full_jitter_backoff(
    attempt: int, base_s: float, cap_s: float, rnd: float | None = None
) -> float:
    """AWS "full jitter": uniform in [0, min(cap, base * 2**attempt)] (R14). ``rnd`` in [0, 1)
    makes it deterministic for tests; retries spread out instead of returning in lockstep."""
    ceiling = min(cap_s, base_s * (2 ** max(0, attempt)))
    r = random.random() if rnd is None else rnd
    return max(0.0, ceiling * r)


def classify(facts: ErrorFacts, policy: RetryPolicy, rnd: float | None = None) -> Decision:
    """The retry table of R13 as one decision.

    - invalid_params / no_permission: never retry, record.
    - rate_limited: honour Retry-After (never sooner than the platform asked), bounded by
      ``max_rate_limited`` and ``max_total_s``.
    - acceptance_unknown: look upstream up by the idempotency key before anything else.
    - transient before acceptance: a new attempt with full-jitter backoff, bounded.
    - transient while polling an accepted task: keep the id, poll again within a budget.
    - upstream_failed: the upstream task failed; a new attempt if attempts remain.
    - unparseable: keep the raw response, send to review, never re-ask.
    - unavailable (nothing was sent: account logged out or suspended, page changed, no free
      account): wait, whatever the budgets spent; the delay doubles from ``wait_base_s`` to
      ``wait_max_s`` (equal jitter, never under half of it) unless the error says when an
      account is free (``retry_after_s``, spread by up to half). The reason names the cause.
      A changed page (cause ``layout_changed``) waits ``max_layout_waits`` times, then fails.
    """
    ec = facts.error_class
    if ec == "unavailable":
        return _wait(facts, policy, rnd)
    if ec in ("invalid_params", "no_permission"):
        return Decision("fail", reason=ec)
    if ec == "acceptance_unknown":
        return Decision("lookup", reason=ec)
    if ec == "unparseable":
        return Decision("review", reason=ec)
    if facts.elapsed_s >= policy.max_total_s:
        return Decision("fail", reason=f"{ec}:time_budget_spent")
    if facts.stage in ("poll", "fetch") and ec in ("transient", "rate_limited", "not_found"):
        if facts.poll_errors >= policy.poll_error_budget:
            return Decision("fail", reason=f"{ec}:poll_budget_spent")
        delay = full_jitter_backoff(facts.poll_errors, policy.base_delay_s, policy.max_delay_s, rnd)
        if facts.retry_after_s is not None:
            delay = max(delay, facts.retry_after_s)
        return Decision("poll_again", delay, ec)
    if ec == "rate_limited":
        if facts.rate_limited_so_far + 1 > policy.max_rate_limited:
            return Decision("fail", reason="rate_limited:retry_budget_spent")
        delay = full_jitter_backoff(
            facts.rate_limited_so_far, policy.base_delay_s, policy.max_delay_s, rnd
        )
        if facts.retry_after_s is not None:
            delay = max(delay, facts.retry_after_s)  # Retry-After is a floor, never shortened
        return Decision("retry", delay, ec)
    # transient (before acceptance), upstream_failed, not_found at submit: a new attempt.
    real_attempts = facts.attempt_no - facts.rate_limited_so_far - facts.waited_so_far
    if real_attempts >= policy.max_attempts:
        return Decision("fail", reason=f"{ec}:attempts_spent")
    delay = full_jitter_backoff(real_attempts, policy.base_delay_s, policy.max_delay_s, rnd)
    if facts.retry_after_s is not None:
        delay = max(delay, facts.retry_after_s)
    return Decision("retry", delay, ec)


def _wait(facts: ErrorFacts, policy: RetryPolicy, rnd: float | None) -> Decision:
    r = random.random() if rnd is None else rnd
    reason = f"unavailable:{facts.cause or 'unknown'}"
    if facts.cause == LAYOUT_CHANGED and facts.layout_waits >= policy.max_layout_waits:
        return Decision("fail", reason=f"{reason}:waits_spent")
    if facts.retry_after_s is not None:  # an account is free then: never sooner, spread a little
        return Decision("retry", facts.retry_after_s * (1.0 + 0.5 * r), reason)
    ceiling = min(policy.wait_max_s, policy.wait_base_s * (2 ** max(0, facts.waited_so_far)))
    return Decision("retry", ceiling * (0.5 + 0.5 * r), reason)


# --------------------------------------------------------------------------- polling (R14)
@dataclass(frozen=True)
class PollSchedule:
    """Poll soon after acceptance, then less and less often as the task ages: the interval is
    ``ratio`` x age, clamped to [min_s, max_s]. Fast answers are seen at once; a slow task is
    not hammered (R14). Polling stops at completion (the caller stops calling)."""

    first_s: float = 0.05
    min_s: float = 0.1
    ratio: float = 0.5
    max_s: float = 10.0


def poll_interval(age_s: float, schedule: PollSchedule = PollSchedule()) -> float:
    """Seconds to wait before the next poll of a task accepted ``age_s`` seconds ago."""
    if age_s <= 0:
        return schedule.first_s
    return min(schedule.max_s, max(schedule.min_s, schedule.ratio * age_s))


# --------------------------------------------------------------------------- fair claims (R10)
@dataclass(frozen=True)
class Candidate:
    sample_id: str
    tenant_id: str
    priority: int  # 0..9, higher first
    waited_s: float  # how long it has been due
    # An accepted task whose result the service keeps only so long: seconds until that result
    # is gone (result_retention_s - time since acceptance). None: nothing expires.
    fetch_deadline_s: float | None = None


def effective_priority(priority: int, waited_s: float, aging_s: float) -> float:
    """Priority with aging: every ``aging_s`` seconds of waiting adds one level, so a low
    priority sample eventually outranks fresh high-priority work and nothing starves."""
    return priority + (max(0.0, waited_s) / aging_s if aging_s > 0 else 0.0)


def fair_pick(
    candidates: Iterable[Candidate],
    room: Mapping[str, int],
    limit: int,
    aging_s: float = 60.0,
) -> list[str]:
    """Choose up to ``limit`` samples to claim: round-robin across tenants (fair sharing, so a
    tenant with 10,000 queued samples cannot hold back one with 10), within a tenant by
    effective priority, never past a tenant's free in-flight ``room`` (its max_in_flight minus
    what it already runs). Tenants missing from ``room`` are unlimited.

    Within a tenant, accepted tasks with a fetch deadline come first, the earliest deadline
    first (issue 31: a service keeps a result only so long; a paid result is fetched before it
    expires, ahead of new submissions)."""
    # (deadline rank, deadline, effective priority, waited, sample id)
    Item = tuple[int, float, float, float, str]
    per_tenant: dict[str, list[Item]] = defaultdict(list)
    seen: set[str] = set()
    for c in candidates:
        if c.sample_id in seen:
            continue
        seen.add(c.sample_id)
        dl = c.fetch_deadline_s
        per_tenant[c.tenant_id].append(
            (
                0 if dl is not None else 1,
                dl if dl is not None else 0.0,
                effective_priority(c.priority, c.waited_s, aging_s),
                c.waited_s,
                c.sample_id,
            )
        )
    queues: list[tuple[str, list[Item]]] = []
    best: dict[str, tuple[float, float]] = {}
    for tenant, items in per_tenant.items():
        items.sort(key=lambda t: (t[0], t[1], -t[2], -t[3], t[4]))
        queues.append((tenant, items))
        best[tenant] = max((t[2], t[3]) for t in items)
    # The tenant whose best sample ranks highest goes first in every round.
    queues.sort(key=lambda q: (-best[q[0]][0], -best[q[0]][1], q[0]))
    left = {t: room.get(t, limit) for t, _ in queues}
    picked: list[str] = []
    depth = 0
    while len(picked) < limit:
        progressed = False
        for tenant, items in queues:
            if depth < len(items) and left[tenant] > 0:
                picked.append(items[depth][4])
                left[tenant] -= 1
                progressed = True
                if len(picked) >= limit:
                    break
        if not progressed:
            break
        depth += 1
    return picked


def dead_letter_due(deliveries: int, max_deliveries: int) -> bool:
    """An entry delivered more than ``max_deliveries`` times goes to the dead-letter stream."""
    return deliveries > max_deliveries
