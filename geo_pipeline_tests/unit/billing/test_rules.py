"""Pure billing rules (R4, R15, R23, R24): charge of one attempt, over-reservation, classification."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.domain import billing as rules
from geo_pipeline.domain.money import MoneyError

DS = rules.UnitPrices(
    "deepseek", "deep_thinking", "v1", {"base": 8, "deep_thinking": 12, "screenshot": 3}
)


def test_base_only_when_no_feature_used():
    d = rules.charge_for_attempt(DS, "charged", "completed")
    assert (d.amount_minor, dict(d.items), d.free) == (8, {"base": 8}, False)


def test_surcharges_only_when_used_and_quoted():
    d = rules.charge_for_attempt(
        DS, "charged", "completed", deep_thinking_used=True, screenshot_used=True
    )
    assert d.amount_minor == 8 + 12 + 3
    assert dict(d.items) == {"base": 8, "deep_thinking": 12, "screenshot": 3}
    # web search was used but never quoted: not charged, and said so.
    d = rules.charge_for_attempt(DS, "charged", "completed", web_search_used=True)
    assert d.amount_minor == 8 and d.unquoted == ("web_search",)


@pytest.mark.parametrize(
    ("rule", "outcome", "already", "amount"),
    [
        ("charged", "completed", False, 8),
        ("charged", "failed", False, 8),
        ("charged", "completed", True, 8),
        ("free_after_failure", "completed", False, 8),
        ("free_after_failure", "failed", False, 0),
        ("free_after_failure", "completed", True, 8),
        ("free", "completed", False, 8),
        ("free", "failed", False, 8),
        ("free", "completed", True, 0),
        ("free", "failed", True, 0),
    ],
)
def test_retry_fee_rules_are_the_platforms(rule, outcome, already, amount):
    d = rules.charge_for_attempt(DS, rule, outcome, sample_already_charged=already)
    assert d.amount_minor == amount
    assert d.free == (amount == 0)
    assert (d.free_reason or "").startswith(rule if amount == 0 else "")


def test_unknown_rule_and_unfinished_outcome_are_refused():
    with pytest.raises(ValueError, match="retry fee rule"):
        rules.charge_for_attempt(DS, "maybe", "completed")
    with pytest.raises(ValueError, match="finished"):
        rules.charge_for_attempt(DS, "charged", "uncertain")


def test_unit_prices_from_quote_lines():
    lines = [
        {
            "platform": "doubao",
            "mode": "standard",
            "item": "base",
            "unit_price_minor": 6,
            "price_version": "d1",
        },
        {
            "platform": "doubao",
            "mode": "standard",
            "item": "screenshot",
            "unit_price_minor": 2,
            "price_version": "d1",
        },
        # the same item again (another screenshot policy) at the same price is fine
        {
            "platform": "doubao",
            "mode": "standard",
            "item": "base",
            "unit_price_minor": 6,
            "price_version": "d1",
        },
        {
            "platform": "doubao",
            "mode": "standard",
            "item": "retry_allowance",
            "unit_price_minor": 8,
            "price_version": "d1",
        },
        {
            "platform": "kimi",
            "mode": "standard",
            "item": "base",
            "unit_price_minor": 10,
            "price_version": "k1",
        },
    ]
    p = rules.unit_prices_from_quote(lines, "doubao", "standard")
    assert dict(p.items) == {"base": 6, "screenshot": 2} and p.price_version == "d1"
    with pytest.raises(ValueError, match="two unit prices"):
        rules.unit_prices_from_quote(
            [*lines, {**lines[0], "unit_price_minor": 7}], "doubao", "standard"
        )
    with pytest.raises(ValueError, match="no base price"):
        rules.unit_prices_from_quote(lines, "doubao", "deep_thinking")


def test_floats_are_refused_everywhere():
    with pytest.raises(MoneyError):
        rules.UnitPrices("x", "standard", "v", {"base": 8.0})  # type: ignore[dict-item]
    with pytest.raises(MoneyError):
        rules.over_reservation(8.5, 10)  # type: ignore[arg-type]
    with pytest.raises(MoneyError):
        rules.minor(True)
    with pytest.raises(MoneyError):
        rules.unit_prices_from_quote(
            [
                {
                    "platform": "a",
                    "mode": "m",
                    "item": "base",
                    "unit_price_minor": 1.5,
                    "price_version": "v",
                }
            ],
            "a",
            "m",
        )


@given(st.integers(0, 10**9), st.integers(-(10**9), 10**9))
def test_over_reservation_is_exactly_the_uncovered_part(amount, left):
    over = rules.over_reservation(amount, left)
    assert 0 <= over <= amount
    # what the reservation covers plus the overrun is the whole charge
    assert min(amount, max(left, 0)) + over == amount


@pytest.mark.parametrize(
    ("ours", "theirs", "imported", "expected"),
    [
        ({"base": 6, "screenshot": 2}, {"base": 6, "screenshot": 2}, True, "matched"),
        ({"base": 6, "screenshot": 2}, {"base": 6, "screenshot": 2}, False, "matched"),
        ({"base": 6, "screenshot": 2}, {"base": 6, "screenshot": 3}, True, "amount_mismatch"),
        # same total, different items: still a mismatch (item by item)
        ({"base": 6, "screenshot": 2}, {"base": 8}, True, "amount_mismatch"),
        (None, {"base": 6}, True, "missing_ours"),
        ({}, {"base": 6}, True, "amount_mismatch"),  # we said free, they billed
        ({"base": 6}, None, True, "missing_theirs"),
        ({"base": 6}, None, False, "pending"),
        ({}, None, True, "matched"),  # free and not billed
        ({"base": 0}, None, True, "matched"),  # fully refunded and not billed
        (None, None, True, "pending"),  # accepted, not finished
    ],
)
def test_classify(ours, theirs, imported, expected):
    assert rules.classify(ours, theirs, statement_imported=imported) == expected


def test_fee_class():
    assert rules.fee_class("matched", "completed") == "completed"
    assert rules.fee_class("amount_mismatch", "failed") == "failed"
    assert rules.fee_class("pending", "completed") == "to_verify"
    assert rules.fee_class("missing_ours", None) == "to_verify"


line_st = st.builds(
    rules.ReconLine,
    upstream_id=st.text(min_size=1, max_size=5),
    platform=st.just("doubao"),
    classification=st.sampled_from(rules.CLASSIFICATIONS),
    fee_class=st.sampled_from(rules.FEE_CLASSES),
    ours_minor=st.integers(0, 1000),
    theirs_minor=st.integers(0, 1000),
    currency=st.just("CNY"),
)


@given(st.lists(line_st, max_size=30))
def test_summary_adds_up(lines):
    s = rules.summarise("r1", "CNY", lines)
    assert s.lines == len(lines) == sum(s.counts.values())
    assert s.ours_total_minor == sum(s.ours_by_fee_class.values())
    assert s.theirs_total_minor == sum(s.theirs_by_fee_class.values())
    assert s.unexplained_difference_minor == sum(
        v for k, v in s.difference_by_classification.items() if not rules.is_explained(k)
    )
    assert s.theirs_total_minor - s.ours_total_minor == sum(s.difference_by_classification.values())
    flagged = any(
        line.classification in ("amount_mismatch", "missing_ours", "missing_theirs")
        for line in lines
    )
    assert s.clean == (not flagged and s.unexplained_difference_minor == 0)
