"""Price files (R4, R23): every problem with its field path, dates as instants, and the pure
rules that pick a version and explain a difference by a price change."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain import billing as rules
from geo_pipeline.domain.catalogue import (
    PriceFileError,
    PriceVersion,
    effective_version,
    parse_price_versions,
    reprice,
)
from geo_pipeline.domain.platforms import PriceList

CAPS = load_registry().capabilities()

GOOD = {
    "source": "vendor price page, read 2026-12-01",
    "price_lists": [
        {
            "platform": "doubao",
            "version": "doubao-2026-12",
            "effective_from": "2026-12-15",
            "currency": "CNY",
            "base": {"standard": 7, "deep_thinking": 7},
            "deep_thinking": 11,
            "screenshot": 3,
            "retry_fee_rule": "charged",
        }
    ],
}


def test_a_valid_file_parses_to_versions():
    (v,) = parse_price_versions(GOOD, CAPS)
    assert v.platform == "doubao" and v.version == "doubao-2026-12"
    assert v.effective_from == datetime(2026, 12, 15, tzinfo=UTC)
    assert v.prices.base == {"standard": 7, "deep_thinking": 7} and v.prices.screenshot == 3
    assert v.source == "vendor price page, read 2026-12-01"


def test_every_problem_is_reported_with_its_field_path():
    bad = {
        "price_lists": [
            {
                "platform": "doubao",
                "version": "d2",
                "effective_from": "next tuesday",
                "currency": "CNY",
                "base": {"standard": 6.5},  # a float is refused, never rounded
                "screenshot": -1,
                "retry_fee_rule": "sometimes",
                "colour": "blue",
            },
            {
                "platform": "nope",
                "version": "x",
                "effective_from": "2026-12-01",
                "currency": "USD",
                "base": {"standard": 1},
            },
            {
                "platform": "kimi",
                "version": "k2",
                "effective_from": "2026-12-01T08:00:00",
                "currency": "CNY",
                "base": {"standard": 1, "turbo": 2},
            },
        ]
    }
    with pytest.raises(PriceFileError) as err:
        parse_price_versions(bad, CAPS)
    problems = err.value.problems
    for expected in (
        "price_lists[0].effective_from:",
        "price_lists[0].base.standard: must be a non-negative integer of minor units, got 6.5",
        "price_lists[0].screenshot:",
        "price_lists[0].retry_fee_rule:",
        "price_lists[0].colour: unknown field",
        "price_lists[0].base.deep_thinking: missing",
        "price_lists[1].platform: 'nope' is not registered",
        "price_lists[2].effective_from:",  # a datetime without a zone is ambiguous
        "price_lists[2].base.web_search: missing",
        "price_lists[2].base.turbo: kimi offers no mode 'turbo'",
    ):
        assert any(p.startswith(expected) for p in problems), (expected, problems)
    assert str(err.value).startswith(f"the price file has {len(problems)} problems")


def test_top_level_shape_and_repeated_versions():
    with pytest.raises(PriceFileError, match="price_lists: expected a non-empty list"):
        parse_price_versions({"price_lists": []})
    with pytest.raises(PriceFileError, match=r"\(top\)"):
        parse_price_versions(["not", "a", "mapping"])
    twice = {"price_lists": [GOOD["price_lists"][0], GOOD["price_lists"][0]]}
    with pytest.raises(
        PriceFileError, match=r"price_lists\[1\]\.version: 'doubao-2026-12' repeats"
    ):
        parse_price_versions(twice, CAPS)
    wrong_currency = {"price_lists": [{**GOOD["price_lists"][0], "currency": "USD"}]}
    with pytest.raises(PriceFileError, match="doubao quotes in CNY, not USD"):
        parse_price_versions(wrong_currency, CAPS)


def _version(name: str, day: int, base: int) -> PriceVersion:
    prices = PriceList(name, "CNY", {"standard": base}, screenshot=2)
    return PriceVersion("doubao", datetime(2026, 12, day, tzinfo=UTC), prices)


def test_the_version_in_effect_is_the_latest_that_has_taken_effect():
    v1, v2 = _version("v1", 1, 6), _version("v2", 15, 7)
    assert effective_version([v2, v1], datetime(2026, 11, 30, tzinfo=UTC)) is None
    assert effective_version([v2, v1], datetime(2026, 12, 14, tzinfo=UTC)) == v1
    assert effective_version([v2, v1], datetime(2026, 12, 15, tzinfo=UTC)) == v2


def test_a_difference_is_a_price_change_only_when_another_version_explains_it_exactly():
    new = PriceList("v2", "CNY", {"standard": 7}, screenshot=3)
    ours = {"base": 6, "screenshot": 2}
    assert reprice(new, "standard", ours) == {"base": 7, "screenshot": 3}
    assert reprice(new, "standard", {"base": 6, "web_search": 4}) is None  # v2 has no such item
    assert (
        rules.price_change_version(
            ours, {"base": 7, "screenshot": 3}, "standard", "v1", {"v2": new}
        )
        == "v2"
    )
    # Off by one from what v2 charges: not explained.
    assert (
        rules.price_change_version(
            ours, {"base": 7, "screenshot": 4}, "standard", "v1", {"v2": new}
        )
        is None
    )
    # Our own version never explains a difference, and a free attempt has nothing to reprice.
    assert (
        rules.price_change_version(
            ours, {"base": 7, "screenshot": 3}, "standard", "v2", {"v2": new}
        )
        is None
    )
    assert (
        rules.price_change_version({"base": 0}, {"base": 7}, "standard", "v1", {"v2": new}) is None
    )


def test_price_change_lines_are_explained_not_unexplained():
    line = rules.ReconLine("u1", "doubao", "price_change", "completed", 8, 10, "CNY")
    other = rules.ReconLine("u2", "doubao", "amount_mismatch", "completed", 8, 9, "CNY")
    s = rules.summarise("r1", "CNY", [line, other])
    assert s.counts["price_change"] == 1 and s.difference_by_classification["price_change"] == 2
    assert s.price_change_difference_minor == 2
    assert s.unexplained_difference_minor == 1
    only = rules.summarise("r1", "CNY", [line])
    assert only.clean and only.unexplained_difference_minor == 0
    assert "price_change" not in rules.summarise("r1", "CNY", [other]).counts
