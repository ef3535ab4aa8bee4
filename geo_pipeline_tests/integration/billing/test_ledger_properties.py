"""Property tests of the ledger against the real database (R15, R23, R24).

Random sequences of charges (every platform rule, every feature flag), duplicate callbacks,
refunds, deposits, adjustments and a close are applied to a real run; an independent model (prices
straight from the platforms' price lists) predicts every amount. After every sequence: no
duplicate posting; charges never exceed the reservation without an explicit adjustment; at close
reserve + adjustments = charge + release; refunds never exceed charges; the balances the view
reports equal the balances recomputed from the raw entries and the model; no float anywhere.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geo_pipeline.billing import ledger
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.store.queries import Q
from geo_pipeline_tests.integration.billing.helpers import CAPS, create, make_plan

_ids = itertools.count()

CHANNELS = {
    "doubao": {"platform": "doubao", "device": "web"},  # charged
    "deepseek": {"platform": "deepseek", "device": "web", "modes": ["deep_thinking"]},  # f_a_f
    "kimi": {"platform": "kimi", "device": "web", "modes": ["web_search"]},  # free
}

charge_ev = st.tuples(
    st.just("charge"),
    st.integers(0, 3),  # sample index (mod number of samples): few, so retries meet
    st.integers(1, 3),  # attempt
    st.sampled_from(["completed", "failed"]),
    st.booleans(),  # deep thinking used
    st.booleans(),  # web search used
    st.booleans(),  # screenshot used
)
events = st.lists(
    st.one_of(
        charge_ev,
        charge_ev,
        charge_ev,
        st.tuples(st.just("dup"), st.integers(0, 50)),
        st.tuples(st.just("refund"), st.integers(0, 50), st.integers(1, 30)),
        st.tuples(st.just("deposit"), st.integers(1, 500)),
        st.tuples(st.just("adjust"), st.integers(-50, 50).filter(bool)),
        st.tuples(st.just("close")),
    ),
    max_size=25,
)


def expected_amount(sample, rule, outcome, dt, ws, shot, already):
    """The oracle, straight from the price list (not from geo_pipeline.domain.billing)."""
    p = CAPS[sample.platform].prices
    if rule == "free_after_failure" and outcome == "failed":
        return 0
    if rule == "free" and already:
        return 0
    amount = p.base[sample.mode]
    if dt and sample.mode == "deep_thinking":
        amount += p.deep_thinking
    if ws and sample.mode == "web_search":
        amount += p.web_search
    if shot and sample.screenshot_policy != "off":
        amount += p.screenshot
    return amount


def recomputed_balances(db, tenant):
    sums = defaultdict(int)
    for r in db.execute(Q("billing.tenant_entry_sums"), {"tenant_id": tenant}).fetchall():
        assert isinstance(r["total_minor"], int)
        sums[(r["kind"], r["adjusts"])] += r["total_minor"]
    g = sums.__getitem__
    reserved = (
        g(("reserve", ""))
        - g(("charge", ""))
        - g(("release", ""))
        + g(("adjustment", "reservation"))
    )
    spent = g(("charge", "")) - g(("refund", ""))
    available = (
        g(("deposit", ""))
        - g(("reserve", ""))
        + g(("release", ""))
        + g(("refund", ""))
        + g(("adjustment", "available"))
        - g(("adjustment", "reservation"))
    )
    return available, reserved, spent


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    platforms=st.lists(st.sampled_from(sorted(CHANNELS)), min_size=1, max_size=3, unique=True),
    max_attempts=st.integers(1, 3),
    screenshot=st.sampled_from(["optional", "off"]),
    headroom=st.integers(0, 300),
    seq=events,
)
def test_random_event_sequences_keep_the_ledger_exact(
    db, platforms, max_attempts, screenshot, headroom, seq
):
    n = next(_ids)
    tenant, run_id = f"prop{n}", f"prop-run-{n}"
    plan_kw = {
        "tenant": tenant,
        "questions": 1,
        "repeats": 2,
        "channels": [CHANNELS[p] for p in platforms],
        "max_attempts": max_attempts,
        "screenshot": screenshot,
    }
    est = make_plan(run_id, **plan_kw).quote.estimated_max.amount_minor
    deposited = est + headroom
    ledger.deposit(db, tenant, deposited, "CNY", f"{tenant}:dep0")
    plan = create(db, run_id, **plan_kw)
    rules_ = {p: CAPS[p].prices.retry_fee_rule for p in platforms}
    samples = plan.samples

    posted: dict[str, tuple[ChargeRequest, int]] = {}  # key -> (request, expected amount)
    charged_samples: set[str] = set()
    refunded: dict[str, int] = defaultdict(int)
    adjusted = 0
    reserve_left = est
    overrun = 0
    closed = False
    released = 0
    history: list[ChargeRequest] = []

    for ev in seq:
        kind = ev[0]
        if kind in ("charge", "dup"):
            if kind == "charge":
                _, si, attempt, outcome, dt, ws, shot = ev
                s = samples[si % len(samples)]
                req = ChargeRequest(
                    tenant,
                    run_id,
                    s.sample_id,
                    attempt,
                    f"{s.sample_id}:{attempt}",
                    s.platform,
                    s.mode,
                    outcome,
                    dt,
                    ws,
                    shot,
                )
            else:
                if not history:
                    continue
                req = history[ev[1] % len(history)]
            history.append(req)
            key = req.idempotency_key
            result = ledger.post_charge(db, req)
            db.commit()
            if key in posted:
                assert result is None, "a duplicate callback posted again"
                continue
            s = next(x for x in samples if x.sample_id == req.sample_id)
            amount = expected_amount(
                s,
                rules_[s.platform],
                req.upstream_outcome,
                req.deep_thinking_used,
                req.web_search_used,
                req.screenshot_used,
                req.sample_id in charged_samples,
            )
            posted[key] = (req, amount)
            assert (result is None) == (amount == 0)
            if amount:
                charged_samples.add(req.sample_id)
            over = max(0, amount - reserve_left)
            overrun += over
            reserve_left = reserve_left + over - amount
        elif kind == "refund":
            if not posted:
                continue
            req, amount = list(posted.values())[ev[1] % len(posted)]
            want = ev[2]
            key = f"refund:{next(_ids)}"
            try:
                ledger.refund(db, run_id, req.upstream_id, want, "reconciled", key)
                ok = True
            except ledger.RefundExceedsCharges:
                ok = False
            db.commit()
            assert ok == (refunded[req.upstream_id] + want <= amount)
            if ok:
                refunded[req.upstream_id] += want
        elif kind == "deposit":
            ledger.deposit(db, tenant, ev[1], "CNY", f"{tenant}:dep:{next(_ids)}")
            deposited += ev[1]
        elif kind == "adjust":
            ledger.adjust(db, tenant, ev[1], "CNY", "test", f"{tenant}:adj:{next(_ids)}")
            adjusted += ev[1]
        elif kind == "close":
            result = ledger.close_run(db, run_id, force=True)
            if not closed:
                assert result.closed_now and result.released.amount_minor == reserve_left
                released, reserve_left, closed = reserve_left, 0, True
            else:
                assert not result.closed_now and result.released.amount_minor == released

    charged = sum(a for _, a in posted.values())
    # No duplicate posting: one charge entry per (sample, attempt), the model's amounts exactly.
    entries = ledger.run_ledger(db, run_id)["entries"]
    charge_entries = [e for e in entries if e["kind"] == "charge"]
    assert len(charge_entries) == len(posted)
    assert len({e["idempotency_key"] for e in entries}) == len(entries)
    assert {e["idempotency_key"]: e["amount_minor"] for e in charge_entries} == {
        k: a for k, (_, a) in posted.items()
    }
    # Charges never exceed the reservation without an explicit, flagged adjustment.
    t = ledger.run_ledger(db, run_id)["totals"]
    assert t["charged_minor"] == charged
    assert t["overrun_minor"] == overrun
    assert (
        t["charged_minor"] <= t["reserved_total_minor"] + t["overrun_minor"] - t["released_minor"]
    )
    review = ledger.entries_for_review(db, run_id)
    assert sum(r["amount_minor"] for r in review) == overrun
    assert all(r["details"]["review"] == ledger.REVIEW_OVER_RESERVATION for r in review)
    # At close: reserve (+ adjustments into it) = charge + release.
    if closed:
        assert (
            t["reserved_total_minor"] + t["overrun_minor"]
            == t["charged_minor"] + t["released_minor"]
        )
    # Refunds never exceed charges, per upstream task and in total.
    per_upstream_charge = {req.upstream_id: a for req, a in posted.values()}
    for up, r in refunded.items():
        assert r <= per_upstream_charge[up]
    assert t["refunded_minor"] == sum(refunded.values()) <= t["charged_minor"]
    # Reported balances = recomputed from the raw entries = the model; all integers.
    b = ledger.balances(db, tenant)
    reported = (b.available.amount_minor, b.reserved.amount_minor, b.spent.amount_minor)
    assert all(type(x) is int for x in reported)
    assert reported == recomputed_balances(db, tenant)
    v = ledger.balances_from_entries(db, tenant)
    assert reported == (v.available.amount_minor, v.reserved.amount_minor, v.spent.amount_minor)
    assert b.deposited == v.deposited
    model_spent = charged - sum(refunded.values())
    model_reserved = reserve_left
    model_available = deposited + adjusted - model_reserved - model_spent
    assert reported == (model_available, model_reserved, model_spent)
    assert ledger.account_drift(db, run_id) == []
