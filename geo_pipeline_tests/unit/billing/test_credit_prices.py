"""Credits -> money in a price list (issue 31): the per-answer base is computed from credits x
credit price, rounded up; a stated base that disagrees is refused naming both; a price file may
leave the base out; the credit price prices a vendor's reported credits exactly, rounded once."""

from __future__ import annotations

from datetime import date

import pytest

from geo_pipeline.domain.catalogue import (
    PriceFileError,
    parse_price_versions,
    price_list_mapping,
)
from geo_pipeline.domain.platforms import CreditPrice, PriceList

CLORO = {
    "version": "cloro-credits",
    "currency": "USD",
    "credits": {"standard": 5},
    "credit_price": {"minor": 3000, "per_credits": 37500},
}


def test_the_base_is_credits_times_the_credit_price_rounded_up() -> None:
    prices = PriceList.from_mapping(CLORO)
    assert prices.base == {"standard": 1}  # 5 x 3000/37500 = 0.4 cent -> 1 cent
    assert prices.credit_price == CreditPrice(3000, 37500)
    # The conversion is part of the version as stored (geo.price_versions, price files).
    assert PriceList.from_mapping(price_list_mapping(prices)) == prices


def test_a_stated_base_that_disagrees_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"prices\.base\.standard: 2, but 5 credits .* is 1"):
        PriceList.from_mapping({**CLORO, "base": {"standard": 2}})
    with pytest.raises(ValueError, match=r"needs prices\.credit_price"):
        PriceList.from_mapping({"version": "v", "currency": "USD", "credits": {"standard": 5}})
    with pytest.raises(ValueError, match="per_credits"):
        PriceList.from_mapping({**CLORO, "credit_price": {"minor": 1}})


def test_credit_cost_is_exact_and_rounded_once_half_up() -> None:
    cp = CreditPrice(3000, 37500)
    assert (cp.cost(5).amount_minor, cp.cost(5).exact) == (0, "0.400000")
    assert (cp.cost(7).amount_minor, cp.cost(7).exact) == (1, "0.560000")
    assert CreditPrice(1, 2).cost(1).amount_minor == 1  # 0.5 rounds up
    assert CreditPrice(1, 5).cost(5).amount_minor == 1
    assert CreditPrice(15, 100).ceil_minor(1) == 1


def test_a_price_file_may_give_credits_instead_of_a_base() -> None:
    spec = {**CLORO, "platform": "chatgpt_cloro", "effective_from": date(2027, 1, 1)}
    (version,) = parse_price_versions({"price_lists": [spec]})
    assert version.prices.base == {"standard": 1}
    bad = {**spec, "base": {"standard": 3}}
    with pytest.raises(PriceFileError, match=r"price_lists\[0\]: prices\.base\.standard: 3"):
        parse_price_versions({"price_lists": [bad]})
