"""Billing rules, pure (R4, R15, R23, R24): what one finished attempt costs, how much of a charge
falls outside a run's reservation, and how a line of reconciliation is classified.

Values in, values out; the ledger (geo_pipeline.billing) does the I/O. Every amount is an integer
number of minor units: a float anywhere is refused, never rounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal, get_args

from geo_pipeline.domain.catalogue import reprice
from geo_pipeline.domain.money import MoneyError
from geo_pipeline.domain.platforms import PriceList, RetryFeeRule

RETRY_FEE_RULES: tuple[str, ...] = get_args(RetryFeeRule)
# What a platform bills for one answer; 'retry_allowance' is a quote line, never a charge item.
CHARGE_ITEMS: tuple[str, ...] = ("base", "deep_thinking", "web_search", "screenshot")
Classification = Literal[
    "matched", "amount_mismatch", "missing_ours", "missing_theirs", "pending", "price_change"
]
CLASSIFICATIONS: tuple[str, ...] = (
    "matched",
    "amount_mismatch",
    "missing_ours",
    "missing_theirs",
    "pending",
)
# Their amount is exactly what another version of the platform's prices charges for what we
# charged under the run's frozen quote: explained by the price change (R23), shown as its own
# difference, never an unexplained one. Summaries list it only when a run has such a line.
PRICE_CHANGE = "price_change"
# A task of a day whose statement is a vendor's day total (a cost API bills no single request):
# its money is compared on the day's own line, so the task line carries none.
IN_DAY_TOTAL = "in_day_total"
# A vendor without a cost API (statement_source usage_fields): their amount is the attempt's
# recorded token usage x the token prices of the frozen price version. Differing from our
# per-answer charge is explained by that arithmetic, which the line's detail shows (its own
# difference, like a price change); an answered attempt with no usage (or no token prices to
# price it) has an unknown cost, never zero: its difference stays unexplained.
USAGE_COST = "usage_cost"
USAGE_MISSING = "usage_missing"
# A run's share of a vendor's account-wide day total (a cost API bills the account per day, not
# per answer): the total is apportioned once across the day's runs in proportion to each run's
# expected cost (``split_day_total``); the run's line compares its charges with its share,
# explained by that apportionment. The part of the total no run of ours expects (other usage on
# the account) is one 'amount_mismatch' line on the day's first run, never one per run.
APPORTIONED = "apportioned"
# A service that bills credits (statement_source credits, issue 31): their amount is the credits
# the vendor reported for the task x the credit price of the frozen price version, rounded once.
# Our per-answer price is that rounded UP (PriceList.credit_price): a difference is explained
# by the arithmetic the detail shows. A completed task whose vendor reported no credits has an
# unknown cost (never zero): unexplained.
CREDIT_COST = "credit_cost"
CREDITS_MISSING = "credits_missing"
# A channel no vendor bills per answer (statement_source own_estimate: a consumer app driven in
# a browser, issue #32): our price is our own estimate and nobody sends a bill. Its line has
# theirs 0, explained by what the channel is; its money is shown as its own figure
# (``no_vendor_bill_ours_minor``, words.no_vendor_bill_text), never as a difference.
NO_VENDOR_BILL = "no_vendor_bill"
ALL_CLASSIFICATIONS: tuple[str, ...] = (
    *CLASSIFICATIONS,
    PRICE_CHANGE,
    IN_DAY_TOTAL,
    USAGE_COST,
    USAGE_MISSING,
    APPORTIONED,
    CREDIT_COST,
    CREDITS_MISSING,
    NO_VENDOR_BILL,
)
# THE "explained difference" predicate (issue #34): the one rule the reconciliation summary, the
# blocking check zero_unexplained_difference, the R26 gauge and the reconciliation alert apply
# (the SQL of the last three receives this tuple as %(explained)s). A difference is explained by
# agreement (matched), by timing (pending: the statement is not in yet), by a newer price list
# (price_change), by the vendor's day total that compares it (in_day_total), by the recorded
# tokens x the frozen token prices (usage_cost) or by the run's apportioned share of an
# account-wide day total (apportioned). Anything else needs a person.
EXPLAINED: tuple[str, ...] = (
    "matched",
    "pending",
    PRICE_CHANGE,
    IN_DAY_TOTAL,
    USAGE_COST,
    APPORTIONED,
    CREDIT_COST,
    NO_VENDOR_BILL,
)


def is_explained(classification: str) -> bool:
    """Whether a reconciliation line of ``classification`` has an explained difference."""
    return classification in EXPLAINED


FeeClass = Literal["completed", "failed", "to_verify"]
FEE_CLASSES: tuple[str, ...] = ("completed", "failed", "to_verify")


def minor(value: object, what: str = "amount") -> int:
    """``value`` as integer minor units; a float, a bool or a string is a bug and raises."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoneyError(f"{what} must be an integer number of minor units, got {value!r}")
    return value


# --------------------------------------------------------------------------- unit prices
@dataclass(frozen=True)
class UnitPrices:
    """The quoted unit prices of one platform and mode, frozen in the run's quote (R4, R23)."""

    platform: str
    mode: str
    price_version: str
    items: Mapping[str, int]  # item -> unit price in minor units (only the quoted items)

    def __post_init__(self) -> None:
        if "base" not in self.items:
            raise ValueError(
                f"the quote has no base price for {self.platform} mode {self.mode!r}; "
                "an attempt of a mode that was never quoted cannot be charged"
            )
        for item, price in self.items.items():
            if item not in CHARGE_ITEMS:
                raise ValueError(f"unknown charge item {item!r}")
            if minor(price, f"unit price of {item}") < 0:
                raise ValueError(f"unit price of {item} is negative: {price}")


def unit_prices_from_quote(
    lines: Iterable[Mapping[str, Any]], platform: str, mode: str
) -> UnitPrices:
    """Pick the unit prices of ``platform``/``mode`` out of quote lines (rows of geo.quote_lines
    or ``QuoteLine.__dict__``). The quote may hold several lines of one item (one per screenshot
    policy); they carry the same unit price, and a disagreement is an error, not a choice."""
    items: dict[str, int] = {}
    versions: set[str] = set()
    for line in lines:
        if line["platform"] != platform or line["mode"] != mode:
            continue
        item = str(line["item"])
        if item == "retry_allowance":
            continue
        price = minor(line["unit_price_minor"], f"unit price of {item}")
        if items.setdefault(item, price) != price:
            raise ValueError(
                f"the quote has two unit prices for {platform}/{mode}/{item}: "
                f"{items[item]} and {price}"
            )
        versions.add(str(line["price_version"]))
    if len(versions) > 1:
        raise ValueError(f"the quote mixes price versions for {platform}: {sorted(versions)}")
    return UnitPrices(platform, mode, versions.pop() if versions else "", items)


# --------------------------------------------------------------------------- one attempt
@dataclass(frozen=True)
class ChargeDecision:
    """What one finished attempt costs. ``free_reason`` says why an attempt costs nothing;
    ``unquoted`` lists features that were used but have no price in the quote (they are not
    charged: the customer agreed to the quote, and reconciliation will show the difference)."""

    amount_minor: int
    items: Mapping[str, int]
    free_reason: str | None = None
    unquoted: tuple[str, ...] = ()

    @property
    def free(self) -> bool:
        return self.free_reason is not None


def charge_for_attempt(
    prices: UnitPrices,
    rule: str,
    upstream_outcome: str,
    *,
    deep_thinking_used: bool = False,
    web_search_used: bool = False,
    screenshot_used: bool = False,
    sample_already_charged: bool = False,
) -> ChargeDecision:
    """The charge of one accepted attempt whose upstream task finished (R4, R15).

    The base price of the mode, plus each surcharge only when its feature was actually used and
    the quote prices it. Whether the attempt is billed at all is the platform's rule, never ours:
    'charged' bills every finished attempt; 'free_after_failure' bills nothing for an attempt
    whose upstream task failed; 'free' bills only the first charged attempt of a sample.
    """
    if rule not in RETRY_FEE_RULES:
        raise ValueError(f"unknown retry fee rule {rule!r}; expected one of {RETRY_FEE_RULES}")
    if upstream_outcome not in ("completed", "failed"):
        raise ValueError(
            f"only a finished upstream task is charged; outcome {upstream_outcome!r} "
            "is not 'completed' or 'failed'"
        )
    if rule == "free_after_failure" and upstream_outcome == "failed":
        return ChargeDecision(0, {}, free_reason="free_after_failure: upstream task failed")
    if rule == "free" and sample_already_charged:
        return ChargeDecision(0, {}, free_reason="free: an earlier attempt was already charged")
    items = {"base": prices.items["base"]}
    unquoted = []
    for item, used in (
        ("deep_thinking", deep_thinking_used),
        ("web_search", web_search_used),
        ("screenshot", screenshot_used),
    ):
        if not used:
            continue
        if item in prices.items:
            items[item] = prices.items[item]
        else:
            unquoted.append(item)
    return ChargeDecision(sum(items.values()), items, unquoted=tuple(unquoted))


def over_reservation(amount_minor: int, reservation_left_minor: int) -> int:
    """How much of a charge the run's remaining reservation does not cover (0 when it fits).

    The rule (R23): a charge is what upstream really billed, so it is always recorded; the part
    above the reservation is moved into the reservation by an explicit 'reservation' adjustment
    flagged for review, never posted silently against money that was not reserved."""
    amount = minor(amount_minor, "charge")
    left = minor(reservation_left_minor, "reservation left")
    if amount < 0:
        raise ValueError(f"a charge cannot be negative: {amount}")
    return max(0, amount - max(0, left))


# --------------------------------------------------------------------------- apportionment
def apportion(total_minor: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total_minor`` split into integer parts in proportion to ``weights`` (largest remainder):
    each part is floor(total x weight / sum of weights), and the units left over go one each to
    the largest remainders, ties to the smaller key. The parts sum exactly to the total and the
    result depends only on the values, never on the mapping's order. A negative total (a credit)
    is split by the same rule and keeps its sign. Weights are non-negative integers; a non-zero
    total with no weight to split it by is refused (nothing says whose it is)."""
    total = minor(total_minor, "total to apportion")
    for key, weight in weights.items():
        if minor(weight, f"weight of {key!r}") < 0:
            raise ValueError(f"weight of {key!r} must be >= 0, got {weight}")
    whole = sum(weights.values())
    if whole == 0:
        if total != 0:
            raise ValueError(
                f"cannot apportion {total} over weights that sum to 0 ({dict(weights)!r})"
            )
        return dict.fromkeys(sorted(weights), 0)
    sign, magnitude = (-1, -total) if total < 0 else (1, total)
    parts: dict[str, int] = {}
    remainders: dict[str, int] = {}
    for key in sorted(weights):
        parts[key], remainders[key] = divmod(magnitude * weights[key], whole)
    left = magnitude - sum(parts.values())  # 0 <= left < number of keys
    for key in sorted(remainders, key=lambda k: (-remainders[k], k))[:left]:
        parts[key] += 1
    return {k: sign * v for k, v in parts.items()}


@dataclass(frozen=True)
class DaySplit:
    """An account-wide day total split once: ``shares`` per run (summing to ``apportioned``)
    and ``not_ours``, the part no run of ours expects (total = apportioned + not_ours)."""

    total_minor: int
    expected_minor: int
    shares: Mapping[str, int]
    not_ours_minor: int

    @property
    def apportioned_minor(self) -> int:
        return sum(self.shares.values())


def split_day_total(total_minor: int, expected: Mapping[str, int]) -> DaySplit:
    """Apportion a vendor's day total once across the day's runs (``expected``: run -> its
    expected cost of that day, per-answer usage x price, >= 0). Each run's share is exactly
    its expected cost (``apportion`` of the runs' whole expected cost). The residual -- above it
    (other usage on the account, a charge nobody of ours expects) or below it (the vendor billed
    less than the answers we charged for: a real difference, never shared out of sight) -- is
    ``not_ours``, one signed amount for the day; a negative total (a credit) is all
    ``not_ours``."""
    total = minor(total_minor, "day total")
    whole = sum(minor(v, f"expected cost of {k!r}") for k, v in expected.items())
    base = 0 if total < 0 else whole
    shares = apportion(base, expected)
    return DaySplit(total, whole, shares, total - base)


# --------------------------------------------------------------------------- reconciliation
def _nonzero(items: Mapping[str, int] | None) -> dict[str, int]:
    return {k: v for k, v in (items or {}).items() if v != 0}


def classify(
    ours: Mapping[str, int] | None,
    theirs: Mapping[str, int] | None,
    *,
    statement_imported: bool,
) -> Classification:
    """Classify one upstream task (R23, R24) from our charge and their statement, item by item.

    ``ours``: the items of our charge entry (None = we posted no charge decision, e.g. the attempt
    has not finished). ``theirs``: the items on the platform's statements (None = on no imported
    statement). ``statement_imported``: the statement of the day our charge falls on was imported,
    so absence there means something. A free attempt (ours all zero) that is on no statement
    matches; a charge on no statement is pending until that day's statement is in.
    """
    if theirs is not None:
        if ours is None:
            return "missing_ours"
        return "matched" if _nonzero(ours) == _nonzero(theirs) else "amount_mismatch"
    if ours is None or not statement_imported:
        return "pending"
    return "matched" if not _nonzero(ours) else "missing_theirs"


def price_change_version(
    ours: Mapping[str, int],
    theirs: Mapping[str, int],
    mode: str,
    ours_version: str,
    candidates: Mapping[str, PriceList],
) -> str | None:
    """The other price version that explains a difference exactly (R23): the first of
    ``candidates`` (version name -> list, e.g. the version the statement names, then the one in
    effect on the day) that charges ``theirs`` for the items we charged under the frozen quote.
    None when no other version does: the difference stays unexplained."""
    mine = _nonzero(ours)
    if not mine:
        return None
    for version, prices in candidates.items():
        if version == ours_version:
            continue
        if reprice(prices, mode, mine) == _nonzero(theirs):
            return version
    return None


def fee_class(classification: str, upstream_outcome: str | None) -> FeeClass:
    """R24: a fee is 'completed' or 'failed' by its upstream task's outcome, and 'to_verify' while
    that outcome is unknown or the line is still pending."""
    if classification == "pending" or upstream_outcome not in ("completed", "failed"):
        return "to_verify"
    return "completed" if upstream_outcome == "completed" else "failed"


@dataclass(frozen=True)
class ReconLine:
    upstream_id: str
    platform: str
    classification: str
    fee_class: str
    ours_minor: int
    theirs_minor: int
    currency: str
    sample_id: str | None = None
    attempt_no: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def difference_minor(self) -> int:
        """Theirs minus ours: positive = the platform billed more than we charged."""
        return self.theirs_minor - self.ours_minor

    @property
    def theirs_exact_minor(self) -> Decimal:
        """The vendor's exact amount in decimal minor units: ``detail.cost_exact_minor`` where it
        bills fractions of a minor unit (credits x credit price, e.g. cloro's 0.4 cent a task),
        the stored whole minor units elsewhere. Sums add these, then round once."""
        exact = (self.detail or {}).get("cost_exact_minor")
        return Decimal(self.theirs_minor) if exact is None else Decimal(str(exact))


def _exact_text(exact: Decimal) -> str:
    """Exact decimal minor units as JSON text (a number would become a float): ``-2.4``, ``8``."""
    return format(exact.normalize(), "f") if exact != 0 else "0"


def round_minor(exact: Decimal) -> int:
    """THE rounding of an exact amount to a whole minor unit: once, half away from zero
    (Python's ROUND_HALF_UP, PostgreSQL's round(numeric)); a total is its exact sum rounded,
    never a sum of rounded lines."""
    return int(Decimal(exact).quantize(Decimal(1), rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class ReconciliationSummary:
    """Per-run result of reconciliation (R23, R24, R26), in minor units of ``currency``.

    ``unexplained_difference_minor`` sums theirs - ours over every line whose classification is
    not in ``EXPLAINED``: pending lines are explained by timing (the statement is not in yet),
    price changes by the platform's newer price list (``price_change_difference_minor``), usage
    costs by the recorded tokens x the frozen token prices (``usage_cost_difference_minor``), a
    run's share of an account-wide day total by its apportionment
    (``apportioned_difference_minor``); everything else that differs needs a person (or a
    refund / adjustment) to explain it."""

    run_id: str
    currency: str
    lines: int
    counts: Mapping[str, int]
    difference_by_classification: Mapping[str, int]
    ours_by_fee_class: Mapping[str, int]
    theirs_by_fee_class: Mapping[str, int]
    ours_total_minor: int
    theirs_total_minor: int
    pending_ours_minor: int
    unexplained_difference_minor: int
    price_change_difference_minor: int = 0
    usage_cost_difference_minor: int = 0
    apportioned_difference_minor: int = 0
    # |theirs - ours| summed over the unexplained lines, and how many there are: what is left to
    # explain, the figure the R26 gauge adds up (signed differences of two lines can cancel).
    unexplained_absolute_minor: int = 0
    unexplained_lines: int = 0
    credit_cost_difference_minor: int = 0  # credits x credit price vs our rounded-up price
    # Our charges on channels no vendor bills, and their (explained) difference theirs 0 - ours.
    no_vendor_bill_ours_minor: int = 0
    no_vendor_bill_difference_minor: int = 0
    # Theirs exact - ours over the lines whose difference is explained (price change, usage
    # cost, share of a day total, credit cost, no vendor bill; a matched line's fraction of a
    # minor unit), in exact decimal minor units (a
    # vendor that bills fractions of a minor unit: ``ReconLine.theirs_exact_minor``); pending
    # lines are not a difference yet and count in neither.
    explained_difference_exact_minor: Decimal = Decimal(0)
    theirs_total_exact_minor: Decimal = Decimal(0)

    @property
    def explained_difference_minor(self) -> int:
        """The explained difference rounded once (``round_minor``): the figure the words show
        beside the exact one, never a sum of per-line or per-class roundings."""
        return round_minor(self.explained_difference_exact_minor)

    @property
    def clean(self) -> bool:
        return self.unexplained_difference_minor == 0 and all(
            self.counts.get(k, 0) == 0
            for k in ("amount_mismatch", "missing_ours", "missing_theirs")
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "currency": self.currency,
            "lines": self.lines,
            "counts": dict(self.counts),
            "difference_by_classification": dict(self.difference_by_classification),
            "ours_by_fee_class": dict(self.ours_by_fee_class),
            "theirs_by_fee_class": dict(self.theirs_by_fee_class),
            "ours_total_minor": self.ours_total_minor,
            "theirs_total_minor": self.theirs_total_minor,
            "theirs_total_exact_minor": _exact_text(self.theirs_total_exact_minor),
            "pending_ours_minor": self.pending_ours_minor,
            "unexplained_difference_minor": self.unexplained_difference_minor,
            "unexplained_absolute_minor": self.unexplained_absolute_minor,
            "unexplained_lines": self.unexplained_lines,
            "price_change_difference_minor": self.price_change_difference_minor,
            "usage_cost_difference_minor": self.usage_cost_difference_minor,
            "apportioned_difference_minor": self.apportioned_difference_minor,
            "credit_cost_difference_minor": self.credit_cost_difference_minor,
            "no_vendor_bill_ours_minor": self.no_vendor_bill_ours_minor,
            "no_vendor_bill_difference_minor": self.no_vendor_bill_difference_minor,
            "explained_difference_minor": self.explained_difference_minor,
            "explained_difference_exact_minor": _exact_text(self.explained_difference_exact_minor),
            "clean": self.clean,
        }


def summarise(run_id: str, currency: str, lines: Iterable[ReconLine]) -> ReconciliationSummary:
    """Sums of theirs (and of theirs - ours) add each line's exact vendor amount and are rounded
    once at the end (``round_minor``), so every figure is the exact total rounded: the JSON, the
    HTML, the terminal, `billing reconcile` and the gauge show one amount, never 4 cents beside
    "0.02 (exact 0.024)". Per-line figures (the absolute unexplained) stay per line."""
    lines = list(lines)
    counts = dict.fromkeys(CLASSIFICATIONS, 0)
    diffs: dict[str, Decimal] = dict.fromkeys(CLASSIFICATIONS, Decimal(0))
    for extra in sorted({line.classification for line in lines} - set(CLASSIFICATIONS)):
        counts[extra] = 0
        diffs[extra] = Decimal(0)
    ours_fc = dict.fromkeys(FEE_CLASSES, 0)
    theirs_fc: dict[str, Decimal] = dict.fromkeys(FEE_CLASSES, Decimal(0))
    n = ours_total = pending = unexplained_lines = no_vendor_bill = 0
    absolute = Decimal(0)
    theirs_total = Decimal(0)
    by_class: dict[str, Decimal] = {}
    for line in lines:
        n += 1
        theirs = line.theirs_exact_minor
        diff = theirs - line.ours_minor
        counts[line.classification] += 1
        diffs[line.classification] += diff
        ours_fc[line.fee_class] += line.ours_minor
        theirs_fc[line.fee_class] += theirs
        ours_total += line.ours_minor
        theirs_total += theirs
        if line.classification == "pending":
            pending += line.ours_minor
            continue
        if line.classification == NO_VENDOR_BILL:
            no_vendor_bill += line.ours_minor
        if not is_explained(line.classification):
            absolute += abs(diff)  # exact per line; the sum rounded once below
            unexplained_lines += 1
        # in_day_total: no money of its own, the day's line compares it
        by_class[line.classification] = by_class.get(line.classification, Decimal(0)) + diff
    # explained: every explained class but pending (not a difference yet) and in_day_total (no
    # money of its own); a matched line differs only by a vendor's fraction of a minor unit
    explained = [k for k in by_class if is_explained(k) and k != IN_DAY_TOTAL]
    unexplained = sum((v for k, v in by_class.items() if not is_explained(k)), start=Decimal(0))
    return ReconciliationSummary(
        run_id=run_id,
        currency=currency,
        lines=n,
        counts=counts,
        difference_by_classification={k: round_minor(v) for k, v in diffs.items()},
        ours_by_fee_class=ours_fc,
        theirs_by_fee_class={k: round_minor(v) for k, v in theirs_fc.items()},
        ours_total_minor=ours_total,
        theirs_total_minor=round_minor(theirs_total),
        theirs_total_exact_minor=theirs_total,
        pending_ours_minor=pending,
        unexplained_difference_minor=round_minor(unexplained),
        price_change_difference_minor=round_minor(by_class.get(PRICE_CHANGE, Decimal(0))),
        usage_cost_difference_minor=round_minor(by_class.get(USAGE_COST, Decimal(0))),
        apportioned_difference_minor=round_minor(by_class.get(APPORTIONED, Decimal(0))),
        unexplained_absolute_minor=round_minor(absolute),
        unexplained_lines=unexplained_lines,
        credit_cost_difference_minor=round_minor(by_class.get(CREDIT_COST, Decimal(0))),
        no_vendor_bill_ours_minor=no_vendor_bill,
        no_vendor_bill_difference_minor=round_minor(by_class.get(NO_VENDOR_BILL, Decimal(0))),
        explained_difference_exact_minor=sum(
            (by_class.get(k, Decimal(0)) for k in explained), start=Decimal(0)
        ),
    )
