"""Priors for the repeats planner (geo_pipeline.domain.precision) from a monitor's earlier runs:
the target brand's mention rate and ICC per channel, estimated from the per-question counts
of the analyst table ``analytics.brand_metrics``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from geo_pipeline.domain.money import Money
from geo_pipeline.domain.plan import Plan
from geo_pipeline.domain.platforms import channel_key
from geo_pipeline.domain.precision import ChannelPlan, Prior, estimate_prior, plan_repeats
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def planning_priors(conn: Conn, monitor_id: str, last_runs: int = 7) -> dict[str, Prior]:
    """Prior per channel from the monitor's latest ``last_runs`` runs; a channel with fewer
    than two questions answered is left out (the planner then uses its stated prior)."""
    rows = conn.execute(
        Q("planning.prior_counts"), {"monitor_id": monitor_id, "last_runs": last_runs}
    ).fetchall()
    per_channel: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        per_channel[r["channel"]].append((int(r["mentions"]), int(r["n"])))
    source = f"monitor {monitor_id}, last {last_runs} runs"
    priors = {}
    for channel, pairs in per_channel.items():
        prior = estimate_prior(pairs, source)
        if prior is not None:
            priors[channel] = prior
    return priors


def channel_precision(
    plan: Plan, target_half_width: float, priors: Mapping[str, Prior]
) -> list[ChannelPlan]:
    """The repeats planner (geo_pipeline.domain.precision.plan_repeats) over a plan, for ``runs
    plan`` and the launchpad's ``plan_collection_run`` alike: per channel its questions, the
    samples per question (repeats x regions x modes) and the quote's price per sample of its
    platform."""
    questions = max(1, len(plan.config.questions))
    per_channel: dict[str, int] = {}
    per_platform: dict[str, int] = {}
    for s in plan.samples:
        ch = channel_key(s.platform, s.device)
        per_channel[ch] = per_channel.get(ch, 0) + 1
        per_platform[s.platform] = per_platform.get(s.platform, 0) + 1
    amount: dict[str, int] = {}
    for line in plan.quote.lines:
        amount[line.platform] = amount.get(line.platform, 0) + line.amount_minor
    out: list[ChannelPlan] = []
    for channel, n in sorted(per_channel.items()):
        platform = channel.split("__", 1)[0]
        price = Money(
            round(amount.get(platform, 0) / max(1, per_platform[platform])), plan.quote.currency
        )
        out += plan_repeats(
            questions=questions,
            repeats=max(1, n // questions),
            channels={channel: priors.get(channel)},
            price_per_sample={channel: price},
            target_half_width=target_half_width,
        )
    return out


# What a person reads where a needed quantity has no value: the target cannot be reached with
# repeats alone (the row's advice says what would reach it). JSON keeps null for a machine.
UNREACHABLE = "unreachable"
NEEDED_COLUMNS = ("repeats needed", "samples needed", "cost needed (minor)")


def precision_display(row: Mapping[str, Any]) -> dict[str, Any]:
    """A planner row for people: "unreachable" instead of an empty needed quantity."""
    return {k: UNREACHABLE if k in NEEDED_COLUMNS and v is None else v for k, v in row.items()}


def precision_row(p: ChannelPlan) -> dict[str, Any]:
    """One channel's line of the planner's table (the CLI's and the launchpad's)."""
    return {
        "channel": p.channel,
        "prior": f"rate {p.prior.rate:.2f}, ICC {p.prior.icc:.2f} ({p.prior.source})",
        "questions x repeats": f"{p.questions} x {p.repeats}",
        "expected ±95%": round(p.half_width, 3),
        "repeats needed": p.repeats_needed,
        "samples needed": p.samples_needed,
        "cost needed (minor)": None if p.cost_needed is None else p.cost_needed.amount_minor,
        "advice": p.advice,
    }
