"""Words a person can act on (issue #34): a run's status with its reason, money in major units
with its currency, a reconciliation difference with its direction. Pure: values in, text out;
every terminal and HTML view that a person reads uses these, machine formats keep the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from geo_pipeline.domain.billing import EXPLAINED
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
    # any other reason is evidence failed: no answer stored (a failed collection's reason too)
    one, many = EVIDENCE_REASONS.get(
        reason, (f"answer not stored ({reason})", f"answers not stored ({reason})")
    )
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
    # a failed collection's evidence is failed for the same reason: said once, as failed
    failures = status.get("failure_reasons") or {}
    for reason, n in sorted((status.get("evidence_reasons") or {}).items()):
        left = int(n) - int(failures.get(reason, 0))
        if left > 0:
            out.append(_evidence_words(reason, left))
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
    head = overall  # one spelling: the word the per-channel tables print (full_success)
    if status.get("cancelled"):
        head = f"cancelled ({head} of what was collected)"
    total = int(status.get("total", 0))
    if overall == "full_success":
        reason = (
            "its 1 sample completed with its evidence stored"
            if total == 1
            else f"all {total} samples completed with their evidence stored"
        )
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
    # Answers in no rate (invalid), whatever the status: a full_success channel can hold one.
    if channels:
        invalid = [
            f"{w} on {ch}"
            for ch, st in sorted(channels.items())
            if (w := _invalid_words(st.get("invalid_reasons") or {}))
        ]
    else:
        one = _invalid_words(status.get("invalid_reasons") or {})
        invalid = [one] if one else []
    if invalid:
        reason += "; " + "; ".join(invalid) + ", in no rate"
    if status.get("analysing"):
        reason += " (analysing)"
    return f"{head}: {reason}"


def counted(n: int, noun: str) -> str:
    """``1 fee statement``, ``2 fee statements``: a count with its noun in the right number."""
    return f"{int(n)} {noun}" + ("" if int(n) == 1 else "s")


def exact_minor_text(exact_minor: Decimal | str | int) -> str:
    """Exact decimal minor units as text, one format for every line (JSON/CSV):
    ``0.8``, ``8``, ``687`` -- never ``0.800000`` beside ``8``."""
    d = Decimal(str(exact_minor))
    return format(d.normalize(), "f") if d != 0 else "0"


def percent_text(value: Any) -> str:
    """A share in [0, 1] as a whole percentage (no unit): 0.8 -> "80"."""
    return f"{float(value) * 100:.0f}"


def rate_text(rate: Any, lower: Any, upper: Any, n: Any) -> str:
    """A rate with its interval and sample size, as people write it, in every view (terminal,
    HTML table, HTML chart): ``80 % (58–92 %, n = 20)``."""
    size = f"n = {int(n) if n is not None else 0}"
    if rate is None:
        return f"n/a ({size})"
    if lower is None or upper is None:
        return f"{percent_text(rate)} % ({size})"
    return f"{percent_text(rate)} % ({percent_text(lower)}–{percent_text(upper)} %, {size})"


def money_text(minor: int, currency: str) -> str:
    """Money as a person reads it: major units with the currency, ``8.70 CNY``."""
    return Money(int(minor), str(currency).strip()).format()


def money_with_minor(minor: int, currency: str) -> str:
    """``8.70 CNY (870 minor units)``: major units first, the machine figure beside it."""
    return f"{money_text(minor, currency)} ({int(minor)} minor units)"


def difference_text(
    theirs_minus_ours_minor: int, currency: str, exact_minor: Decimal | str | None = None
) -> str:
    """A reconciliation difference with its direction (who billed more); with ``exact_minor``
    (a vendor billing fractions of a minor unit) the exact amount beside the rounded one."""
    d = int(theirs_minus_ours_minor)
    exact = None if exact_minor is None else Decimal(str(exact_minor))
    if exact is not None and exact != 0:
        d_sign = 1 if exact > 0 else -1  # the direction of the exact amount
    elif d == 0:
        return money_text(0, currency)  # the amount: "none" read as "no such lines"
    else:
        d_sign = 1 if d > 0 else -1
    amount = money_exact_text(abs(d), None if exact is None else abs(exact), currency)
    if d_sign > 0:
        return f"the platforms billed {amount} more than we charged"
    return f"we charged {amount} more than the platforms billed"


def explained_total_text(
    theirs_minus_ours_minor: int,
    currency: str,
    exact_minor: Decimal | str | None = None,
    no_vendor_bill_minor: int = 0,
) -> str:
    """The explained difference's signed total in words, the money table's cell and the
    reconciliation sentence alike: when all of it is what we charged on lines no platform bills
    (a browser run), it says so instead of "more than the platforms billed" (no platform billed
    anything: sixth read)."""
    nvb = int(no_vendor_bill_minor)
    if nvb and int(theirs_minus_ours_minor) + nvb == 0:
        return f"we charged {money_text(nvb, currency)} that no platform bills"
    return difference_text(theirs_minus_ours_minor, currency, exact_minor)


def unexplained_text(
    net_minor: int, absolute_minor: int | None, lines: int | None, currency: str
) -> str:
    """The unexplained difference: its direction (the net, theirs - ours) and, when lines of
    opposite sign cancel in that net, what is left to explain (|theirs - ours| summed: the R26
    gauge's figure), so a failing check never reads "none"."""
    net = difference_text(net_minor, currency)
    if absolute_minor is None or absolute_minor <= abs(int(net_minor)):
        return net
    left = (
        f"{money_text(absolute_minor, currency)} of differences are left to explain "
        f"(|theirs \u2212 ours| summed over {lines} unexplained lines)"
    )
    if int(net_minor) == 0:
        return f"the lines cancel out in sum, but {left}"
    return f"{net} in sum; {left}"


# THE words of a channel no vendor bills (statement source own_estimate, classification
# no_vendor_bill): the reconciliation summaries, the line's detail and `billing` say this.
NO_VENDOR_BILL_SOURCE = (
    "no vendor bill: the price is our own estimate (a consumer app driven in a browser bills "
    "nothing per answer)"
)


def no_vendor_bill_text(ours_minor: int, currency: str) -> str:
    """Our charges on channels no vendor bills, as a person reads them (never a difference)."""
    return (
        f"not billed by any platform: {money_text(ours_minor, currency)} charged at our own "
        "estimated price (a consumer app driven in a browser bills nothing per answer)"
    )


def reconciliation_text(
    unexplained_minor: int,
    explained_minor: int,
    pending_ours_minor: int,
    currency: str,
    *,
    absolute_minor: int | None = None,
    unexplained_lines: int | None = None,
    no_vendor_bill_minor: int = 0,
    explained_exact_minor: Decimal | str | None = None,
) -> list[str]:
    """The reconciliation difference split into unexplained and explained (and what is still
    pending), each with its direction; the explained one exactly where a vendor billed
    fractions of a minor unit (``explained_exact_minor``)."""
    unexplained = unexplained_text(unexplained_minor, absolute_minor, unexplained_lines, currency)
    head = f"explained difference (lines classified {', '.join(EXPLAINED)}): "
    # ONE wording and sign convention (who billed more), the money table's cell and this
    # sentence alike: the signed total first, then its parts where charges no platform bills
    # are in it (a browser run has no fee statement at all: theirs 0 on those lines).
    explained = explained_total_text(
        explained_minor, currency, explained_exact_minor, no_vendor_bill_minor
    )
    if no_vendor_bill_minor:
        nvb = int(no_vendor_bill_minor)
        exact = None if explained_exact_minor is None else Decimal(str(explained_exact_minor)) + nvb
        explained += (
            f"; of which {difference_text(int(explained_minor) + nvb, currency, exact)} on lines "
            f"a platform bills, and {money_text(nvb, currency)} we charged that no platform bills"
        )
    lines = [f"unexplained difference: {unexplained}", head + explained]
    if pending_ours_minor:
        lines.append(
            f"pending: {money_text(pending_ours_minor, currency)} of our charges have no "
            "statement yet"
        )
    if no_vendor_bill_minor:
        lines.append(no_vendor_bill_text(no_vendor_bill_minor, currency))
    return lines


# ----------------------------------------------------------------------------- evidence words
# ONE word set for the evidence of a sample, used by the aggregation (store.status), the terminal
# report, the HTML report (counts and sample list) and the JSON/CSV exports (``evidence_status``).
# geo.samples stores a screenshot still to come as evidence_state 'partial' with reason
# SCREENSHOT_PENDING; a reader counts it as pending (a newcomer read the HTML sample list's
# "evidence partial" on a sample the evidence table counted as pending).
EVIDENCE_STATUSES = ("stored", "partial", "failed", "pending")


def evidence_status(state: str, reason: str | None, collection: str | None = None) -> str:
    """THE evidence word of one sample: its stored state, except that a required screenshot
    the platform has not delivered yet (partial + SCREENSHOT_PENDING) reads ``pending``, and a
    sample whose collection failed (no answer stored, its evidence never to come) reads
    ``failed`` whatever its stored evidence state (issue #34: it read "pending", the word of a
    stored answer whose screenshot is still to come)."""
    if collection == "failed":
        return "failed"
    if state == "partial" and reason == "SCREENSHOT_PENDING":
        return "pending"
    return str(state)


def evidence_status_of(row: Mapping[str, Any]) -> str:
    """:func:`evidence_status` of one sample's row (its evidence and collection states)."""
    return evidence_status(
        str(row["evidence_state"]), row.get("evidence_reason"), row.get("collection_state")
    )


def evidence_waiting_text(n: int) -> str:
    """Answers stored whose evidence is not yet, so not analysed: ``(1 answer's evidence not
    stored yet: not analysed)``. A sample whose collection failed has no answer: not counted."""
    whose = "answer's" if n == 1 else "answers'"
    return f"({n} {whose} evidence not stored yet: not analysed)"


def evidence_reason_text(reason: str, n: int = 1) -> str:
    """A missing-evidence reason in words, counted: ``4 required screenshots missing``."""
    return _evidence_words(reason, int(n))


# Said wherever a pending screenshot is counted after the run's collection ended: will it still
# come? (A newcomer asked exactly that of the demo report.)
PENDING_SCREENSHOT_NOTE = (
    "A pending screenshot is one the platform had not delivered when the report was made; the "
    "answer's text is stored (and analysed). A running worker asks for it again every few "
    "seconds and the sample's evidence turns 'stored' when it arrives; the run's status changes "
    "only if nothing else is missing. With no worker running (the demo stops its workers when "
    "the run ends) it stays pending until a worker runs again."
)


# ----------------------------------------------------------------------------- analysis words
# The analysis layer's 'failed' is an answer judged invalid (an error page, a login page, ...):
# a person reads "invalid", the word the mention-rate tables and the status use. 'failed' is
# kept for samples whose collection failed (no answer at all).
ANALYSIS_WORDS = {
    "pending": "analysing",
    "accepted": "accepted",
    "review": "for review",
    "failed": "invalid",
}


def analysis_text(summary: Mapping[str, Any]) -> str:
    """What an analysis pass did, in the words the reports use: ``analysed 50 answers: 49
    accepted, 0 for review, 1 invalid (in no rate; 1 of them awaits a person's review)``.
    An invalid answer a person is to confirm (``invalid_review``, a truncated answer) is counted
    once, as invalid, as the report's invalid answers and the rate tables count it (issue #34).
    ``summary``: AnalysisSummary.as_dict()."""
    in_review = int(summary.get("invalid_review", 0))
    invalid = int(summary.get("failed", 0)) + in_review
    return (
        f"analysed {int(summary.get('analysed', 0))} answers: "
        f"{int(summary.get('accepted', 0))} accepted, "
        f"{int(summary.get('review', 0)) - in_review} {ANALYSIS_WORDS['review']}, "
        f"{invalid} {ANALYSIS_WORDS['failed']} (in no rate{invalid_review_text(in_review)})"
    )


def invalid_review_text(in_review: int) -> str:
    """Said of the invalid answers a person is still to confirm: ``; 1 of them awaits a
    person's review`` (empty when none)."""
    return f"; {int(in_review)} of them awaits a person's review" if in_review else ""


def invalid_answers_text(by_reason: Mapping[str, int], in_review: int = 0) -> str:
    """The invalid answers of a report, counted by reason (terminal and HTML alike):
    ``1: truncated x1; 1 of them awaits a person's review``."""
    total = sum(int(v) for v in by_reason.values())
    if not total:
        return "0"
    reasons = ", ".join(f"{k} x{int(v)}" for k, v in by_reason.items())
    return f"{total}: {reasons}{invalid_review_text(in_review)}"


def _invalid_words(by_reason: Mapping[str, int]) -> str | None:
    """``1 answer invalid (truncated)``: the answers of a scope in no rate, by reason."""
    total = sum(int(v) for v in by_reason.values())
    if not total:
        return None
    why = ", ".join(
        k if len(by_reason) == 1 else f"{k} x{int(v)}" for k, v in sorted(by_reason.items())
    )
    return f"{total} {'answer' if total == 1 else 'answers'} invalid ({why})"


# ------------------------------------------------------------------ how a channel was collected
# The `access` of a channel's platform (registry.yaml, domain/platforms.ACCESS_KINDS), shown in
# the per-channel tables of the terminal and HTML reports, so a reader sees API answers and the
# consumer product's rendered answers apart (they are never pooled in a rate). One word set.
ACCESS_WORDS: dict[str, str] = {
    "api": "the engine's model API",
    "scraped": "the consumer product's rendered answer, through an answer-scraping service",
    "browser": "the consumer web app, driven by our own browser",
}
# A channel whose platform the connector registry no longer lists: said, never guessed.
ACCESS_UNKNOWN = "unknown"


def access_text() -> str:
    """The note under a per-channel table: what each access word means."""
    return "access: " + "; ".join(f"{k} = {v}" for k, v in ACCESS_WORDS.items())


# ------------------------------------------------------------------- definitions, said once
# Each quantity of the mention-rate tables defined once; the terminal report prints these under
# its table and the HTML report under its own (docs/analysts.md has the same, with the SQL).
DEFINITIONS: dict[str, str] = {
    "n": "valid answers whose analysis is accepted: the denominator of every rate",
    "mention rate": "of the n answers, the share that mention the brand",
    "95 % interval": (
        "pooled over several questions, the interval is clustered by question (answers to one "
        "question are not independent) and, with K questions, widened for Student's t on "
        "K \u2212 1 degrees of freedom (Korn-Graubard: the Wilson formula on effective n "
        "x (z / t)^2), so it can be wider than Wilson even where effective n = n; from one "
        "question it is the Wilson score interval. The 'interval' column names the method of "
        "each row"
    ),
    "effective n": (
        "n divided by the design effect of the clustering by question (n when answers to one "
        "question vary as much as independent ones would)"
    ),
    "average rank": (
        "over the answers that mention the brand, the mean of its place among the tracked "
        "brands the answer names, ordered by first mention (1 = named first)"
    ),
    "citation rate": (
        "of the n answers, the share that cite one of the brand's own domains as a source "
        "(n/a for a brand with no domains configured: nothing it owns could be cited)"
    ),
}


def definitions_text(keys: tuple[str, ...] | None = None) -> list[str]:
    """``term: definition`` lines, in DEFINITIONS order (or ``keys``')."""
    return [f"{k}: {DEFINITIONS[k]}" for k in (keys or tuple(DEFINITIONS))]


# ------------------------------------------------------------ reconciliation table, for people
# The terminal report's reconciliation table: labels, amounts in major units with the currency,
# and the predicate as a word (it printed "explained True" and the columns ours_minor/...).
RECONCILIATION_COLUMNS = (
    "classification",
    "counted as",
    "lines",
    "ours",
    "theirs",
    "difference (theirs \u2212 ours)",
)


def counted_as(explained: bool) -> str:
    """A reconciliation line's class under THE predicate, in words."""
    return "explained" if explained else "unexplained"


def reconciliation_rows(lines: Sequence[Mapping[str, Any]], currency: str) -> list[dict[str, Any]]:
    """Reconciliation lines by classification as people read them (RECONCILIATION_COLUMNS), the
    terminal, the HTML and the JSON (``money.reconciliation_display``) alike: where a vendor
    billed fractions of a minor unit, the exact amount beside the rounded one."""
    out = []
    for r in lines:
        exact = r.get("theirs_exact_minor")
        diff_exact = None if exact is None else Decimal(str(exact)) - int(r["ours_minor"])
        out.append(
            {
                "classification": r["classification"],
                "counted as": counted_as(bool(r["explained"])),
                "lines": r["lines"],
                "ours": money_text(int(r["ours_minor"]), currency),
                "theirs": money_exact_text(int(r["theirs_minor"]), exact, currency),
                "difference (theirs \u2212 ours)": money_exact_text(
                    int(r["difference_minor"]), diff_exact, currency
                ),
            }
        )
    return out


# ------------------------------------------------- "partial" and friends, defined where shown
# "partial" is a word of two scales (issue #34: a newcomer met it as a run status, an evidence
# count and a channel status on one page): each view that shows one of these words prints its
# definition beside it.
EVIDENCE_WORDS: dict[str, str] = {
    "stored": "evidence stored: the answer's text and every required screenshot are stored",
    "partial": (
        "evidence partial: the answer's text is stored, a required screenshot is missing "
        "(reason beside it)"
    ),
    "failed": "evidence failed: no answer was stored (the sample's collection failed)",
    "pending": (
        "evidence pending: the answer's text is stored, its screenshot has not arrived yet"
    ),
}
STATUS_WORDS: dict[str, str] = {
    "full_success": (
        "status full_success: every sample completed with its evidence stored (an answer "
        "judged invalid is still in no rate: said beside the status)"
    ),
    "partial": (
        "status partial: some sample failed or lacks evidence (the reasons follow the status); "
        "an answer whose screenshot is missing is still counted in the rates (its text is "
        "stored); failed samples and invalid answers are in no rate"
    ),
    "failed": "status failed: no sample completed",
}


def evidence_words_text(counts: Mapping[str, Any]) -> list[str]:
    """The definition of each evidence word a count shows (counts above zero)."""
    return [EVIDENCE_WORDS[k] for k in EVIDENCE_WORDS if int(counts.get(k, 0) or 0)]


def status_words_text(statuses: list[str]) -> list[str]:
    """The definition of each run/channel status word shown (as spelled in the tables)."""
    return [STATUS_WORDS[k] for k in STATUS_WORDS if k in statuses]


def modes_text(channel_modes: Mapping[str, list[str]]) -> list[str]:
    """Which modes each channel's rates pool, e.g. ``deepseek__web: 2 modes pooled: standard,
    deep_thinking`` (a newcomer could not tell why one channel had twice the samples)."""
    out = []
    for ch, modes in sorted(channel_modes.items()):
        n = len(modes)
        word = "mode" if n == 1 else "modes pooled"
        out.append(f"{ch}: {n} {word}: {', '.join(modes)}")
    return out


# How the CSV/JSON indexes relate to the page's Q1 / repeat 1 (issue #34 item 13).
INDEX_NOTE = (
    "Questions and repeats count from 1 here (Q1, repeat 1); the CSV, JSON and analyst tables "
    "count from 0: question_index 0 = Q1, repeat_index 0 = repeat 1."
)


def analysis_followup_text(summary: Mapping[str, Any]) -> str:
    """The demo's line after analysing: what was done, and a pointer to the reasons only when
    some answer is for review or invalid (issue #34 item 18)."""
    line = analysis_text(summary)
    if int(summary.get("review", 0)) or int(summary.get("failed", 0)):
        line += "; their reasons are in the report below"
    return line


# The terms of the terminal report's mention-rate table that DEFINITIONS defines (issue #34
# item 8: it defined average rank and citation rate, which only the HTML/JSON show).
TERMINAL_DEFINED = ("n", "mention rate", "95 % interval", "effective n")
# The terminal report's rule: a terminal's width, but never 4096 characters into a pipe.
RULE_MAX = 100


# ------------------------------------------------------------- a second newcomer's read (#34)
# Money exactly: a vendor may bill a fraction of a minor unit (cloro's credits: 0.4 cent a task).
# Stored lines are whole minor units, rounded once per line; the exact amount (detail
# ``cost_exact_minor``) is shown beside the rounded one wherever they differ, in the same text in
# the terminal, the HTML and the JSON (a newcomer read "theirs 0.00 USD" for 4 billed tasks).


def exact_money_text(exact_minor: Decimal | str | int, currency: str) -> str:
    """An exact amount in major units, as many decimals as it has (at least two): a sum of
    ``0.800000`` minor units is ``0.008 CNY``."""
    major = Decimal(str(exact_minor)) / 100
    text = format(major.normalize(), "f")
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0").ljust(2, "0")
    if whole in ("-0", "") and Decimal(str(exact_minor)) == 0:
        whole = "0"
    whole = whole.replace("-", "\u2212")  # the minus of human text, as Money.format writes it
    return f"{whole}.{frac} {str(currency).strip()}"


def money_exact_text(minor: int, exact_minor: Decimal | str | None, currency: str) -> str:
    """Money with the exact amount beside it where it has fractions of a minor unit:
    ``0.01 CNY (exact 0.008 CNY)``; just ``0.08 CNY`` where it has none. THE definition: the
    rounded figure is the exact amount rounded to the minor unit, half away from zero (never a
    sum of rounded lines); ``minor`` is shown only where there is no exact amount."""
    if exact_minor is None:
        return money_text(int(minor), currency)
    exact = Decimal(str(exact_minor))
    rounded = money_text(int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP)), currency)
    if exact == exact.to_integral_value():
        return rounded
    return f"{rounded} (exact {exact_money_text(exact, currency)})"


# Warnings a sample carries in the reports: the answer's stored warnings as they stand NOW. A
# screenshot that has arrived is not pending any more; a service that never gives screenshots
# does not warn on each answer (that is the service's property, said once per report:
# ``no_screenshots_text``).
SCREENSHOT_WARNINGS = ("SCREENSHOT_PENDING", "SCREENSHOT_UNAVAILABLE")


def current_warnings(
    warnings: list[str] | tuple[str, ...] | None, evidence_word: str, gives_screenshots: bool
) -> list[str]:
    """The warnings of one sample as a person reads them (JSON ``warnings``, the HTML list)."""
    out = []
    for w in warnings or ():
        if not gives_screenshots and w in SCREENSHOT_WARNINGS:
            continue
        if w == "SCREENSHOT_PENDING" and evidence_word != "pending":
            continue
        # stored evidence holds every required screenshot: a missing optional one is no warning
        if w == "SCREENSHOT_UNAVAILABLE" and evidence_word == "stored":
            continue
        out.append(str(w))
    return out


def no_screenshots_text(channels: list[str]) -> str:
    """Said once per report: the channels whose service never gives a screenshot."""
    return (
        f"screenshots: the service behind {', '.join(sorted(channels))} never gives one "
        "(a property of the service, not a fault of these answers; their text is stored)"
    )


# What a channel is, in words: a channel key is platform__device, and two keys can look alike
# while being different things (``deepseek__web``: DeepSeek's model API, device "web", beside
# ``deepseek_web__desktop``: DeepSeek's consumer web app in our browser). The keys stay (they are
# stored, partition and column values); every report says what each one is, in these words.
CHANNEL_ACCESS_WORDS: dict[str, str] = {
    "api": "model API",
    "scraped": "consumer product via an answer-scraping service",
    "browser": "consumer web app in our own browser",
}


def channel_label(channel: str, access: str) -> str:
    """``deepseek__web = deepseek, model API, device 'web'``: what a channel key stands for."""
    platform, _, device = str(channel).partition("__")
    how = CHANNEL_ACCESS_WORDS.get(str(access), f"access {access}")
    return f"{channel} = {platform}, {how}, device '{device}'"


def channel_status_said(status: Mapping[str, Any]) -> bool:
    """Whether a report says a channel's status in words: when it is not full_success, or when
    some of its answers are in no rate (invalid) all the same."""
    return status.get("overall") != "full_success" or bool(status.get("invalid_reasons"))


def channel_status_text(channel: str, status: Mapping[str, Any]) -> str:
    """One channel's status with its reason: ``kimi__web: partial: 1 required screenshot
    missing``."""
    return f"{channel}: {status_text(status)}"


def trend_note(run: Mapping[str, Any], trend_days: int) -> str | None:
    """Why a run's report shows no trend over days (None when it shows one): said in the
    terminal, the HTML and the JSON alike."""
    if trend_days >= 2:
        return None
    monitor = run.get("monitor_id")
    if not monitor:
        return "trend: none: this run belongs to no monitor (a trend is a monitor's rates per day)"
    if run.get("scheduled_for") is None:
        return (
            f"trend: none: this run was created by hand under monitor {monitor}, not as one of "
            "its scheduled days; a trend is drawn from the monitor's scheduled days"
        )
    if trend_days == 1:
        return (
            f"trend: none yet: monitor {monitor} has one scheduled day so far; a trend needs at "
            "least two days"
        )
    return (
        f"trend: none yet: the analyst tables have no day of monitor {monitor} so far (the "
        "run's analysis has not been refreshed into them)"
    )


# What the quoted maximum covers (domain.plan.quote), said where it is shown: a quote of 8.70
# beside 6.98 charged read as a mistake (issue #34, a fifth read).
QUOTE_NOTE = (
    "quoted maximum: every sample at its mode's base price, plus the surcharges it may use "
    "(screenshot, web search, deep thinking), plus a paid retry allowance (up to max_attempts "
    "- 1 retries per sample) on platforms whose fee rule charges retries; charged is what the "
    "attempts actually cost, and the rest of the reservation is released when the run closes"
)
