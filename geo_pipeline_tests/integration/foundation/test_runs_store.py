"""Persisting plans (R2, R3, R5) and the one aggregation service (R7) on a real database."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.states import LAYERS, STATES, TRANSITIONS
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import runs as runstore
from geo_pipeline.store import status

CAPS = load_registry().capabilities()


@pytest.fixture(autouse=True)
def funded(db):
    """Runs are confirmed (money reserved) at creation, so the tenant needs a balance."""
    ledger.deposit(db, "acme", 10_000_000, "CNY", "test-deposit")
    db.commit()


PRICES = {p: c.prices for p, c in CAPS.items()}


def make_plan(run_id="run-a", **over):
    c = {
        "tenant": "acme",
        "monitor": "m1",
        "brand": {"name": "瑞幸", "aliases": ["Luckin"]},
        "questions": [f"question {i}?" for i in range(20)],
        "channels": [
            {"platform": "deepseek", "device": "web"},
            {"platform": "deepseek", "device": "app"},
            {"platform": "kimi", "device": "web"},
            {"platform": "qwen", "device": "web"},
        ],
        "repeats": 2,
    }
    c.update(over)
    n = normalise_and_validate(c, CAPS)
    return build_plan(n, quote(n, PRICES), run_id)


def test_create_run_persists_everything_in_one_transaction(db):
    plan = make_plan()
    rid, created = create_run(db, plan)
    assert (rid, created) == ("run-a", True)
    one = db.execute
    assert one("SELECT count(*) AS n FROM geo.samples WHERE run_id='run-a'").fetchone()["n"] == 160
    assert one("SELECT count(*) AS n FROM geo.batches WHERE run_id='run-a'").fetchone()["n"] == 2
    # One collect hint per (batch, channel), together covering every sample exactly once.
    hints = one(
        "SELECT count(*) AS n, sum((payload->>'samples')::int) AS covered, "
        "count(DISTINCT (batch_no, channel)) AS groups FROM geo.outbox "
        "WHERE run_id='run-a' AND kind = 'collect' AND sample_id IS NULL"
    ).fetchone()
    groups = one(
        "SELECT count(DISTINCT (batch_no, channel)) AS n FROM geo.samples WHERE run_id='run-a'"
    ).fetchone()["n"]
    assert hints["n"] == hints["groups"] == groups and hints["covered"] == 160
    assert (
        one("SELECT count(*) AS n FROM geo.outbox WHERE run_id='run-a'").fetchone()["n"] == groups
    )
    assert one("SELECT count(*) AS n FROM geo.question_revisions").fetchone()["n"] == 20
    q = one("SELECT estimated_max_minor FROM geo.quote_snapshots").fetchone()
    assert q["estimated_max_minor"] == plan.quote.estimated_max.amount_minor
    snap = one("SELECT config FROM geo.config_snapshots").fetchone()["config"]
    assert snap["repeats"] == 2 and snap["tenant"] == "acme"
    assert runstore.run_config(db, "run-a").snapshot_id == plan.config.snapshot_id


def test_replanning_is_a_noop_and_a_changed_config_is_refused(db):
    create_run(db, make_plan())
    again = create_run(db, make_plan())
    assert again == ("run-a", False)
    assert db.execute("SELECT count(*) AS n FROM geo.samples").fetchone()["n"] == 160
    assert runstore.dispatch(db, "run-a") == 0  # already dispatched: nothing new
    with pytest.raises(runstore.RunConflict):
        create_run(db, make_plan(repeats=3))
    # A next-day re-sample is a new run with new samples (R5).
    create_run(db, make_plan(run_id="run-b"))
    assert (
        db.execute("SELECT count(DISTINCT sample_id) AS n FROM geo.samples").fetchone()["n"] == 320
    )


def test_failed_creation_writes_nothing(db):
    plan = make_plan()
    db.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES ('other', 'o')")
    before = db.execute("SELECT count(*) AS n FROM geo.ledger_entries").fetchone()["n"]
    db.execute(
        "INSERT INTO geo.monitors (monitor_id, tenant_id, config) VALUES ('m1', 'other', '{}')"
    )
    db.commit()
    with pytest.raises(runstore.RunConflict, match="belongs to another tenant"):
        create_run(db, plan)
    assert db.execute("SELECT count(*) AS n FROM geo.runs").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM geo.config_snapshots").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM geo.ledger_entries").fetchone()["n"] == before


def test_short_balance_refuses_the_run_and_writes_nothing(db):
    plan = make_plan(tenant="poor")
    ledger.deposit(db, "poor", 1, "CNY", "tiny")
    with pytest.raises(ledger.InsufficientFunds, match="deposit at least"):
        create_run(db, plan)
    assert db.execute("SELECT count(*) AS n FROM geo.samples").fetchone()["n"] == 0
    assert (
        db.execute(
            "SELECT count(*) AS n FROM geo.ledger_entries WHERE tenant_id='poor'"
        ).fetchone()["n"]
        == 1
    )
    # Without confirmation the plan and its estimate are kept, but nothing is dispatched.
    _, created = create_run(db, plan, confirm=False)
    assert created and db.execute("SELECT count(*) AS n FROM geo.outbox").fetchone()["n"] == 0


def test_sample_identity_is_unique_in_the_database(db):
    # A second sample of an identity under another id is refused: every id is its identity's
    # hash (migration 0033), so the id's own sample collides on the primary key.
    create_run(db, make_plan())
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(
            """INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,
                 question_index, platform, device, region, mode, repeat_index, screenshot_policy)
               SELECT 's' || repeat('f', 24), run_id, tenant_id, batch_no, question_revision,
                 question_index, platform, device, region, mode, repeat_index, screenshot_policy
               FROM geo.samples LIMIT 1"""
        )
    db.rollback()


def _complete(db, sample_id, evidence="stored", reason=None):
    db.execute(
        "UPDATE geo.samples SET submission_state='submitting', collection_state='running', "
        "lease_until=now()+interval '1 min', fencing_token=fencing_token+1 WHERE sample_id=%s",
        (sample_id,),
    )
    db.execute(
        "UPDATE geo.samples SET submission_state='accepted', upstream_id='u-'||sample_id WHERE sample_id=%s",
        (sample_id,),
    )
    db.execute(
        "UPDATE geo.samples SET collection_state='completed', evidence_state=%s, evidence_reason=%s "
        "WHERE sample_id=%s",
        (evidence, reason, sample_id),
    )


def test_status_service_counts_layers_and_reasons(db):
    create_run(db, make_plan(questions=["only question?"], repeats=1))
    ids = [
        r["sample_id"] for r in db.execute("SELECT sample_id FROM geo.samples ORDER BY sample_id")
    ]
    assert status.run_status(db, "run-a").overall == "in_progress"
    _complete(db, ids[0])
    _complete(db, ids[1], "partial", "SCREENSHOT_UNAVAILABLE")
    _complete(db, ids[2])
    db.execute(
        "UPDATE geo.samples SET collection_state='failed', collection_reason='CANCELLED' WHERE sample_id=%s",
        (ids[3],),
    )
    db.commit()
    st = status.run_status(db, "run-a")
    assert st.overall == "partial"
    assert st.counts.collection == {"completed": 3, "failed": 1}
    # a failed collection's evidence is failed for the collection's reason (issue #34)
    assert st.counts.evidence_reasons == {"SCREENSHOT_UNAVAILABLE": 1, "CANCELLED": 1}
    assert st.counts.evidence == {"stored": 2, "partial": 1, "failed": 1}
    assert st.counts.failure_reasons == {"CANCELLED": 1}
    assert (
        st.analysing
    )  # completed samples whose analysis is pending: "analysing", not "not mentioned"
    # The same service per question (the run has one: the same counts) and per partition.
    qrev = db.execute("SELECT DISTINCT question_revision FROM geo.samples").fetchone()
    by_question = status.question_status(db, "run-a", qrev["question_revision"])
    assert by_question.counts == st.counts and by_question.overall == "partial"
    chans = status.channels_of_run(db, "run-a")
    assert chans == {"deepseek__app": 1, "deepseek__web": 1, "kimi__web": 1, "qwen__web": 1}
    per_channel = [status.partition_status(db, "run-a", c).counts.collection for c in chans]
    assert sum(sum(c.values()) for c in per_channel) == 4
    assert sorted(next(iter(c)) for c in per_channel) == ["completed"] * 3 + ["failed"]
    done = status.terminal_partitions(db, [("run-a", c) for c in chans])
    assert done == {("run-a", c) for c in chans}
    log = db.execute("SELECT count(*) AS n FROM geo.state_transitions").fetchone()["n"]
    assert (
        log == 3 * 5 + 1
    )  # each completion: submission x2, collection x2, evidence x1; one failure


# ------------------------------------------------------------- database rules == domain rules
moves = st.lists(st.tuples(st.sampled_from(LAYERS), st.integers(0, 3)), min_size=1, max_size=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seq=moves)
def test_database_accepts_exactly_the_sequences_the_rules_allow(db, seq):
    """Random single-layer moves from a fresh sample: the database accepts a move iff the pure rules
    allow it and the cross-layer invariants (CHECK constraints) hold."""
    from geo_pipeline.domain.states import INITIAL, cross_layer_ok

    with db.transaction(force_rollback=True):
        create_run(
            db,
            make_plan(
                questions=["q?"], repeats=1, channels=[{"platform": "kimi", "device": "web"}]
            ),
        )
        sid = db.execute("SELECT sample_id FROM geo.samples").fetchone()["sample_id"]
        state = dict(INITIAL)
        for layer, idx in seq:
            target = STATES[layer][idx]
            if target == state[layer]:
                continue
            proposed = {**state, layer: target}
            allowed = (state[layer], target) in TRANSITIONS[layer] and cross_layer_ok(proposed)
            # Give the row what the invariants about ids and leases need, so only states decide.
            extra = (
                "upstream_id = coalesce(upstream_id, 'u1'), lease_until = now() + interval '1 min'"
            )
            try:
                with db.transaction():
                    db.execute(
                        f"UPDATE geo.samples SET {layer}_state = %s, {extra} WHERE sample_id = %s",  # type: ignore[arg-type]
                        (target, sid),
                    )
                accepted = True
            except (psycopg.errors.CheckViolation, psycopg.errors.RaiseException):
                accepted = False
            assert accepted == allowed, f"{layer}: {state[layer]} -> {target} in {state}"
            if accepted:
                state = proposed


def test_create_run_dispatches_only_a_plan_that_passes_the_plan_checks(db):
    """The dispatch at creation is gated by the sampling_plan asset's checks (flows.create_run
    holds them): a plan missing a sample fails the volume check of its channel; the run is kept
    and reserved, nothing is queued."""
    import dataclasses

    from geo_pipeline.flows.create_run import (
        CHECK_PLAN_VOLUME,
        PlanChecksFailed,
        check_plan,
    )

    good = make_plan("run-ok")
    create_run(db, good)
    assert all(c.passed for c in check_plan(db, good.config, "run-ok"))
    assert len(check_plan(db, good.config, "run-ok")) == 3 * len(good.config.channels)

    plan = make_plan("run-short")
    short = dataclasses.replace(plan, samples=plan.samples[1:])
    lost = plan.samples[0].channel
    with pytest.raises(PlanChecksFailed) as err:
        create_run(db, short)
    db.commit()
    failed = {(c.name, c.channel) for c in err.value.failed}
    assert (CHECK_PLAN_VOLUME, lost) in failed  # (and the batch counts no longer add up)
    assert "NOT dispatched" in str(err.value) and "x 2 = " in str(err.value)
    one = db.execute
    assert one("SELECT count(*) AS n FROM geo.runs WHERE run_id='run-short'").fetchone()["n"] == 1
    assert one("SELECT count(*) AS n FROM geo.outbox WHERE run_id='run-short'").fetchone()["n"] == 0
    assert (
        one("SELECT count(*) AS n FROM geo.run_dispatches WHERE run_id='run-short'").fetchone()["n"]
        == 0
    )
