"""The checks of validated_evidence (R5, R6, R18, R20, R21, R22), as functions of (connection,
partition); a failing check lists examples (at most ``EXAMPLES``)."""

from __future__ import annotations

from collections import Counter

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.factory import ERROR, EXAMPLES, WARN, check_result, query_rows
from geo_pipeline.evidence import Archive, ArchiveError
from geo_pipeline.evidence.access import read_object
from geo_pipeline.store.db import Conn


def field_completeness(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R22: every completed sample with stored or partial evidence has its answer with digest,
    capture time, validity rule and upstream id."""
    rows = query_rows(conn, "incomplete_evidence", run_id=run_id, channel=channel)
    return check_result(
        names.CHECK_FIELD_COMPLETENESS,
        names.VALIDATED_EVIDENCE,
        not rows,
        incomplete=len(rows),
        examples=[f"{r['sample_id']}: {r['problem']}" for r in rows[:EXAMPLES]],
    )


def sample_uniqueness(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R5: no identity appears twice and no upstream answer is attributed to two samples."""
    rows = query_rows(conn, "partition_samples", run_id=run_id, channel=channel)
    identity = Counter(
        (r["question_revision"], r["region"], r["mode"], r["repeat_index"]) for r in rows
    )
    dup_identities = sum(1 for n in identity.values() if n > 1)
    shared = query_rows(conn, "shared_upstream_ids", run_id=run_id, channel=channel)
    return check_result(
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
    rows = query_rows(conn, "validity_breakdown", run_id=run_id, channel=channel)
    valid = sum(r["n"] for r in rows if r["validity"] == "valid")
    total = sum(r["n"] for r in rows)
    reasons = {r["reason"]: int(r["n"]) for r in rows if r["validity"] == "invalid"}
    rate = valid / total if total else 1.0
    check = check_result(
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
    rows = query_rows(conn, "untraceable_citations", run_id=run_id, channel=channel)
    counts = query_rows(conn, "citation_count", run_id=run_id, channel=channel)[0]
    return check_result(
        names.CHECK_CITATION_TRACEABILITY,
        names.VALIDATED_EVIDENCE,
        not rows,
        # cited and retrieved apart: one name, one meaning (the CSV's cited_count/retrieved_count)
        cited=int(counts["cited"]),
        retrieved=int(counts["retrieved"]),
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
        r["policy"]: r
        for r in query_rows(conn, "screenshot_coverage", run_id=run_id, channel=channel)
    }
    req = rows.get("required", {"completed": 0, "missing": 0})
    opt = rows.get("optional", {"completed": 0, "missing": 0})
    opt_rate = opt["missing"] / opt["completed"] if opt["completed"] else 0.0
    req_ok = req["missing"] == 0
    passed = req_ok and opt_rate <= max_optional_rate
    return check_result(
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
    rows = query_rows(conn, "objects_to_verify", run_id=run_id, channel=channel, limit=limit)
    problems: list[str] = []
    for r in rows:
        try:
            # A part of an answer's bundle is read through the bundle (its key names the
            # bundle's digest, the row the part's); a whole object by its own digest.
            read_object(archive, r["storage_key"], r["kind"], r["sha256"])
        except ArchiveError as exc:
            problems.append(f"{r['sample_id']} {r['kind']}#{r['revision']}: {exc}")
    return check_result(
        names.CHECK_OBJECTS_READABLE,
        names.VALIDATED_EVIDENCE,
        not problems,
        verified=len(rows),
        archive=archive.location,
        problems=problems[:EXAMPLES],
    )
