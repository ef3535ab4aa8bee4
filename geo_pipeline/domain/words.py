"""Words a person can act on (issue #34): a run's status with its reason, money in major units
with its currency, a reconciliation difference with its direction. Pure: values in, text out;
every terminal and HTML view that a person reads uses these, machine formats keep the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from geo_pipeline.domain.money import Money

# Evidence reasons in words (geo.samples.evidence_reason); an unknown code is shown as it is.
EVIDENCE_REASONS = {
    "SCREENSHOT_UNAVAILABLE": ("required screenshot missing", "required screenshots missing"),
    "SCREENSHOT_MISSING": ("required screenshot missing", "required screenshots missing"),
    # Stored text, screenshot still to come (the screenshot lane retries it): said, so that the
    # count a person reads is every screenshot that is not there, as the evidence table shows.
    "SCREENSHOT_PENDING": ("screenshot still pending", "screenshots still pending"),
}


def _evidence_words(reason: str, n: int) -> str:
    one, many = EVIDENCE_REASONS.get(reason, (f"evidence {reason}", f"evidence {reason}"))
    return f"{n} {one if n == 1 else many}"


def _problems(status: Mapping[str, Any]) -> list[str]:
    """What keeps a status from full success, counted: failed samples by reason, missing
    evidence by reason, uncertain acceptance, open samples."""
    out: list[str] = []
    collection = status.get("collection") or {}
    failed = int(collection.get("failed", 0))
    if failed:
        reasons = status.get("failure_reasons") or {}
        why = ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items()))
        out.append(f"{failed} failed" + (f" ({why})" if why else ""))
    for reason, n in sorted((status.get("evidence_reasons") or {}).items()):
        if int(n):
            out.append(_evidence_words(reason, int(n)))
    if status.get("uncertain"):
        out.append(f"{status['uncertain']} with upstream acceptance unknown")
    total = int(status.get("total", 0))
    open_ = total - int(collection.get("completed", 0)) - failed
    if open_ > 0:
        out.append(f"{open_} of {total} still collecting")
    return out


def status_text(
    status: Mapping[str, Any], channels: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """A run's (or partition's) status with its reason, e.g. ``partial: 3 required screenshots
    missing on deepseek__web``. ``status``/``channels``: ``AggregateStatus.as_dict()`` of the
    run and of each channel; with channels the reasons are said per channel."""
    overall = str(status["overall"])
    head = overall.replace("_", " ")
    if status.get("cancelled"):
        head = f"cancelled ({head} of what was collected)"
    total = int(status.get("total", 0))
    if overall == "full_success":
        reason = f"all {total} samples completed with their evidence stored"
    elif overall == "empty":
        reason = "the run has no samples"
    else:
        if channels:
            parts = [
                f"{p} on {ch}"
                for ch, st in sorted(channels.items())
                if st.get("overall") != "full_success"
                for p in _problems(st)
            ]
        else:
            parts = _problems(status)
        reason = "; ".join(parts) or "no reason recorded"
    if status.get("analysing"):
        reason += " (analysing)"
    return f"{head}: {reason}"


def money_text(minor: int, currency: str) -> str:
    """Money as a person reads it: major units with the currency, ``8.70 CNY``."""
    return Money(int(minor), str(currency).strip()).format()


def money_with_minor(minor: int, currency: str) -> str:
    """``8.70 CNY (870 minor units)``: major units first, the machine figure beside it."""
    return f"{money_text(minor, currency)} ({int(minor)} minor units)"


def difference_text(theirs_minus_ours_minor: int, currency: str) -> str:
    """A reconciliation difference with its direction (who billed more)."""
    d = int(theirs_minus_ours_minor)
    if d == 0:
        return "none"
    amount = money_text(abs(d), currency)
    if d > 0:
        return f"the platforms billed {amount} more than we charged"
    return f"we charged {amount} more than the platforms billed"


def reconciliation_text(
    unexplained_minor: int, explained_minor: int, pending_ours_minor: int, currency: str
) -> list[str]:
    """The reconciliation difference split into unexplained and explained (and what is still
    pending), each with its direction."""
    lines = [
        f"unexplained difference: {difference_text(unexplained_minor, currency)}",
        f"explained difference (price changes, usage x token prices, day-total shares): "
        f"{difference_text(explained_minor, currency)}",
    ]
    if pending_ours_minor:
        lines.append(
            f"pending: {money_text(pending_ours_minor, currency)} of our charges have no "
            "statement yet"
        )
    return lines
