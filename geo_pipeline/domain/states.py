"""The four state layers of a sample (R6) and the one rule for aggregate status (R7).

``TRANSITIONS`` is the single statement of which moves are allowed; migration 0001 loads the same
rows into ``geo.allowed_transitions`` and a trigger enforces them, and a test proves the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Layer = Literal["submission", "collection", "evidence", "analysis"]
LAYERS: tuple[Layer, ...] = ("submission", "collection", "evidence", "analysis")

STATES: dict[Layer, tuple[str, ...]] = {
    "submission": ("planned", "submitting", "accepted", "uncertain"),
    "collection": ("queued", "running", "completed", "failed"),
    "evidence": ("pending", "stored", "partial", "failed"),
    "analysis": ("pending", "accepted", "review", "failed"),
}
INITIAL: dict[Layer, str] = {
    "submission": "planned",
    "collection": "queued",
    "evidence": "pending",
    "analysis": "pending",
}

TRANSITIONS: dict[Layer, frozenset[tuple[str, str]]] = {
    "submission": frozenset(
        {
            ("planned", "submitting"),
            ("submitting", "accepted"),
            ("submitting", "uncertain"),  # timed out after send: acceptance unknown (R12)
            ("submitting", "planned"),  # definitely not accepted (error before acceptance)
            ("uncertain", "accepted"),  # found upstream by idempotency key / operator verdict
            ("uncertain", "planned"),  # verified not accepted: a new attempt may submit
            ("accepted", "planned"),  # upstream task failed; a retry is a new attempt
        }
    ),
    "collection": frozenset(
        {
            ("queued", "running"),
            ("queued", "failed"),  # cancelled or rejected before any work
            ("running", "queued"),  # handed back, lease lost, or retry scheduled
            ("running", "completed"),
            ("running", "failed"),
        }
    ),
    "evidence": frozenset(
        {
            ("pending", "stored"),
            ("pending", "partial"),  # e.g. text stored, screenshot unavailable (R6, R21)
            ("pending", "failed"),
            ("partial", "stored"),  # a repair adds a revision
            ("failed", "stored"),
            ("failed", "partial"),
        }
    ),
    "analysis": frozenset(
        {
            ("pending", "accepted"),
            ("pending", "review"),
            ("pending", "failed"),
            ("review", "accepted"),
            ("review", "failed"),
            ("accepted", "pending"),  # a newer detector re-analyses; history is kept
            ("review", "pending"),
            ("failed", "pending"),
        }
    ),
}


class TransitionError(ValueError):
    pass


def can_transition(layer: Layer, from_state: str, to_state: str) -> bool:
    return (from_state, to_state) in TRANSITIONS[layer]


def check_transition(layer: Layer, from_state: str, to_state: str) -> None:
    if not can_transition(layer, from_state, to_state):
        allowed = sorted(t for f, t in TRANSITIONS[layer] if f == from_state)
        raise TransitionError(
            f"{layer}: {from_state} -> {to_state} is not allowed; from "
            f"{from_state} the allowed moves are {allowed or 'none (terminal)'}"
        )


def cross_layer_ok(s: Mapping[Layer, str]) -> bool:
    """The invariants the schema also enforces with CHECK constraints."""
    if s["collection"] == "completed" and s["submission"] != "accepted":
        return False
    if s["evidence"] not in ("pending", "failed") and s["collection"] != "completed":
        return False
    return not (s["analysis"] != "pending" and s["evidence"] not in ("stored", "partial"))


# --------------------------------------------------------------------------- aggregation (R7)
Overall = Literal["empty", "in_progress", "full_success", "partial", "all_failed"]


@dataclass(frozen=True)
class LayerCounts:
    """How many samples are in each state of each layer, plus reasons for missing evidence."""

    total: int
    submission: Mapping[str, int] = field(default_factory=dict)
    collection: Mapping[str, int] = field(default_factory=dict)
    evidence: Mapping[str, int] = field(default_factory=dict)
    analysis: Mapping[str, int] = field(default_factory=dict)
    evidence_reasons: Mapping[str, int] = field(default_factory=dict)
    failure_reasons: Mapping[str, int] = field(default_factory=dict)
    # Answers judged invalid (in no rate, whatever the status), by validity reason.
    invalid_reasons: Mapping[str, int] = field(default_factory=dict)
    # Samples with archived evidence whose analysis is still pending (a joint count: a failed
    # sample has a pending analysis too, but nothing to analyse).
    awaiting_analysis: int = 0


@dataclass(frozen=True)
class AggregateStatus:
    overall: Overall
    counts: LayerCounts
    analysing: bool  # some completed sample still awaits analysis: show "analysing"
    uncertain: int  # acceptance unknown, waiting for verification (R12)
    # The operator cancelled the run: its overall status describes what was collected before
    # and must never read as a plain success of the whole plan.
    cancelled: bool = False

    @property
    def terminal(self) -> bool:
        return self.overall in ("full_success", "partial", "all_failed", "empty")

    def as_dict(self) -> dict[str, object]:
        c = self.counts
        return {
            "overall": self.overall,
            "terminal": self.terminal,
            "analysing": self.analysing,
            "uncertain": self.uncertain,
            "cancelled": self.cancelled,
            "total": c.total,
            "submission": dict(c.submission),
            "collection": dict(c.collection),
            "evidence": dict(c.evidence),
            "analysis": dict(c.analysis),
            "evidence_reasons": dict(c.evidence_reasons),
            "failure_reasons": dict(c.failure_reasons),
            "invalid_reasons": dict(c.invalid_reasons),
        }


def derive_status(counts: LayerCounts, *, cancelled: bool = False) -> AggregateStatus:
    """Complete only when every sample is terminal in the collection layer; then full success
    (every sample completed with all evidence stored), all failed, or partial (R7)."""
    col = counts.collection
    completed = col.get("completed", 0)
    failed = col.get("failed", 0)
    uncertain = counts.submission.get("uncertain", 0)
    analysing = counts.awaiting_analysis > 0
    if counts.total == 0:
        overall: Overall = "empty"
    elif completed + failed < counts.total:
        overall = "in_progress"
    elif failed == counts.total:
        overall = "all_failed"
    elif failed == 0 and counts.evidence.get("stored", 0) == counts.total:
        overall = "full_success"
    else:
        overall = "partial"
    return AggregateStatus(overall, counts, analysing, uncertain, cancelled)


# --------------------------------------------------------------------------- publication
@dataclass(frozen=True)
class Publication:
    """Whether a (run, channel) partition may publish its numbers, and what it would leave out.

    A partition publishes when every sample is terminal in the collection layer (``complete``)
    or, past its run's publish deadline, with the terminal samples only (``deadline``); the open
    ones are *excluded*, counted by reason (their layer states: queued, queued_retry, running,
    submitting, polling, uncertain). Counts come from the aggregation service (R7)."""

    run_id: str
    channel: str
    samples: int
    terminal: int
    deadline_passed: bool
    deadline_at: str | None = None  # ISO 8601, database time
    excluded_reasons: Mapping[str, int] = field(default_factory=dict)
    publication_id: int | None = None  # set once recorded

    @property
    def excluded(self) -> int:
        return self.samples - self.terminal

    @property
    def complete(self) -> bool:
        return self.samples > 0 and self.terminal >= self.samples

    @property
    def publishable(self) -> bool:
        return self.complete or (self.samples > 0 and self.deadline_passed)

    @property
    def basis(self) -> Literal["complete", "deadline"] | None:
        if self.complete:
            return "complete"
        return "deadline" if self.publishable else None

    @property
    def excluded_share(self) -> float:
        return self.excluded / self.samples if self.samples else 0.0

    def as_metadata(self) -> dict[str, Any]:
        return {
            "published_on": self.basis or "not_publishable",
            "publish_deadline": self.deadline_at,
            "included": self.terminal,
            "excluded": self.excluded,
            "excluded_share": round(self.excluded_share, 4),
            "excluded_reasons": dict(sorted(self.excluded_reasons.items())),
        }


def combine_publications(run_id: str, parts: list[Publication]) -> Publication:
    """A run's publication from its partitions': publishable only when every partition is."""
    reasons: dict[str, int] = {}
    for p in parts:
        for reason, n in p.excluded_reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
    return Publication(
        run_id=run_id,
        channel="*",
        samples=sum(p.samples for p in parts),
        terminal=sum(p.terminal for p in parts),
        deadline_passed=bool(parts) and all(p.publishable for p in parts),
        deadline_at=max((p.deadline_at for p in parts if p.deadline_at), default=None),
        excluded_reasons=reasons,
    )
