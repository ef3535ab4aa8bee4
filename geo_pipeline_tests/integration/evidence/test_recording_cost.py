"""What recording a batch's answers, citations and object rows costs PostgreSQL, and what it still
guarantees (issue 33, migrations 0071, 0072, 0090): no trigger runs once per citation or object
row (the keys citations -> answers and evidence_objects -> samples are checked once per
statement, for COPY as for INSERT), no tenant lookup per transition row, and the keys'
guarantees hold. Work is counted by PostgreSQL (the trigger functions' calls), never timed."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from geo_pipeline.evidence import rows as evidence_rows
from geo_pipeline.evidence.recording import SampleRef
from geo_pipeline.store.queries import Q
from geo_pipeline_tests.integration.evidence.helpers import seed_sample

CITATIONS_PER_ANSWER = 4


def _answer(ref: SampleRef, revision: int = 1) -> dict[str, Any]:
    return {
        "sample_id": ref.sample_id, "tenant_id": ref.tenant_id, "revision": revision,
        "attempt_no": 1, "upstream_id": f"up-{ref.sample_id}", "raw_text": "an answer",
        "sanitized_html": "", "raw_sha256": "0" * 64, "content_sha256": f"{revision:064d}",
        "captured_at": datetime.now(UTC).isoformat(), "provider_truncated": False,
        "validity": "valid", "validity_reason": None, "validity_rule_version": "1",
        "warnings": [], "search_queries": [], "web_search_used": None,
    }  # fmt: skip


def _citations(ref: SampleRef, revision: int = 1) -> list[dict[str, Any]]:
    none = dict.fromkeys(("citation_key", "title", "span_start", "span_end", "cited_text"))
    return [
        {
            "sample_id": ref.sample_id,
            "tenant_id": ref.tenant_id,
            "revision": revision,
            "ordinal": i,
            "relation": "cited",
            "raw_url": f"https://example.com/{i}",
            "normalized_url": f"https://example.com/{i}",
            "registrable_domain": "example.com",
            **none,
        }
        for i in range(CITATIONS_PER_ANSWER)
    ]


def _objects(ref: SampleRef) -> list[dict[str, Any]]:
    return [
        {
            "sample_id": ref.sample_id,
            "tenant_id": ref.tenant_id,
            "run_id": ref.run_id,
            "kind": kind,
            "storage_key": f"{ref.tenant_id}/{ref.run_id}/{ref.sample_id}/sha256-{i:064d}/{kind}",
            "sha256": f"{i:064d}",
            "size_bytes": 1,
            "mime_type": "application/octet-stream",
            "attempt_no": 1,
            "captured_at": datetime.now(UTC).isoformat(),
        }
        for i, kind in enumerate(("answer_raw", "citations", "response_raw"))
    ]


_COLUMNS = {
    "evidence.copy_answers": evidence_rows.ANSWER_COLUMNS,
    "evidence.copy_citations": evidence_rows.CITATION_COLUMNS,
    "evidence.copy_objects": evidence_rows.OBJECT_COLUMNS,
}


def _write(db: Any, name: str, rows: list[dict[str, Any]]) -> None:
    """Write rows with the recording's own COPY statement (``evidence.copy_*``); object rows
    numbered by the recording's rules from what their samples have (``copy_objects``)."""
    values = [tuple(r[c] for c in _COLUMNS[name]) for r in rows]
    if name == "evidence.copy_objects":
        samples = evidence_rows.samples_for_record(db, sorted({r["sample_id"] for r in rows}))
        # A row of no sample is numbered as a first revision: the guard is what refuses it.
        for r in rows:
            samples.setdefault(r["sample_id"], {"objects": {}})
        evidence_rows._copy(db, name, evidence_rows._new_objects(samples, values, {}))
    elif name == "evidence.copy_answers":
        evidence_rows._copy(db, name, map(evidence_rows.answer_copy_row, values))
    else:
        evidence_rows._copy(db, name, values)


def _trigger_calls(db: Any, name: str, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Write a batch with one statement: each of its table's triggers' number of calls (their
    functions' calls in this transaction, track_functions = 'pl')."""
    table = re.search(r"^COPY (\S+)", Q(name), re.M).group(1)  # type: ignore[union-attr]
    db.execute("SET LOCAL track_functions = 'pl'")
    triggers = db.execute(
        "SELECT tgname, tgfoid::regprocedure::text AS fn FROM pg_trigger"
        " WHERE tgrelid = %s::regclass AND NOT tgisinternal AND tgtype & 4 = 4",  # on INSERT
        (table,),
    ).fetchall()
    before = {t["tgname"]: _function_calls(db, t["fn"]) for t in triggers}
    _write(db, name, rows)
    return {t["tgname"]: _function_calls(db, t["fn"]) - before[t["tgname"]] for t in triggers}


def test_a_batch_of_citations_runs_no_trigger_per_row(db: Any) -> None:
    refs = [seed_sample(db) for _ in range(3)]
    with db.transaction():
        answers = _trigger_calls(db, "evidence.copy_answers", [_answer(r) for r in refs])
        rows = [c for r in refs for c in _citations(r)]
        citations = _trigger_calls(db, "evidence.copy_citations", rows)
    # Every row has its tenant: the tenant trigger has nothing to do and is not called.
    assert answers.get("a_tenant_of_sample", 0) == 0, answers
    # The key to the answer is checked once for the statement, not once per citation.
    assert citations and max(citations.values()) <= 1, citations
    assert citations["citations_guard_insert"] == 1, citations  # the guard runs for COPY too
    n = db.execute(
        "SELECT count(*) AS n FROM geo.citations WHERE sample_id = ANY(%s)",
        ([r.sample_id for r in refs],),
    ).fetchone()["n"]
    assert n == 3 * CITATIONS_PER_ANSWER


def test_a_batch_of_object_rows_runs_no_trigger_per_row(db: Any) -> None:
    refs = [seed_sample(db) for _ in range(3)]
    with db.transaction():
        calls = _trigger_calls(db, "evidence.copy_objects", [o for r in refs for o in _objects(r)])
    # The key to the sample is checked once for the statement (migration 0072).
    assert calls and max(calls.values()) <= 1, calls
    assert calls["evidence_objects_guard_insert"] == 1, calls
    n = db.execute(
        "SELECT count(*) AS n FROM geo.evidence_objects WHERE sample_id = ANY(%s)",
        ([r.sample_id for r in refs],),
    ).fetchone()["n"]
    assert n == 3 * 3


def test_an_object_row_of_no_sample_is_refused(db: Any) -> None:
    ref = seed_sample(db)
    ghost = SampleRef("s" + "0" * 24, ref.run_id, ref.tenant_id)
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="no such sample"):
        with db.transaction():
            _write(db, "evidence.copy_objects", _objects(ghost))


def test_a_row_without_its_tenant_still_gets_its_samples(db: Any) -> None:
    ref = seed_sample(db)
    with db.transaction():
        _write(db, "evidence.copy_answers", [_answer(ref) | {"tenant_id": None}])
        rows = [c | {"tenant_id": None} for c in _citations(ref)]
        _write(db, "evidence.copy_citations", rows)
    tenants = db.execute(
        "SELECT DISTINCT tenant_id FROM geo.citations WHERE sample_id = %s", (ref.sample_id,)
    ).fetchall()
    assert [t["tenant_id"] for t in tenants] == [ref.tenant_id]


def test_a_citation_of_no_answer_revision_is_refused(db: Any) -> None:
    ref = seed_sample(db)
    with db.transaction():
        _write(db, "evidence.copy_answers", [_answer(ref)])
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="no such answer revision"):
        with db.transaction():
            _write(db, "evidence.copy_citations", _citations(ref, 2))


def test_deleting_a_sample_deletes_its_citations_and_object_rows(db: Any) -> None:
    ref, other = seed_sample(db), seed_sample(db)
    with db.transaction():
        _write(db, "evidence.copy_answers", [_answer(ref), _answer(other)])
        rows = _citations(ref) + _citations(other)
        _write(db, "evidence.copy_citations", rows)
        _write(db, "evidence.copy_objects", _objects(ref) + _objects(other))
    with db.transaction():
        db.execute("DELETE FROM geo.samples WHERE sample_id = %s", (ref.sample_id,))
    left = db.execute(
        "SELECT sample_id, count(*) AS n FROM geo.citations WHERE sample_id = ANY(%s)"
        " GROUP BY sample_id",
        ([ref.sample_id, other.sample_id],),
    ).fetchall()
    assert [(r["sample_id"], r["n"]) for r in left] == [(other.sample_id, CITATIONS_PER_ANSWER)]
    objects = db.execute(
        "SELECT DISTINCT sample_id FROM geo.evidence_objects WHERE sample_id = ANY(%s)",
        ([ref.sample_id, other.sample_id],),
    ).fetchall()
    assert [r["sample_id"] for r in objects] == [other.sample_id]


def test_an_answer_revision_key_never_changes(db: Any) -> None:
    ref = seed_sample(db)
    with db.transaction():
        _write(db, "evidence.copy_answers", [_answer(ref)])
        _write(db, "evidence.copy_citations", _citations(ref))
    with pytest.raises(psycopg.errors.RestrictViolation):
        with db.transaction():
            db.execute("UPDATE geo.answers SET revision = 2 WHERE sample_id = %s", (ref.sample_id,))


def _scans_of_samples(db: Any) -> dict[str, int]:
    """What this transaction has read of geo.samples so far (pending statistics)."""
    row = db.execute(
        "SELECT seq_scan, seq_tup_read, coalesce(idx_tup_fetch, 0) AS idx_tup_fetch"
        " FROM pg_stat_xact_user_tables WHERE relid = 'geo.samples'::regclass"
    ).fetchone()
    return dict(row)


def test_the_citation_guard_reads_the_batch_s_samples_not_the_table(db: Any) -> None:
    """Migration 0089: the guard's lock query was a hash join over a sequential scan of the whole
    of geo.samples (4.8 ms of an 8.3 ms batch insert on 20,000 samples). Counted by PostgreSQL:
    the rows of geo.samples a 50-sample batch's citations read, with 2,000 samples in the table
    (the old plan read all 2,001)."""
    first = seed_sample(db)
    with db.transaction():
        # More samples of the same run (repeat_index 1..2000): a table the planner would rather
        # probe than scan, as in production.
        db.execute(
            "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
            " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
            " SELECT geo.sample_id_for(s.run_id, s.question_revision, s.platform, s.device,"
            "        s.region, s.mode, g), s.run_id, s.tenant_id, 0, s.question_revision, 0,"
            "        s.platform, s.device, s.region, s.mode, g, s.screenshot_policy"
            "   FROM geo.samples s, generate_series(1, 2000) g WHERE s.sample_id = %s",
            (first.sample_id,),
        )
    db.execute("ANALYZE geo.samples")
    refs = [
        SampleRef(r["sample_id"], first.run_id, first.tenant_id)
        for r in db.execute(
            "SELECT sample_id FROM geo.samples WHERE run_id = %s ORDER BY sample_id LIMIT 50",
            (first.run_id,),
        ).fetchall()
    ]
    with db.transaction():
        _write(db, "evidence.copy_answers", [_answer(r) for r in refs])
        before = _scans_of_samples(db)
        rows = [c for r in refs for c in _citations(r)]
        _write(db, "evidence.copy_citations", rows)
        after = _scans_of_samples(db)
        locked = db.execute(
            "SELECT count(*) AS n FROM (SELECT 1 FROM geo.samples WHERE sample_id = ANY(%s)"
            " FOR KEY SHARE NOWAIT) l",
            ([r.sample_id for r in refs],),
        ).fetchone()["n"]
    read = {k: after[k] - before[k] for k in after}
    assert read["seq_scan"] == 0 and read["seq_tup_read"] == 0, read
    # One probe per distinct sample of the batch, nothing more.
    assert read["idx_tup_fetch"] <= len(refs), read
    assert locked == len(refs)


def _function_calls(db: Any, name: str) -> int:
    """Calls of a PL/pgSQL function so far in this transaction (track_functions = 'pl')."""
    row = db.execute(
        "SELECT coalesce(pg_stat_get_xact_function_calls(%s::regprocedure), 0) AS n", (name,)
    ).fetchone()
    return int(row["n"])


def test_a_finish_s_transition_rows_run_no_tenant_lookup(db: Any) -> None:
    # Each finish logs one transition row per layer that moved, two a sample with evidence on
    # (collection, evidence): they carry the sample's tenant, so the per-row trigger that would
    # look the run up is not called (migration 0090).
    refs = [seed_sample(db, tenant_id=t) for t in ("tenant-a", "tenant-b", "tenant-a")]
    ids = [r.sample_id for r in refs]
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'pl'")
        db.execute(
            "UPDATE geo.samples SET collection_state = 'running', lease_owner = 'w',"
            " lease_until = now() + interval '1 minute', fencing_token = fencing_token + 1"
            " WHERE sample_id = ANY(%s)",
            (ids,),
        )
        logged = _function_calls(db, "geo.log_sample_transitions()")
        lookups = _function_calls(db, "geo.tenant_of_run()")
    assert logged == 1  # the statement trigger ran: the count is live
    assert lookups == 0, lookups
    got = db.execute(
        "SELECT sample_id, tenant_id FROM geo.state_transitions"
        " WHERE sample_id = ANY(%s) AND layer = 'collection' AND to_state = 'running'",
        (ids,),
    ).fetchall()
    assert sorted((g["sample_id"], g["tenant_id"]) for g in got) == sorted(
        (r.sample_id, r.tenant_id) for r in refs
    )


def test_a_transition_row_without_its_tenant_still_gets_its_run_s(db: Any) -> None:
    ref = seed_sample(db, tenant_id="tenant-b")
    with db.transaction():
        db.execute(
            "INSERT INTO geo.state_transitions (sample_id, run_id, layer, from_state, to_state,"
            " fencing_token, attempt_no) VALUES (%s, %s, 'collection', 'queued', 'running', 1, 1)",
            (ref.sample_id, ref.run_id),
        )
    row = db.execute(
        "SELECT tenant_id FROM geo.state_transitions WHERE sample_id = %s", (ref.sample_id,)
    ).fetchone()
    assert row["tenant_id"] == "tenant-b"


def _scans_of_table(plan: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads ``table``."""
    found = [plan] if plan.get("Relation Name") == table else []
    for child in plan.get("Plans", []):
        found += _scans_of_table(child, table)
    return found


def test_the_batch_read_probes_the_batch_s_objects_not_the_table(db: Any) -> None:
    """What recording reads before it decides (``evidence.samples_for_record``) asked "has this
    sample a screenshot already?" with an EXISTS that the planner may run as a hashed subplan:
    one pass over every screenshot row of geo.evidence_objects per completion batch, whatever
    the batch (the throughput bench's S3 row: a sequential scan of the whole table a batch,
    657 buffers on a 20,000-sample run, growing with every answer ever archived). A fresh
    database without statistics, 200 samples in the batch and 6,000 object rows of others in
    the table: every read of geo.evidence_objects must be a probe by the batch's sample."""
    first = seed_sample(db)
    with db.transaction():
        db.execute(
            "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
            " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
            " SELECT geo.sample_id_for(s.run_id, s.question_revision, s.platform, s.device,"
            "        s.region, s.mode, g), s.run_id, s.tenant_id, 0, s.question_revision, 0,"
            "        s.platform, s.device, s.region, s.mode, g, s.screenshot_policy"
            "   FROM geo.samples s, generate_series(1, 2200) g WHERE s.sample_id = %s",
            (first.sample_id,),
        )
    ids = [
        r["sample_id"]
        for r in db.execute(
            "SELECT sample_id FROM geo.samples WHERE run_id = %s ORDER BY sample_id",
            (first.run_id,),
        ).fetchall()
    ]
    archived, batch = ids[:2000], ids[2000:2200]
    with db.transaction():  # three object rows for each of 2,000 other samples
        refs = [SampleRef(s, first.run_id, first.tenant_id) for s in archived]
        _write(db, "evidence.copy_objects", [o for r in refs for o in _objects(r)])
    # One of the batch has a screenshot: the answer must still say so.
    shot = SampleRef(batch[7], first.run_id, first.tenant_id)
    with db.transaction():
        shot_row = _objects(shot)[0] | {"kind": "screenshot", "mime_type": "image/png"}
        _write(db, "evidence.copy_objects", [shot_row])
    query = Q("evidence.samples_for_record").strip().rstrip(";")
    explained = db.execute("EXPLAIN (FORMAT JSON) " + query, {"sample_ids": batch}).fetchone()
    plan = next(iter(explained.values()))[0]["Plan"]
    reads = _scans_of_table(plan, "evidence_objects")
    assert reads, plan
    for node in reads:
        cond = node.get("Index Cond", "") + node.get("Recheck Cond", "")
        assert "sample_id = s.sample_id" in cond, node
    got = db.execute(Q("evidence.samples_for_record"), {"sample_ids": batch}).fetchall()
    assert sorted(r["sample_id"] for r in got) == sorted(batch)
    with_shot = {
        r["sample_id"] for r in got if any(o.startswith("screenshot ") for o in r["objects"])
    }
    assert with_shot == {shot.sample_id}


def _nested_plans(db: Any, statements: list[tuple[str, Any]]) -> list[str]:
    """The plans PostgreSQL executed for ``statements`` and every statement they ran inside
    (auto_explain, the server's own record), in one session, each statement rolled back."""
    plans: list[str] = []
    db.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    for stmt in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET client_min_messages = log",
    ):
        db.execute(stmt)
    db.commit()
    for sql, params in statements:
        plans.clear()
        with db.transaction(force_rollback=True):
            db.execute(sql, params)
    return plans


def test_the_transition_log_pairs_a_statement_s_rows_without_a_nested_loop(db: Any) -> None:
    """Migration 0091: log_sample_transitions joins the statement's old and new sample rows
    (for its check and its INSERT). Its statements are planned once per session, a transition
    table estimated at the row count of the call that planned them: a session whose first UPDATE
    of samples moved one sample kept a nested loop, n x n row comparisons for every later batch
    (an 80-sample finish: 6,320 rows removed by the join filter). Counted by PostgreSQL: the
    rows its joins compared and threw away for a 40-sample UPDATE after a 1-sample one, and no
    JIT compilation or scan of geo.runs on the way (reopen_run_retention, planned inside)."""
    first = seed_sample(db)
    with db.transaction():
        db.execute(
            "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
            " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
            " SELECT geo.sample_id_for(s.run_id, s.question_revision, s.platform, s.device,"
            "        s.region, s.mode, g), s.run_id, s.tenant_id, 0, s.question_revision, 0,"
            "        s.platform, s.device, s.region, s.mode, g, s.screenshot_policy"
            "   FROM geo.samples s, generate_series(1, 39) g WHERE s.sample_id = %s",
            (first.sample_id,),
        )
    ids = [
        r["sample_id"]
        for r in db.execute(
            "SELECT sample_id FROM geo.samples WHERE run_id = %s", (first.run_id,)
        ).fetchall()
    ]
    assert len(ids) == 40
    move = (
        "UPDATE geo.samples SET collection_state = 'running', lease_owner = 'w',"
        " lease_until = now() + interval '1 minute', fencing_token = fencing_token + 1"
        " WHERE sample_id = ANY(%s)"
    )
    plans = _nested_plans(db, [(move, ([first.sample_id],)), (move, (ids,))])
    joins = [p for p in plans if "FROM old_samples o JOIN new_samples n" in p]
    assert len(joins) == 2, plans  # the check and the INSERT of the 40-sample statement
    thrown = [int(n) for p in joins for n in re.findall(r"Rows Removed by Join Filter: (\d+)", p)]
    assert sum(thrown) == 0, joins
    inserted = [p for p in joins if "Insert on state_transitions" in p]
    assert len(inserted) == 1 and "rows=40 loops=1" in inserted[0], inserted
    reopen = [p for p in plans if "UPDATE geo.runs r SET raw_expired_at" in p]
    assert len(reopen) == 1, plans
    assert "Seq Scan on runs" not in reopen[0], reopen
    assert not [p for p in joins + reopen if "JIT:" in p]
