"""Priors for the repeats planner (geo_pipeline.domain.planner) from a monitor's earlier runs:
the target brand's mention rate and ICC per channel, estimated from the per-question counts
of the analyst table ``analytics.brand_metrics``."""

from __future__ import annotations

from collections import defaultdict

from geo_pipeline.domain.planner import Prior, estimate_prior
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
