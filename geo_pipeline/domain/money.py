"""Money in integer minor units (R23): never a float, anywhere.

``Money`` refuses floats and mixed currencies, so a wrong sum fails loudly instead of drifting.
"""

from __future__ import annotations

from dataclasses import dataclass


class MoneyError(ValueError):
    pass


def _require_int(value: object, what: str) -> int:
    # bool is an int subclass; a True amount is a bug, not one cent.
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoneyError(f"{what} must be an integer number of minor units, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Money:
    amount_minor: int
    currency: str

    def __post_init__(self) -> None:
        _require_int(self.amount_minor, "amount_minor")
        if not (
            isinstance(self.currency, str)
            and len(self.currency) == 3
            and self.currency.isalpha()
            and self.currency.isupper()
        ):
            raise MoneyError(f"currency must be an ISO 4217 code like 'CNY', got {self.currency!r}")

    @staticmethod
    def zero(currency: str) -> Money:
        return Money(0, currency)

    def _same(self, other: Money) -> None:
        if not isinstance(other, Money):
            raise MoneyError(f"cannot combine Money with {type(other).__name__}")
        if other.currency != self.currency:
            raise MoneyError(f"currency mismatch: {self.currency} vs {other.currency}")

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount_minor + other.amount_minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount_minor - other.amount_minor, self.currency)

    def times(self, quantity: int) -> Money:
        return Money(self.amount_minor * _require_int(quantity, "quantity"), self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount_minor, self.currency)

    def __lt__(self, other: Money) -> bool:
        self._same(other)
        return self.amount_minor < other.amount_minor

    def __le__(self, other: Money) -> bool:
        self._same(other)
        return self.amount_minor <= other.amount_minor

    def format(self) -> str:
        """Human display, assuming two decimal places (CNY, USD, EUR). A negative amount has the
        minus sign U+2212 of human text (issue #34); machine fields keep their "-" integers."""
        sign = "\u2212" if self.amount_minor < 0 else ""
        whole, cents = divmod(abs(self.amount_minor), 100)
        return f"{sign}{whole}.{cents:02d} {self.currency}"


def total(items: list[Money], currency: str) -> Money:
    result = Money.zero(currency)
    for item in items:
        result = result + item
    return result
