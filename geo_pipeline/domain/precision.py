"""The repeats planner: how precise a brand's mention rate will be for a planned number of
questions x repeats, and how many repeats a target precision needs, at what cost.

Pure. Answers to one question are correlated (intra-class correlation, ICC), so repeats help
less than new questions: with Q questions, R repeats and ICC rho the design effect is
``1 + (R - 1) rho`` (Kish) and the effective n is ``Q R / deff``, which tends to ``Q / rho`` however
many repeats are bought. The expected half-width is half the interval the analyst tables will
publish (``domain.stats.clustered_wilson``: Wilson on the effective n with the Korn-Graubard
df factor for Q - 1 df) at the prior rate. Priors come from earlier runs (``estimate_prior``
over their per-question counts) or, without any, from ``DEFAULT_PRIOR``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from geo_pipeline.domain.money import Money
from geo_pipeline.domain.stats import Z_95, clustered_wilson


@dataclass(frozen=True, slots=True)
class Prior:
    """What we expect of one channel: the brand's mention rate and the ICC of its answers."""

    rate: float
    icc: float
    source: str

    def __post_init__(self) -> None:
        if not (0.0 <= self.rate <= 1.0 and 0.0 <= self.icc <= 1.0):
            raise ValueError(f"need rate and icc in [0, 1], got {self.rate}, {self.icc}")


# Without earlier runs: rate 0.5 gives the widest interval of any rate (a plan that holds for
# every brand), and ICC 0.2 is a moderate question effect (answers to one question agree more
# than answers to two different questions). Replace both with estimates once runs exist.
DEFAULT_PRIOR = Prior(rate=0.5, icc=0.2, source="stated prior (rate 0.5, ICC 0.2)")


def estimate_prior(per_question: Sequence[tuple[int, int]], source: str) -> Prior | None:
    """Rate and ANOVA estimate of the ICC from earlier (mentions, n) pairs, one per question
    (Fleiss; clamped to [0, 1]). None without two questions of at least two answers."""
    pairs = [(x, m) for x, m in per_question if m > 0]
    k = len(pairs)
    big_m = sum(m for _, m in pairs)
    if k < 2 or big_m - k <= 0:
        return None
    p = sum(x for x, _ in pairs) / big_m
    msb = sum(m * (x / m - p) ** 2 for x, m in pairs) / (k - 1)
    msw = sum(x - x * x / m for x, m in pairs) / (big_m - k)
    m0 = (big_m - sum(m * m for _, m in pairs) / big_m) / (k - 1)
    denom = msb + (m0 - 1) * msw
    icc = 0.0 if denom <= 0 else min(1.0, max(0.0, (msb - msw) / denom))
    return Prior(rate=p, icc=icc, source=source)


def expected_half_width(questions: int, repeats: int, prior: Prior, z: float = Z_95) -> float:
    """Half the expected 95 % interval of a mention rate over ``questions`` x ``repeats``."""
    if questions < 1 or repeats < 1:
        raise ValueError(f"need questions >= 1 and repeats >= 1, got {questions}, {repeats}")
    n = questions * repeats
    deff = 1.0 + (repeats - 1) * prior.icc if questions > 1 else 1.0
    lower, upper = clustered_wilson(prior.rate, n / deff, questions - 1, z)
    return (upper - lower) / 2


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    """One channel's precision for the plan, and what the target would take."""

    channel: str
    prior: Prior
    questions: int
    repeats: int
    samples: int
    cost: Money
    half_width: float
    target_half_width: float
    repeats_needed: int | None  # None: no number of repeats up to max_repeats reaches it
    samples_needed: int | None
    cost_needed: Money | None

    @property
    def advice(self) -> str:
        if self.repeats_needed is None:
            return (
                f"not reachable with repeats alone (ICC {self.prior.icc:.2f} caps the effective n "
                f"near {self.questions} / ICC): add questions"
            )
        if self.repeats_needed <= self.repeats:
            return f"meets ±{self.target_half_width:.3f}; {self.repeats_needed} repeats suffice"
        return f"needs {self.repeats_needed} repeats for ±{self.target_half_width:.3f}"


def plan_repeats(
    *,
    questions: int,
    repeats: int,
    channels: Mapping[str, Prior | None],
    price_per_sample: Mapping[str, Money],
    target_half_width: float,
    max_repeats: int = 50,
) -> list[ChannelPlan]:
    """For each channel: the expected half-width of the brand's mention rate with the planned
    questions x repeats, and the fewest repeats (1..max_repeats) whose expected half-width is
    at most the target, with the cost of both at the channel's price per sample. A channel
    without a prior (None) uses DEFAULT_PRIOR."""
    if not 0 < target_half_width < 0.5:
        raise ValueError(f"target half-width must be in (0, 0.5), got {target_half_width}")
    plans = []
    for channel, given in channels.items():
        prior = given or DEFAULT_PRIOR
        price = price_per_sample[channel]
        needed = next(
            (
                r
                for r in range(1, max_repeats + 1)
                if expected_half_width(questions, r, prior) <= target_half_width
            ),
            None,
        )
        samples = questions * repeats
        plans.append(
            ChannelPlan(
                channel=channel,
                prior=prior,
                questions=questions,
                repeats=repeats,
                samples=samples,
                cost=Money(price.amount_minor * samples, price.currency),
                half_width=expected_half_width(questions, repeats, prior),
                target_half_width=target_half_width,
                repeats_needed=needed,
                samples_needed=None if needed is None else questions * needed,
                cost_needed=None
                if needed is None
                else Money(price.amount_minor * questions * needed, price.currency),
            )
        )
    return plans
