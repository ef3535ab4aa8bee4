"""Bulk resolution of a run's uncertain samples (issue 37): one operator policy for every sample
of a run whose upstream acceptance is unknown (R12), with a dry run.

- ``accept-possible-second-charge``: a new attempt under a new idempotency key; if upstream did
  take the first request it may charge twice (reconciliation shows it against the statement).
- ``give-up``: the sample ends failed (UNCERTAIN_GIVEN_UP); nothing is re-sent.

Each resolved sample gets a guarded transition in the log (with the actor) and a review decision
(who, which policy, why). The acceptance record keeps 'uncertain': what upstream did stays
unknown and is never recorded as a fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from geo_pipeline.domain.streams import STREAM_PARAMS
from geo_pipeline.domain.vocabulary import BULK_POLICIES
from geo_pipeline.store.db import Conn
from geo_pipeline.store.execution import set_actor
from geo_pipeline.store.queries import Q

POLICIES = {
    "accept-possible-second-charge": (
        "bulk_resolution.resubmit",
        "resubmitted_possible_second_charge",
    ),
    "give-up": ("bulk_resolution.give_up", "given_up"),
}
if set(POLICIES) != set(BULK_POLICIES):  # the CLI offers BULK_POLICIES without importing this
    raise RuntimeError(f"bulk policies {sorted(POLICIES)} != vocabulary {sorted(BULK_POLICIES)}")


@dataclass
class BulkResolution:
    run_id: str
    policy: str
    dry_run: bool
    samples: list[dict[str, Any]] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "policy": self.policy,
            "dry_run": self.dry_run,
            "uncertain": len(self.samples),
            "resolved": len(self.resolved),
            "samples": self.samples,
        }


def resolve_run(
    conn: Conn, run_id: str, policy: str, *, note: str, actor: str, dry_run: bool
) -> BulkResolution:
    """Apply ``policy`` to the run's uncertain samples, in one transaction (all or nothing);
    ``dry_run``: list what would be resolved and write nothing."""
    query, verdict = POLICIES[policy]
    out = BulkResolution(run_id, policy, dry_run)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("bulk_resolution.uncertain_of_run"), {"run_id": run_id})
        out.samples = [dict(r) for r in cur.fetchall()]
        if dry_run or not out.samples:
            return out
        set_actor(conn, actor)
        ids = [s["sample_id"] for s in out.samples]
        why = f"{policy}: {note}"
        cur.execute(
            Q(query),
            {**STREAM_PARAMS, "run_id": run_id, "sample_ids": ids, "note": why, "actor": actor},
        )
        out.resolved = sorted(r["sample_id"] for r in cur.fetchall())
        cur.execute(
            Q("bulk_resolution.decisions"),
            {"sample_ids": out.resolved, "verdict": verdict, "note": why, "actor": actor},
        )
    return out
