"""The explained difference is the sum of the differences of the lines whose class is explained
(domain.billing.EXPLAINED), for every class there is: one rule, so a line a report lists as
explained is never left out of the explained total (issue #34: a newcomer read a no_vendor_bill
line "explained, -0.20 CNY" beside "explained difference: 0.00 CNY")."""

from __future__ import annotations

from geo_pipeline.domain.billing import (
    ALL_CLASSIFICATIONS,
    IN_DAY_TOTAL,
    ReconLine,
    is_explained,
    summarise,
)

# Lines with no difference of their own: pending (the statement is not in yet) and in_day_total
# (the day's line compares it). Every other explained class carries its difference.
NOT_A_DIFFERENCE = ("pending", IN_DAY_TOTAL)


def _line(i: int, classification: str, ours: int, theirs: int) -> ReconLine:
    return ReconLine(f"u{i}", "deepseek", classification, "completed", ours, theirs, "CNY")


def test_every_explained_class_counts_in_the_explained_difference() -> None:
    lines = [
        _line(i, c, ours=10 + i, theirs=7 if c != "matched" else 10 + i)
        for i, c in enumerate(ALL_CLASSIFICATIONS)
    ]
    s = summarise("r1", "CNY", lines)
    explained = sum(
        ln.difference_minor
        for ln in lines
        if is_explained(ln.classification) and ln.classification not in NOT_A_DIFFERENCE
    )
    unexplained = sum(ln.difference_minor for ln in lines if not is_explained(ln.classification))
    assert s.explained_difference_minor == explained
    assert s.unexplained_difference_minor == unexplained


def test_a_no_vendor_bill_line_is_an_explained_difference() -> None:
    s = summarise("r1", "CNY", [_line(0, "no_vendor_bill", ours=20, theirs=0)])
    assert s.explained_difference_minor == -20
    assert s.unexplained_difference_minor == 0 and s.no_vendor_bill_ours_minor == 20


def test_the_exact_explained_difference_keeps_sub_minor_vendor_amounts() -> None:
    """cloro bills 0.4 cent a task: four credit_cost lines read theirs 0 (rounded once per line)
    while the vendor billed 1.6 cents; the summary's exact figure is what every report and
    `billing reconcile` say beside the rounded one (issue #34, a second newcomer's read)."""
    from decimal import Decimal

    lines = [
        ReconLine(f"c{i}", "chatgpt_cloro", "credit_cost", "completed", 1, 0, "USD",
                  detail={"cost_exact_minor": "0.400000"})
        for i in range(4)
    ] + [_line(9, "matched", 2, 2)]  # fmt: skip
    s = summarise("r1", "USD", lines)
    # (fourth read) the rounded figure is the exact total rounded once, not -4 (four lines
    # rounded each): the JSON said -4 beside words saying 0.02 (exact 0.024)
    assert s.explained_difference_minor == -2
    assert s.explained_difference_exact_minor == Decimal("-2.4")
    assert s.as_dict()["explained_difference_exact_minor"] == "-2.4"
    assert (s.theirs_total_minor, s.as_dict()["theirs_total_exact_minor"]) == (4, "3.6")
    assert s.credit_cost_difference_minor == -2 and s.theirs_by_fee_class["completed"] == 4
