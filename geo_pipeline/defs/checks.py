"""The asset checks of the pipeline, as functions of (connection, partition) so each can be run
and tested on its own. Every check names the rule it enforces; a failing check lists examples
(at most 20 ids) so an operator can look at the rows.

Blocking checks (``blocking=True`` on the spec) stop the downstream assets of the same Dagster
run: numbers that cannot be trusted must not reach analysts. Every check is partitioned like its
asset; a result names no partition itself, Dagster records it for the step's partition.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.domain.billing import EXPLAINED
from geo_pipeline.domain.config import NormalisedConfig
from geo_pipeline.domain.states import AggregateStatus, Publication
from geo_pipeline.evidence import Archive, ArchiveError
from geo_pipeline.evidence.access import read_object
from geo_pipeline.flows import create_run as plan_checks
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import fetch_all

EXAMPLES = 20
WARN = dg.AssetCheckSeverity.WARN
ERROR = dg.AssetCheckSeverity.ERROR


def _rows(conn: Conn, query: str, **params: Any) -> list[dict[str, Any]]:
    return fetch_all(conn, f"dagster.{query}", params)


def _result(
    check: str,
    asset: dg.AssetKey,
    passed: bool,
    severity: dg.AssetCheckSeverity = ERROR,
    **metadata: Any,
) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=check, asset_key=asset, passed=passed, severity=severity, metadata=metadata
    )


def spec(
    asset: dg.AssetKey,
    name: str,
    description: str,
    blocking: bool,
    partitions_def: dg.PartitionsDefinition | None = None,
) -> dg.AssetCheckSpec:
    """A check partitioned like its asset: each evaluation is recorded for the partition being
    materialised, so a partition whose check failed stays failed (in the UI and for the
    alerts) after another partition passes."""
    with warnings.catch_warnings():
        # Partitioned checks are a preview feature in Dagster 1.13, used deliberately (issue
        # #23); the warning would repeat for every spec each time the definitions load.
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name,
            asset=asset,
            description=description,
            blocking=blocking,
            partitions_def=partitions_def,
        )


# --------------------------------------------------------------------------- sampling_plan
Rows = list[dict[str, Any]]


def _plan_result(c: plan_checks.PlanCheck) -> dg.AssetCheckResult:
    return _result(c.name, names.SAMPLING_PLAN, c.passed, **c.metadata)


def partition_samples(conn: Conn, run_id: str, channel: str) -> Rows:
    """The partition's samples, read once for all three plan checks."""
    return plan_checks.partition_samples(conn, run_id, channel)


def plan_volume(
    conn: Conn, config: NormalisedConfig, run_id: str, channel: str, rows: Rows
) -> dg.AssetCheckResult:
    """R3 (flows.create_run.plan_volume, which also gates `runs create`)."""
    return _plan_result(plan_checks.plan_volume(config, channel, rows))


def plan_identities(conn: Conn, run_id: str, channel: str, rows: Rows) -> dg.AssetCheckResult:
    """R5 (flows.create_run.plan_identities, which also gates `runs create`)."""
    return _plan_result(plan_checks.plan_identities(run_id, channel, rows))


def plan_batches(
    conn: Conn, config: NormalisedConfig, run_id: str, channel: str, rows: Rows
) -> dg.AssetCheckResult:
    """R3 (flows.create_run.plan_batches, which also gates `runs create`)."""
    return _plan_result(plan_checks.plan_batches(conn, config, run_id, channel, rows))


# --------------------------------------------------------------------------- collection_results
def no_non_terminal(status: AggregateStatus, publication: Publication) -> dg.AssetCheckResult:
    """R7: the partition is complete only when every sample is terminal; past the run's publish
    deadline an open sample is allowed only as an excluded one, recorded with its reason (both
    from the aggregation service, never counted here)."""
    col = status.counts.collection
    open_ = col.get("queued", 0) + col.get("running", 0)
    explained = publication.basis == "deadline" and publication.excluded >= open_
    return _result(
        names.CHECK_NO_NON_TERMINAL,
        names.COLLECTION_RESULTS,
        (open_ == 0 and status.terminal) or explained,
        non_terminal=open_,
        excluded_on_deadline=publication.excluded if publication.basis == "deadline" else 0,
        overall=status.overall,
    )


def excluded_share(publication: Publication, maximum: float) -> dg.AssetCheckResult:
    """A partition published on its deadline leaves its open samples out; above ``maximum`` of
    them the numbers no longer describe the engine's day, and nothing downstream publishes."""
    return _result(
        names.CHECK_EXCLUDED_SHARE,
        names.COLLECTION_RESULTS,
        publication.excluded_share <= maximum,
        samples=publication.samples,
        excluded=publication.excluded,
        excluded_share=round(publication.excluded_share, 4),
        maximum=maximum,
        excluded_reasons=dict(sorted(publication.excluded_reasons.items())),
    )


def acceptance_recorded(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R9, R12: every accepted sample has the acceptance record of the request that was
    accepted (same upstream id), so fees and answers trace to one request."""
    rows = _rows(conn, "accepted_without_record", run_id=run_id, channel=channel)
    return _result(
        names.CHECK_ACCEPTANCE_RECORDED,
        names.COLLECTION_RESULTS,
        not rows,
        missing=len(rows),
        examples=[r["sample_id"] for r in rows[:EXAMPLES]],
    )


def no_duplicate_completion(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R5, R25: a sample reaches 'completed' once; a redelivered completion changes nothing."""
    rows = _rows(conn, "duplicate_completions", run_id=run_id, channel=channel)
    return _result(
        names.CHECK_NO_DUPLICATE_COMPLETION,
        names.COLLECTION_RESULTS,
        not rows,
        duplicated=len(rows),
        examples=[r["sample_id"] for r in rows[:EXAMPLES]],
    )


# --------------------------------------------------------------------------- validated_evidence
def field_completeness(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R22: every completed sample with stored or partial evidence has its answer with digest,
    capture time, validity rule and upstream id."""
    rows = _rows(conn, "incomplete_evidence", run_id=run_id, channel=channel)
    return _result(
        names.CHECK_FIELD_COMPLETENESS,
        names.VALIDATED_EVIDENCE,
        not rows,
        incomplete=len(rows),
        examples=[f"{r['sample_id']}: {r['problem']}" for r in rows[:EXAMPLES]],
    )


def sample_uniqueness(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R5: no identity appears twice and no upstream answer is attributed to two samples."""
    rows = _rows(conn, "partition_samples", run_id=run_id, channel=channel)
    identity = Counter(
        (r["question_revision"], r["region"], r["mode"], r["repeat_index"]) for r in rows
    )
    dup_identities = sum(1 for n in identity.values() if n > 1)
    shared = _rows(conn, "shared_upstream_ids", run_id=run_id, channel=channel)
    return _result(
        names.CHECK_SAMPLE_UNIQUENESS,
        names.VALIDATED_EVIDENCE,
        dup_identities == 0 and not shared,
        duplicated_identities=dup_identities,
        shared_upstream_ids=len(shared),
        examples=[f"{r['upstream_id']}: {r['sample_ids']}" for r in shared[:EXAMPLES]],
    )


def validity_rate(
    conn: Conn, run_id: str, channel: str, minimum: float
) -> tuple[dg.AssetCheckResult, dict[str, int]]:
    """R22: share of valid answers (completed is not valid). Below the minimum is a warning —
    the engine answered badly, the data is still correct."""
    rows = _rows(conn, "validity_breakdown", run_id=run_id, channel=channel)
    valid = sum(r["n"] for r in rows if r["validity"] == "valid")
    total = sum(r["n"] for r in rows)
    reasons = {r["reason"]: int(r["n"]) for r in rows if r["validity"] == "invalid"}
    rate = valid / total if total else 1.0
    check = _result(
        names.CHECK_VALIDITY_RATE,
        names.VALIDATED_EVIDENCE,
        rate >= minimum,
        WARN,
        answers=total,
        valid=valid,
        validity_rate=round(rate, 4),
        minimum=minimum,
        invalid_reasons=reasons,
    )
    return check, {"answers": total, "valid": valid}


def citation_traceability(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R18, R22: every citation keeps raw and normalised URL and belongs to an archived answer."""
    rows = _rows(conn, "untraceable_citations", run_id=run_id, channel=channel)
    total = _rows(conn, "citation_count", run_id=run_id, channel=channel)[0]["n"]
    return _result(
        names.CHECK_CITATION_TRACEABILITY,
        names.VALIDATED_EVIDENCE,
        not rows,
        citations=int(total),
        untraceable=len(rows),
        examples=[
            f"{r['sample_id']}#{r['revision']}/{r['ordinal']}: {r['problem']}"
            for r in rows[:EXAMPLES]
        ],
    )


def screenshot_missing(
    conn: Conn, run_id: str, channel: str, max_optional_rate: float
) -> dg.AssetCheckResult:
    """R6, R21: under policy 'required' every completed sample has its screenshot (else ERROR);
    under 'optional' the missing share stays within the tolerance (else WARN)."""
    rows = {
        r["policy"]: r for r in _rows(conn, "screenshot_coverage", run_id=run_id, channel=channel)
    }
    req = rows.get("required", {"completed": 0, "missing": 0})
    opt = rows.get("optional", {"completed": 0, "missing": 0})
    opt_rate = opt["missing"] / opt["completed"] if opt["completed"] else 0.0
    req_ok = req["missing"] == 0
    passed = req_ok and opt_rate <= max_optional_rate
    return _result(
        names.CHECK_SCREENSHOT_MISSING,
        names.VALIDATED_EVIDENCE,
        passed,
        ERROR if not req_ok else WARN,
        required_completed=int(req["completed"]),
        required_missing=int(req["missing"]),
        optional_completed=int(opt["completed"]),
        optional_missing=int(opt["missing"]),
        optional_missing_rate=round(opt_rate, 4),
        optional_tolerance=max_optional_rate,
    )


def objects_readable(
    conn: Conn, archive: Archive, run_id: str, channel: str, limit: int
) -> dg.AssetCheckResult:
    """R20, R21: a row in geo.evidence_objects is a promise that the object exists with that
    digest. Re-reads a fixed spread of the partition's objects and compares their sha256."""
    rows = _rows(conn, "objects_to_verify", run_id=run_id, channel=channel, limit=limit)
    problems: list[str] = []
    for r in rows:
        try:
            # A part of an answer's bundle is read through the bundle (its key names the
            # bundle's digest, the row the part's); a whole object by its own digest.
            read_object(archive, r["storage_key"], r["kind"], r["sha256"])
        except ArchiveError as exc:
            problems.append(f"{r['sample_id']} {r['kind']}#{r['revision']}: {exc}")
    return _result(
        names.CHECK_OBJECTS_READABLE,
        names.VALIDATED_EVIDENCE,
        not problems,
        verified=len(rows),
        archive=archive.location,
        problems=problems[:EXAMPLES],
    )


# --------------------------------------------------------------------------- brand_analysis
def valid_answers_analysed(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R6: after analysis, every valid answer has an analysis result for its latest revision."""
    rows = _rows(conn, "valid_not_analysed", run_id=run_id, channel=channel)
    return _result(
        names.CHECK_VALID_ANSWERS_ANALYSED,
        names.BRAND_ANALYSIS,
        not rows,
        not_analysed=len(rows),
        examples=[r["sample_id"] for r in rows[:EXAMPLES]],
    )


def pending_not_reported_as_not_mentioned(
    conn: Conn, run_id: str, channel: str
) -> dg.AssetCheckResult:
    """R6: an analysis that is pending, in review or failed is never reported "not mentioned"."""
    rows = _rows(conn, "pending_reported_not_mentioned", run_id=run_id, channel=channel)
    return _result(
        names.CHECK_NO_PENDING_AS_NOT_MENTIONED,
        names.BRAND_ANALYSIS,
        not rows,
        offending=len(rows),
        examples=[
            f"{r['sample_id']} ({r['analysis_state']}, {r['mention_status']})"
            for r in rows[:EXAMPLES]
        ],
    )


def visibility_matches(
    conn: Conn, run_id: str, channel: str, table: list[dict[str, Any]]
) -> dg.AssetCheckResult:
    """R7: the analyst table says what the sample-level facts say — one row per tracked brand,
    every planned sample counted, the rate denominator only answers whose analysis is known."""
    expected = {
        r["brand"]: r
        for r in _rows(conn, "channel_visibility_expected", run_id=run_id, channel=channel)
    }
    got = {r["brand"]: r for r in table}
    problems = [f"{b}: no row" for b in sorted(set(expected) - set(got))]
    problems += [f"{b}: not a tracked brand" for b in sorted(set(got) - set(expected))]
    for brand in sorted(set(expected) & set(got)):
        for col in ("samples", "n", "mentions"):
            if int(got[brand][col]) != int(expected[brand][col]):
                problems.append(
                    f"{brand}: {col} {got[brand][col]} != {expected[brand][col]} from the facts"
                )
    return _result(
        names.CHECK_VISIBILITY_MATCHES,
        names.BRAND_VISIBILITY,
        not problems,
        brands=len(expected),
        problems=problems[:EXAMPLES],
    )


# --------------------------------------------------------------------------- billing
def zero_unexplained(conn: Conn, run_id: str) -> dg.AssetCheckResult:
    """R23: our ledger and the platform's statement agree, line by line, or the difference is
    explained by THE predicate ``domain.billing.EXPLAINED`` (the summary, the gauge and the alert
    apply the same one: pending, price change, day total, usage cost)."""
    rows = _rows(conn, "unexplained_lines", run_id=run_id, explained=list(EXPLAINED))
    diff = sum(int(r["difference_minor"]) for r in rows)
    return _result(
        names.CHECK_ZERO_UNEXPLAINED,
        names.BILLING_RECONCILIATION,
        not rows,
        unexplained_lines=len(rows),
        unexplained_difference_minor=diff,
        examples=[
            f"{r['upstream_id']}: {r['classification']} ours={r['ours_minor']} "
            f"theirs={r['theirs_minor']} {r['currency']}"
            for r in rows[:EXAMPLES]
        ],
    )


def no_duplicate_charge(conn: Conn, run_id: str) -> dg.AssetCheckResult:
    """R24, R25: one upstream task (one attempt) is charged at most once."""
    rows = _rows(conn, "duplicate_charges", run_id=run_id)
    return _result(
        names.CHECK_NO_DUPLICATE_CHARGE,
        names.BILLING_RECONCILIATION,
        not rows,
        duplicated=len(rows),
        examples=[
            f"{r['charged_for']}: {r['charges']} charges, {r['amount_minor']}"
            for r in rows[:EXAMPLES]
        ],
    )
