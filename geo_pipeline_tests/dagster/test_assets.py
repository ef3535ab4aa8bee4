"""Assets materialised against real PostgreSQL, with their checks — passing on good data and
failing on deliberately broken data."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from geo_pipeline.defs import names
from geo_pipeline.defs.billing.assets import billing_reconciliation
from geo_pipeline.defs.collection.assets import collection_results, sampling_plan
from geo_pipeline.defs.evidence.assets import validated_evidence
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.resources import PipelineSettingsResource
from geo_pipeline_tests.dagster.conftest import (
    check_results,
    check_severity,
    create_run,
    finish,
    sample_ids,
)

WEB = "deepseek__web"


def materialise(
    assets: list[Any], key: Any, instance: dg.DagsterInstance, resources: dict[str, Any]
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        assets, partition_key=key, instance=instance, resources=resources, raise_on_error=False
    )


def collect_rows(conn: Any, run_id: str, channel: str) -> int:
    """Samples of the partition covered by a collect hint (one hint per batch and channel)."""
    row = conn.execute(
        "SELECT coalesce(sum((payload->>'samples')::int), 0) AS n FROM geo.outbox "
        "WHERE kind = 'collect' AND sample_id IS NULL AND run_id = %s AND channel = %s",
        (run_id, channel),
    ).fetchone()
    return int(row["n"])


def metadata(result: dg.ExecuteInProcessResult, asset: dg.AssetKey) -> dict[str, Any]:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


# --------------------------------------------------------------------------- sampling_plan
def test_sampling_plan_dispatches_its_partition_once_with_passing_checks(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    key = partition_key(run_id, WEB)
    first = materialise([sampling_plan], key, dg_instance, resources)
    assert first.success
    assert check_results(first) == {
        names.CHECK_PLAN_VOLUME: True,
        names.CHECK_PLAN_IDENTITIES: True,
        names.CHECK_PLAN_BATCHES: True,
    }
    meta = metadata(first, names.SAMPLING_PLAN)
    assert meta["samples"] == 4 and meta["dispatched_now"] == 4
    assert meta["collection_states"] == {"queued": 4}
    assert collect_rows(conn, run_id, WEB) == 4
    assert collect_rows(conn, run_id, "qwen__app") == 0  # another partition's samples wait

    again = materialise([sampling_plan], key, dg_instance, resources)
    assert again.success
    assert metadata(again, names.SAMPLING_PLAN)["dispatched_now"] == 0
    assert collect_rows(conn, run_id, WEB) == 4


def test_sampling_plan_checks_fail_on_a_broken_plan_and_nothing_is_dispatched(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    ids = sample_ids(conn, run_id, WEB)
    # Break the plan three ways: a batch over its cap, a lost sample, and a duplicate identity
    # under a made-up id (the id-is-identity-hash check dropped to let the bad row in).
    conn.execute("UPDATE geo.batches SET size = size + 500 WHERE run_id = %s", (run_id,))
    conn.execute("DELETE FROM geo.samples WHERE sample_id = %s", (ids[0],))
    conn.execute("ALTER TABLE geo.samples DROP CONSTRAINT sample_id_is_identity_hash")
    conn.execute(
        """INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,
             question_index, platform, device, region, mode, repeat_index, screenshot_policy)
           SELECT 's' || repeat('0', 24), run_id, tenant_id, batch_no, question_revision,
                  question_index, platform, device, region, mode, repeat_index, screenshot_policy
           FROM geo.samples WHERE sample_id = %s""",
        (ids[1],),
    )
    result = materialise([sampling_plan], partition_key(run_id, WEB), dg_instance, resources)
    assert not result.success  # blocking checks failed
    assert check_results(result) == {
        names.CHECK_PLAN_VOLUME: True,  # 4 rows again: one lost, one duplicate
        names.CHECK_PLAN_IDENTITIES: False,
        names.CHECK_PLAN_BATCHES: False,
    }
    conn.execute("DELETE FROM geo.samples WHERE sample_id = 's' || repeat('0', 24)")
    result = materialise([sampling_plan], partition_key(run_id, WEB), dg_instance, resources)
    assert check_results(result)[names.CHECK_PLAN_VOLUME] is False
    assert collect_rows(conn, run_id, WEB) == 0  # a plan failing its checks is never dispatched


def test_a_channel_outside_the_run_fails_clearly(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    # Only the run's channels are partitions; a stray key added by hand still fails clearly.
    stray = partition_key(run_id, "kimi__web")
    dg_instance.add_dynamic_partitions(names.RUN_CHANNEL_PARTITIONS, [stray])
    result = materialise([sampling_plan], stray, dg_instance, resources)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "kimi__web is not part of run" in str(
        failure.step_failure_data.user_failure_data.description
    )


# --------------------------------------------------------------------------- collection_results
def test_collection_results_refuses_a_partition_still_collecting(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB, only=3)
    result = materialise([collection_results], partition_key(run_id, WEB), dg_instance, resources)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    description = failure.step_failure_data.user_failure_data.description
    assert "still collecting: 1 queued and 0 running of 4" in description
    assert not result.get_asset_materialization_events()


def test_finished_partition_materialises_collection_and_evidence_with_passing_checks(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB, fail=1, invalid=1)
    result = materialise(
        [collection_results, validated_evidence], partition_key(run_id, WEB), dg_instance, resources
    )
    assert result.success
    checks = check_results(result)
    assert checks == {
        names.CHECK_NO_NON_TERMINAL: True,
        names.CHECK_EXCLUDED_SHARE: True,
        names.CHECK_ACCEPTANCE_RECORDED: True,
        names.CHECK_NO_DUPLICATE_COMPLETION: True,
        names.CHECK_FIELD_COMPLETENESS: True,
        names.CHECK_SAMPLE_UNIQUENESS: True,
        names.CHECK_VALIDITY_RATE: True,  # 2 of 3 valid >= 0.5
        names.CHECK_CITATION_TRACEABILITY: True,
        names.CHECK_SCREENSHOT_MISSING: True,
        names.CHECK_OBJECTS_READABLE: True,
    }
    col = metadata(result, names.COLLECTION_RESULTS)
    assert col["overall"] == "partial"
    assert col["collection_states"] == {"completed": 3, "failed": 1}
    assert col["failure_reasons"] == {"INVALID_PARAMS": 1}
    assert col["completed_rate"] == 0.75
    # Every sample terminal: published complete, nothing excluded.
    assert (col["published_on"], col["included"], col["excluded"]) == ("complete", 4, 0)
    ev = metadata(result, names.VALIDATED_EVIDENCE)
    assert ev["answers"] == 3 and ev["valid_answers"] == 2
    # cited and retrieved apart, the names the CSV uses (issue #34: one name, one meaning)
    [trace] = [
        e for e in result.get_asset_check_evaluations()
        if e.check_name == names.CHECK_CITATION_TRACEABILITY
    ]  # fmt: skip
    keys = set(trace.metadata)
    assert {"cited", "retrieved"} <= keys and "citations" not in keys, keys


def test_collection_checks_fail_and_block_evidence_on_broken_data(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    done = finish(conn, run_id, WEB)
    a, b = done.completed[:2]
    # An acceptance record lost, and a completion logged twice.
    conn.execute("DELETE FROM geo.upstream_requests WHERE sample_id = %s", (a,))
    conn.execute(
        """INSERT INTO geo.state_transitions (sample_id, run_id, layer, from_state, to_state,
             fencing_token, attempt_no) VALUES (%s, %s, 'collection', 'running', 'completed', 1, 1)""",
        (b, run_id),
    )
    result = materialise(
        [collection_results, validated_evidence], partition_key(run_id, WEB), dg_instance, resources
    )
    assert not result.success
    checks = check_results(result)
    assert checks[names.CHECK_ACCEPTANCE_RECORDED] is False
    assert checks[names.CHECK_NO_DUPLICATE_COMPLETION] is False
    assert checks[names.CHECK_NO_NON_TERMINAL] is True
    # Blocking: the evidence set is not published from untrustworthy collection results.
    materialised = {e.asset_key for e in result.get_asset_materialization_events()}
    assert names.VALIDATED_EVIDENCE not in materialised
    assert names.CHECK_FIELD_COMPLETENESS not in checks


def test_evidence_checks_fail_on_broken_evidence(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    done = finish(conn, run_id, WEB, invalid=3)
    a, b, c, _ = done.completed
    conn.execute("UPDATE geo.citations SET normalized_url = '' WHERE sample_id = %s", (a,))
    conn.execute("DELETE FROM geo.answers WHERE sample_id = %s", (b,))
    conn.execute(
        "UPDATE geo.samples SET upstream_id = (SELECT upstream_id FROM geo.samples "
        "WHERE sample_id = %s) WHERE sample_id = %s",
        (a, c),
    )
    conn.execute(
        "DELETE FROM geo.evidence_objects WHERE kind = 'screenshot' AND run_id = %s", (run_id,)
    )
    result = materialise([validated_evidence], partition_key(run_id, WEB), dg_instance, resources)
    checks = check_results(result)
    assert checks == {
        names.CHECK_FIELD_COMPLETENESS: False,
        names.CHECK_SAMPLE_UNIQUENESS: False,
        names.CHECK_VALIDITY_RATE: False,  # 0 of 3 remaining answers valid
        names.CHECK_CITATION_TRACEABILITY: False,
        names.CHECK_SCREENSHOT_MISSING: False,  # optional policy, 100% missing > 20%
        names.CHECK_OBJECTS_READABLE: True,  # what is recorded is still readable
    }
    assert check_severity(result, names.CHECK_VALIDITY_RATE) == dg.AssetCheckSeverity.WARN
    assert check_severity(result, names.CHECK_SCREENSHOT_MISSING) == dg.AssetCheckSeverity.WARN
    assert not result.success


def test_required_screenshot_missing_is_an_error(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    from geo_pipeline_tests.dagster.conftest import collection_config

    cfg = collection_config()
    cfg["screenshot"] = "required"
    run_id = create_run(conn, dg_instance, config=cfg)
    done = finish(conn, run_id, WEB)
    conn.execute(
        "DELETE FROM geo.evidence_objects WHERE kind = 'screenshot' AND sample_id = %s",
        (done.completed[0],),
    )
    result = materialise([validated_evidence], partition_key(run_id, WEB), dg_instance, resources)
    assert check_results(result)[names.CHECK_SCREENSHOT_MISSING] is False
    assert check_severity(result, names.CHECK_SCREENSHOT_MISSING) == dg.AssetCheckSeverity.ERROR


# --------------------------------------------------------------------------- billing
def test_billing_reconciliation_per_run_with_checks(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    for ch in ("deepseek__web", "qwen__app"):
        finish(conn, run_id, ch)
    # No platform publishes statements in this test (the end-to-end test fetches them from the
    # simulator): every line stays pending, which is explained by timing.
    resources = {**resources, "settings": PipelineSettingsResource(import_fee_statements=False)}
    result = materialise([billing_reconciliation], run_id, dg_instance, resources)
    assert result.success, result.all_events
    assert check_results(result) == {
        names.CHECK_ZERO_UNEXPLAINED: True,  # no statement imported yet: every line pending
        names.CHECK_NO_DUPLICATE_CHARGE: True,
    }
    meta = metadata(result, names.BILLING_RECONCILIATION)
    assert meta["lines"] == 8
    assert meta["classifications"]["pending"] == 8
    assert meta["unexplained_difference_minor"] == 0
    closed = conn.execute("SELECT closed_at FROM geo.runs WHERE run_id = %s", (run_id,)).fetchone()
    assert closed["closed_at"] is not None  # a finished run's unused reservation is released
    assert meta["close_refused"] is None  # (charges used the whole estimate: nothing left)


def test_duplicate_charge_fails_the_billing_check(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    done = finish(conn, run_id, WEB)
    sid = done.completed[0]
    conn.execute(
        """INSERT INTO geo.ledger_entries (tenant_id, kind, amount_minor, currency, run_id,
             sample_id, attempt_no, upstream_id, idempotency_key)
           VALUES ('acme', 'charge', 8, 'CNY', %s, %s, 1, %s, 'charge:replayed-under-new-key')""",
        (run_id, sid, f"up-{sid}"),
    )
    resources = {**resources, "settings": PipelineSettingsResource(import_fee_statements=False)}
    result = materialise([billing_reconciliation], run_id, dg_instance, resources)
    assert check_results(result)[names.CHECK_NO_DUPLICATE_CHARGE] is False
    assert not result.success


@pytest.mark.parametrize("channel", ["deepseek__web"])
def test_partition_keys_are_run_and_channel(channel: str) -> None:
    from geo_pipeline.defs.partitions import parse_partition_key

    key = partition_key("r1", channel)
    assert key == f"r1|{channel}"
    assert parse_partition_key(key) == ("r1", channel)


# --------------------------------------------------------------------------- analysis
def test_analysis_and_visibility_materialise_with_passing_checks(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    from geo_pipeline.defs.analysis.assets import brand_analysis, brand_visibility

    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB, fail=1, invalid=1)
    result = materialise(
        [collection_results, validated_evidence, brand_analysis, brand_visibility],
        partition_key(run_id, WEB),
        dg_instance,
        resources,
    )
    assert result.success
    checks = check_results(result)
    assert checks[names.CHECK_VALID_ANSWERS_ANALYSED] is True
    assert checks[names.CHECK_NO_PENDING_AS_NOT_MENTIONED] is True
    assert checks[names.CHECK_VISIBILITY_MATCHES] is True
    analysis = metadata(result, names.BRAND_ANALYSIS)["analysis"]
    assert analysis["analysed"] == 3  # 3 completed answers; the invalid one is analysed as such
    vis = metadata(result, names.BRAND_VISIBILITY)
    assert vis["target_brand"] == "Acme"
    assert vis["analysed_answers"] == 2  # only valid answers with accepted analysis count
    assert vis["target_mention_rate"] == 1.0
    # Typed per-brand table with both intervals; the clustered one is never narrower.
    rows = {r.data["brand"]: r.data for r in vis["visibility_table"].records}
    acme = rows["Acme"]
    assert acme["target"] is True and acme["n"] == 2 and acme["mention_rate"] == 1.0
    assert acme["lower_95"] is not None and acme["n_effective"] is not None
    # the method of the interval shown, as the analyst table names it for this row
    named = conn.execute(
        "SELECT mention_rate_interval AS m FROM analytics.channel_brand_metrics"
        " WHERE run_id = %s AND channel = %s AND brand = 'Acme'",
        (run_id, WEB),
    ).fetchone()["m"]
    assert acme["interval"] == named
    assert named in ("Wilson, 1 question", "question-clustered, 2 questions")
    assert acme["lower_95"] <= acme["wilson_lower"] + 1e-9
    assert vis["target_n_effective"] == acme["n_effective"]
    # The other channel's samples are untouched: still queued, still "analysing"-free.
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM geo.samples WHERE channel = 'qwen__app' "
            "AND analysis_state <> 'pending'"
        ).fetchone()["n"]
        == 0
    )


def test_analysis_and_visibility_checks_fail_on_broken_data(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    from geo_pipeline.defs.analysis import checks
    from geo_pipeline.defs.analysis.assets import brand_analysis, brand_visibility

    run_id = create_run(conn, dg_instance)
    done = finish(conn, run_id, WEB)
    assert materialise(
        [brand_analysis, brand_visibility], partition_key(run_id, WEB), dg_instance, resources
    ).success
    # A valid answer whose analysis went back to pending (e.g. a half-finished re-analysis).
    conn.execute(
        "UPDATE geo.samples SET analysis_state = 'pending' WHERE sample_id = %s",
        (done.completed[0],),
    )
    assert checks.valid_answers_analysed(conn, run_id, WEB).passed is False
    # An analyst table that disagrees with the facts.
    table = [
        dict(r)
        for r in conn.execute(
            "SELECT brand, samples, n + 1 AS n, mentions FROM analytics.channel_brand_metrics "
            "WHERE run_id = %s AND channel = %s",
            (run_id, WEB),
        ).fetchall()
    ]
    assert checks.visibility_matches(conn, run_id, WEB, table).passed is False
    # An analyst view that reports "not mentioned" for what is still being analysed (the
    # view replaced by a broken one with the columns the check reads).
    conn.execute("DROP VIEW analytics.sample_brand_facts CASCADE")
    conn.execute(
        """CREATE VIEW analytics.sample_brand_facts AS
           SELECT s.sample_id, s.run_id, s.channel, s.analysis_state,
                  CASE WHEN s.analysis_state = 'accepted' THEN 'known' ELSE 'analysing' END
                    AS mention_status,
                  false AS mentioned
           FROM geo.samples s"""
    )
    failing = checks.pending_not_reported_as_not_mentioned(conn, run_id, WEB)
    assert failing.passed is False
    assert failing.metadata["offending"].value == 1


def test_archived_object_missing_or_altered_fails_the_evidence_check(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], evidence_dir: Any
) -> None:
    run_id = create_run(conn, dg_instance)
    done = finish(conn, run_id, WEB)
    a, b = done.completed[:2]
    (evidence_dir / f"acme/{run_id}/{a}/1/answer.md").unlink()
    (evidence_dir / f"acme/{run_id}/{b}/1/s.png").write_bytes(b"tampered")
    result = materialise([validated_evidence], partition_key(run_id, WEB), dg_instance, resources)
    assert not result.success
    [evaluation] = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == names.CHECK_OBJECTS_READABLE
    ]
    assert evaluation.passed is False
    problems = evaluation.metadata["problems"].value  # type: ignore[attr-defined]
    assert any(a in p and "answer_raw" in p for p in problems)
    assert any(b in p and "screenshot" in p for p in problems)


def test_an_unexplained_difference_warns_and_leaves_billing_green(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    """Issue 36: a fee statement that disagrees with our charge (amount_mismatch) is a business
    signal — the operations alert's ``reconciliation`` incident tells on-call — not a broken
    invariant: the billing run stays green, and the check fails as a non-blocking WARN that
    names the run's partition."""
    from collections import defaultdict

    from geo_pipeline.billing import reconcile
    from geo_pipeline.connectors.base import FeeLine, FeeStatement
    from geo_pipeline.store.queries import fetch_all

    run_id = create_run(conn, dg_instance)
    for ch in ("deepseek__web", "qwen__app"):
        finish(conn, run_id, ch)
    charges = fetch_all(conn, "billing.run_charges", {"run_id": run_id})
    assert charges
    statements: dict[tuple[str, str, str], list[FeeLine]] = defaultdict(list)
    for i, c in enumerate(charges):
        day = (str(c["platform"]), c["charged_on"].isoformat(), str(c["currency"]))
        for j, (item, amount) in enumerate(sorted(c["details"]["items"].items())):
            theirs = int(amount) + (5 if i == j == 0 else 0)  # one task 5 minor units off
            statements[day].append(FeeLine(str(c["upstream_id"]), item, theirs, str(c["currency"])))
    for (platform, day, currency), lines in statements.items():
        reconcile.import_statement(conn, FeeStatement(platform, day, currency, tuple(lines)))
    resources = {**resources, "settings": PipelineSettingsResource(import_fee_statements=False)}

    result = materialise([billing_reconciliation], run_id, dg_instance, resources)

    assert result.success, result.all_events
    assert metadata(result, names.BILLING_RECONCILIATION)["classifications"]["amount_mismatch"] == 1
    assert check_results(result)[names.CHECK_ZERO_UNEXPLAINED] is False
    assert check_severity(result, names.CHECK_ZERO_UNEXPLAINED) == dg.AssetCheckSeverity.WARN
    [evaluation] = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == names.CHECK_ZERO_UNEXPLAINED
    ]
    assert evaluation.metadata["partition"].value == run_id
    spec = billing_reconciliation.get_spec_for_check_key(
        dg.AssetCheckKey(names.BILLING_RECONCILIATION, names.CHECK_ZERO_UNEXPLAINED)
    )
    assert spec.blocking is False
