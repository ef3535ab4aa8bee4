"""What the ScaledObjects in deploy/ do with a backlog, simulated offline with KEDA's and the
HPA's documented rules and the manifests' own numbers (no cluster here):

- KEDA polls every ``pollingInterval``; a trigger is active while its metric exceeds
  ``activationThreshold``. From 0 replicas an active trigger scales to 1 (KEDA itself); no trigger
  active for ``cooldownPeriod`` scales to ``minReplicaCount`` (0).
- Between 1 and ``maxReplicaCount`` the HPA decides: for an AverageValue target,
  desired = ceil(metric / threshold), left alone within the 10 % tolerance; scale-up follows the
  HPA default (at most double or +4 pods per 15 s), scale-down takes the highest recommendation
  of the stabilisation window and at most the manifest's Percent policy per period.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance default


def _scaled_object(name: str = "geo-worker-deepseek") -> dict[str, Any]:
    docs = yaml.safe_load_all((DEPLOY / "k8s" / "keda-scaledobject.yaml").read_text())
    return next(
        d for d in docs if d and d["kind"] == "ScaledObject" and d["metadata"]["name"] == name
    )


@dataclass(frozen=True)
class Scaling:
    poll_s: int
    cooldown_s: int
    min_replicas: int
    max_replicas: int
    threshold: float
    activation: float
    down_window_s: int
    down_percent: int
    down_period_s: int

    @classmethod
    def of(cls, so: dict[str, Any]) -> Scaling:
        spec = so["spec"]
        trigger = next(t for t in spec["triggers"] if t["type"] == "prometheus")
        down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        policy = next(p for p in down["policies"] if p["type"] == "Percent")
        return cls(
            poll_s=spec["pollingInterval"],
            cooldown_s=spec["cooldownPeriod"],
            min_replicas=spec["minReplicaCount"],
            max_replicas=spec["maxReplicaCount"],
            threshold=float(trigger["metadata"]["threshold"]),
            activation=float(trigger["metadata"]["activationThreshold"]),
            down_window_s=down["stabilizationWindowSeconds"],
            down_percent=policy["value"],
            down_period_s=policy["periodSeconds"],
        )


def simulate(s: Scaling, backlog: Callable[[int], float], until_s: int) -> list[tuple[int, int]]:
    """(time, replicas) at every poll for a backlog curve (samples as a function of seconds)."""
    replicas, last_active = 0, -(10**9)
    recommendations: list[tuple[int, int]] = []
    scale_downs: list[tuple[int, int]] = []  # (time, pods removed)
    out = []
    for t in range(0, until_s + 1, s.poll_s):
        metric = backlog(t)
        if metric > s.activation:
            last_active = t
            if replicas == 0:
                replicas = max(1, s.min_replicas)
        elif replicas > 0 and t - last_active >= s.cooldown_s:
            replicas = s.min_replicas
            recommendations.clear()
        if replicas > 0:
            ratio = (metric / replicas) / s.threshold
            desired = replicas if abs(ratio - 1) <= TOLERANCE else math.ceil(metric / s.threshold)
            desired = min(s.max_replicas, max(1, desired))
            recommendations.append((t, desired))
            recommendations = [(at, r) for at, r in recommendations if t - at < s.down_window_s]
            if desired > replicas:
                replicas = min(desired, max(2 * replicas, replicas + 4))
            else:
                stable = max(r for _, r in recommendations)  # highest in the window
                removed = sum(n for at, n in scale_downs if t - at < s.down_period_s)
                floor = math.ceil((replicas + removed) * (100 - s.down_percent) / 100)
                target = max(stable, floor)
                if target < replicas:
                    scale_downs.append((t, replicas - target))
                    replicas = target
        out.append((t, replicas))
    return out


def _at(series: list[tuple[int, int]], t: int) -> int:
    return next(r for at, r in series if at >= t)


def test_manifest_numbers_are_what_the_simulation_reads() -> None:
    s = Scaling.of(_scaled_object())
    assert (s.min_replicas, s.activation, s.threshold) == (0, 0.0, 500.0)
    assert s.max_replicas >= 1 and s.cooldown_s > 0


def test_backlog_curve_to_replicas_with_scale_to_zero() -> None:
    s = Scaling.of(_scaled_object())

    def backlog(t: int) -> float:
        if t < 300:
            return 0  # idle
        if t < 600:
            return 40  # a small run: one replica is plenty
        if t < 1200:
            return 4_000  # a daily re-sample of many monitors
        if t < 1500:
            return 20_000  # more than the ceiling allows
        if t < 2400:
            return max(0.0, 20_000 - (t - 1500) * 40)  # drains at 40 samples/s
        return 0

    series = simulate(s, backlog, 4000)
    assert _at(series, 0) == 0 and _at(series, 285) == 0  # idle: nothing runs
    assert _at(series, 300) == 1  # the first queued samples bring one worker at the next poll
    assert _at(series, 585) == 1
    assert _at(series, 700) == 8  # ceil(4000 / 500)
    assert _at(series, 1300) == s.max_replicas  # 20,000 would want 40: capped
    # Draining: never below what the last five minutes asked for, at most half per minute.
    replicas = [r for t, r in series if t >= 1500 and backlog(t) > 0]
    assert replicas == sorted(replicas, reverse=True)
    assert all(r >= 1 for r in replicas)
    drops = [(a, b) for (_, a), (_, b) in itertools.pairwise(series) if b < a and b]
    assert all(b >= math.ceil(a * (100 - s.down_percent) / 100) for a, b in drops)
    # Idle again: zero replicas once the backlog has been zero for the cooldown period.
    last_busy = max(t for t, _ in series if backlog(t) > 0)  # the last poll that saw work
    assert _at(series, last_busy + s.cooldown_s - s.poll_s) >= 1
    assert _at(series, last_busy + s.cooldown_s) == 0
    assert all(r == 0 for t, r in series if t >= last_busy + s.cooldown_s)
    print("\n" + " ".join(f"{t}s:{r}" for t, r in series if t % 300 == 0))


def test_a_brief_lull_does_not_scale_to_zero() -> None:
    s = Scaling.of(_scaled_object())

    def backlog(t: int) -> float:
        return 0 if 600 <= t < 600 + s.cooldown_s - 60 else 1_000

    series = simulate(s, backlog, 1800)
    assert all(r >= 1 for _, r in series)
