from __future__ import annotations

import pytest

from geo_pipeline.domain.money import Money, MoneyError, total


def test_money_refuses_floats_and_bools():
    with pytest.raises(MoneyError):
        Money(1.5, "CNY")  # type: ignore[arg-type]
    with pytest.raises(MoneyError):
        Money(True, "CNY")  # type: ignore[arg-type]
    with pytest.raises(MoneyError):
        Money(1, "CNY").times(2.0)  # type: ignore[arg-type]


def test_money_refuses_mixed_currencies():
    with pytest.raises(MoneyError, match="currency mismatch"):
        Money(1, "CNY") + Money(1, "USD")


def test_sums_and_format():
    assert total([Money(199, "CNY"), Money(1, "CNY")], "CNY") == Money(200, "CNY")
    assert Money(-1234, "CNY").format() == "\u221212.34 CNY"  # the minus of human text
    with pytest.raises(MoneyError):
        Money(1, "cny")
