"""Apportioning an account-wide day total across the day's runs (issue #34), pure arithmetic:
integer parts by the largest remainder that sum exactly to the total, independent of order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.domain import billing as rules
from geo_pipeline.domain.money import MoneyError


def test_largest_remainder_in_proportion():
    # 20 over 16:8 -> 13.33, 6.67: the leftover unit goes to the larger remainder.
    assert rules.apportion(20, {"r-a": 16, "r-b": 8}) == {"r-a": 13, "r-b": 7}
    # 10 over three equal weights: 3.33 each, the leftover unit to the smallest key.
    assert rules.apportion(10, {"c": 1, "b": 1, "a": 1}) == {"a": 4, "b": 3, "c": 3}
    assert rules.apportion(7, {"only": 3}) == {"only": 7}


def test_zero_and_negative_edges():
    assert rules.apportion(0, {"a": 0, "b": 0}) == {"a": 0, "b": 0}
    assert rules.apportion(0, {}) == {}
    assert rules.apportion(5, {"a": 0, "b": 2}) == {"a": 0, "b": 5}
    # A credit keeps its sign, split by the same rule.
    assert rules.apportion(-20, {"r-a": 16, "r-b": 8}) == {"r-a": -13, "r-b": -7}
    with pytest.raises(ValueError, match="cannot apportion 5 over weights that sum to 0"):
        rules.apportion(5, {"a": 0})
    with pytest.raises(ValueError, match="weight of 'a' must be >= 0, got -1"):
        rules.apportion(5, {"a": -1, "b": 3})
    with pytest.raises(MoneyError, match="total to apportion must be an integer"):
        rules.apportion(5.0, {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(MoneyError, match="weight of 'a' must be an integer"):
        rules.apportion(5, {"a": 1.5})  # type: ignore[dict-item]


@given(
    st.integers(-(10**9), 10**9),
    st.dictionaries(st.text(min_size=1, max_size=4), st.integers(0, 10**6), min_size=1),
)
def test_parts_sum_exactly_and_do_not_depend_on_order(total, weights):
    if sum(weights.values()) == 0:
        total = 0
    parts = rules.apportion(total, weights)
    assert sum(parts.values()) == total
    assert parts == rules.apportion(total, dict(reversed(list(weights.items()))))
    whole = sum(weights.values()) or 1
    for key, weight in weights.items():
        exact = total * weight / whole
        assert abs(parts[key] - exact) < 1  # never off by a whole unit or more


def test_split_day_total():
    # At or above the runs' expected cost each run gets exactly its expected cost; the rest is
    # one amount that is not ours.
    s = rules.split_day_total(32, {"r-a": 16, "r-b": 8})
    assert (dict(s.shares), s.not_ours_minor, s.apportioned_minor) == (
        {"r-a": 16, "r-b": 8},
        8,
        24,
    )
    s = rules.split_day_total(24, {"r-a": 16, "r-b": 8})
    assert (dict(s.shares), s.not_ours_minor) == ({"r-a": 16, "r-b": 8}, 0)
    # Below it (the vendor billed less than we charged for) each run still gets its expected
    # cost and the shortfall is one signed amount for the day: never shared out of sight.
    s = rules.split_day_total(20, {"r-a": 16, "r-b": 8})
    assert (dict(s.shares), s.not_ours_minor) == ({"r-a": 16, "r-b": 8}, -4)
    # No expected cost at all: the whole total is not ours; a credit likewise.
    s = rules.split_day_total(9, {"r-a": 0})
    assert (dict(s.shares), s.not_ours_minor) == ({"r-a": 0}, 9)
    s = rules.split_day_total(-4, {"r-a": 16})
    assert (dict(s.shares), s.not_ours_minor) == ({"r-a": 0}, -4)
    s = rules.split_day_total(0, {})
    assert (dict(s.shares), s.not_ours_minor) == ({}, 0)
    with pytest.raises(ValueError, match="must be >= 0"):
        rules.split_day_total(5, {"r-a": -1})


@given(
    st.integers(-(10**6), 10**6),
    st.dictionaries(st.text(min_size=1, max_size=4), st.integers(0, 10**4), max_size=6),
)
def test_split_is_total_once(total, expected):
    s = rules.split_day_total(total, expected)
    assert s.apportioned_minor + s.not_ours_minor == total
    assert set(s.shares) == set(expected)
    assert all(0 <= s.shares[k] <= expected[k] for k in expected)


def test_apportioned_is_explained_and_counted_as_such():
    assert rules.is_explained(rules.APPORTIONED)
    line = rules.ReconLine(
        "day-total:oa:2026-12-06", "oa", "apportioned", "completed", 16, 13, "CNY"
    )
    s = rules.summarise("r", "CNY", [line])
    assert s.unexplained_difference_minor == 0 and s.apportioned_difference_minor == -3
    assert s.explained_difference_minor == -3 and s.clean


def test_expected_cost_is_usage_x_price_else_the_charge():
    from geo_pipeline.billing.reconcile import _expected_minor
    from geo_pipeline.domain.catalogue import parse_catalogue

    entry = parse_catalogue(
        {
            "platforms": {
                "oa": {
                    "protocol": "openai_chat",
                    "base_url": "http://127.0.0.1:9/openai/v1",
                    "options": {
                        "model": "deepseek",
                        "token_prices": {
                            "oa-1": {
                                "currency": "CNY",
                                "input_per_1m": 20_000,
                                "output_per_1m": 40_000,
                                "source": "test list",
                                "as_of": "2026-12-02",
                            }
                        },
                    },
                    "devices": ["web"],
                    "regions": ["cn"],
                    "modes": ["standard"],
                    "asynchronous": False,
                    "lookup_by_key": False,
                    "prices": {"version": "oa-1", "currency": "CNY", "base": {"standard": 8}},
                }
            }
        }
    ).entry("oa")
    counts = dict.fromkeys(
        ("total_tokens", "cached_input_tokens", "reasoning_tokens", "web_search_requests")
    )
    row = {
        "charged_minor": 8,
        "price_version": "oa-1",
        "input_tokens": 100,
        "output_tokens": 200,
        "search_context": None,
        "source": "usage",
        **counts,
    }
    # 100 x 20,000 / 1M + 200 x 40,000 / 1M = 2 + 8 = 10 fen
    assert _expected_minor(row, entry) == (10, "usage")
    assert _expected_minor({**row, "source": None}, entry) == (8, "charge")  # no usage recorded
    assert _expected_minor({**row, "price_version": "oa-2"}, entry) == (8, "charge")  # no prices
    assert _expected_minor({**row, "charged_minor": -3, "source": None}, None) == (0, "charge")
