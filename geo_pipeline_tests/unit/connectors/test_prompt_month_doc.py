"""docs/services/choosing.md states the cost per prompt-month of each engine channel. Each row
is recomputed here from the registry's price list (the quote's arithmetic: base + surcharge of
the mode; the vendor's credits x credit price, exact), so the page cannot drift from the
prices the pipeline charges."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

from geo_pipeline.connectors.registry import load_registry

DOC = Path(__file__).resolve().parents[3] / "docs" / "services" / "choosing.md"
ANSWERS_PER_MONTH = 5 * 30  # the page's stated volume: 5 answers a day for 30 days
SYMBOL = {"USD": "$", "CNY": "¥"}


def _money(minor: Fraction, currency: str, places: int = 2) -> str:
    return f"{SYMBOL[currency]}{float(minor / 100):,.{places}f}"


def doc_rows() -> dict[str, list[str]]:
    section = DOC.read_text(encoding="utf-8").split("## Cost per prompt-month", 1)[1]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([a-z_]+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in line.strip().strip("|").split("|")]
    return rows


def test_every_row_is_the_registry_arithmetic() -> None:
    reg = load_registry()
    known = {**reg.disabled, **reg.entries}
    rows = doc_rows()
    assert len(rows) >= 15
    assert "5 times a day for\n30 days = 150 answers a month" in DOC.read_text(encoding="utf-8")
    for platform, (_, access, engine, mode, per, month, vendor) in rows.items():
        caps = known[platform].capabilities
        prices = caps.prices
        assert (access, engine) == (caps.access, caps.engine_name), platform
        assert mode in caps.modes, platform
        charged = prices.base[mode] + (prices.web_search if mode == "web_search" else 0)
        assert per == _money(Fraction(charged), prices.currency), platform
        assert month == _money(Fraction(charged * ANSWERS_PER_MONTH), prices.currency), platform
        if prices.credit_price is None:
            assert vendor == "", platform
        else:
            cp = prices.credit_price
            exact = Fraction(prices.credits[mode] * cp.minor, cp.per_credits) * ANSWERS_PER_MONTH
            assert vendor == _money(exact, prices.currency, 3), platform
