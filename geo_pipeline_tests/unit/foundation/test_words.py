"""Words a person can act on (issue #34): status with its reason, money in major units with its
currency, a reconciliation difference with its direction."""

from __future__ import annotations

from geo_pipeline.domain.words import difference_text, money_with_minor, status_text


def _st(overall, total, completed, failed=0, evidence_reasons=None, **kw):
    return {
        "overall": overall,
        "total": total,
        "collection": {"completed": completed, "failed": failed},
        "evidence_reasons": evidence_reasons or {},
        "failure_reasons": kw.pop("failure_reasons", {}),
        "uncertain": 0,
        "analysing": False,
        **kw,
    }


def test_status_says_its_reason_per_channel():
    run = _st("partial", 50, 50, evidence_reasons={"SCREENSHOT_UNAVAILABLE": 3})
    channels = {
        "deepseek__web": _st("partial", 25, 25, evidence_reasons={"SCREENSHOT_UNAVAILABLE": 3}),
        "kimi__web": _st("full_success", 25, 25),
    }
    assert status_text(run, channels) == "partial: 3 required screenshots missing on deepseek__web"
    # one spelling: the status word as the per-channel tables print it (issue #34 finding 3)
    assert status_text(_st("full_success", 4, 4)) == (
        "full_success: all 4 samples completed with their evidence stored"
    )
    failed = _st("partial", 4, 3, 1, failure_reasons={"login_page": 1})
    assert status_text(failed) == "partial: 1 failed (login_page x1)"
    assert status_text(_st("in_progress", 4, 1)) == "in_progress: 3 of 4 still collecting"
    # Every screenshot that is not there is counted, the pending ones too (a newcomer read
    # "3 required screenshots missing" beside an evidence table with 5 absent: 3 + 2 pending).
    both = _st("partial", 20, 20, evidence_reasons={"SCREENSHOT_UNAVAILABLE": 3,
                                                    "SCREENSHOT_PENDING": 2})  # fmt: skip
    assert status_text(both) == (
        "partial: 2 screenshots still pending; 3 required screenshots missing"
    )


def test_money_in_major_units_and_differences_with_direction():
    assert money_with_minor(870, "CNY") == "8.70 CNY (870 minor units)"
    assert difference_text(10, "CNY") == "the platforms billed 0.10 CNY more than we charged"
    assert difference_text(-10, "CNY") == "we charged 0.10 CNY more than the platforms billed"
    # Zero is the amount, 0.00 CNY: never "statements and our charges agree" (said under a
    # non-zero unexplained difference, it contradicted the line above it), nor "none" (read as
    # "no such lines" under 49 explained matched lines: the third newcomer read, F6).
    assert difference_text(0, "CNY") == "0.00 CNY"


def test_exact_money_beside_the_rounded_figure():
    """Issue #34 (second read): 4 cloro tasks at 0.4 cent read "theirs 0.00 USD"."""
    from geo_pipeline.domain.words import exact_money_text, money_exact_text

    assert exact_money_text("1.600000", "USD") == "0.016 USD"
    assert exact_money_text("870", "CNY") == "8.70 CNY"
    assert exact_money_text("-1.2", "CNY") == "\u22120.012 CNY"
    assert exact_money_text("0", "CNY") == "0.00 CNY"
    # the rounded figure is the exact amount rounded (half away from zero), never a sum of
    # rounded lines: 0.016 reads 0.02 (the third newcomer read "0.00 (exact 0.016)")
    assert money_exact_text(0, "1.600000", "USD") == "0.02 USD (exact 0.016 USD)"
    assert money_exact_text(-4, "-2.4", "USD") == "\u22120.02 USD (exact \u22120.024 USD)"
    assert money_exact_text(0, "0.4", "USD") == "0.00 USD (exact 0.004 USD)"
    assert money_exact_text(8, "8.000000", "CNY") == "0.08 CNY"
    assert money_exact_text(8, None, "CNY") == "0.08 CNY"


def test_warnings_as_they_stand_now():
    from geo_pipeline.domain.words import current_warnings

    pending = ["SCREENSHOT_PENDING"]
    assert current_warnings(pending, "stored", True) == []
    assert current_warnings(pending, "pending", True) == pending
    assert current_warnings(["SCREENSHOT_UNAVAILABLE", "X"], "stored", False) == ["X"]
    assert current_warnings(["SCREENSHOT_UNAVAILABLE"], "partial", True) == [
        "SCREENSHOT_UNAVAILABLE"
    ]
    # evidence stored = every REQUIRED screenshot stored: a missing optional one is no warning
    # (deepseek__app Q3 r2 warned on stored evidence, "optional on this channel": F8)
    assert current_warnings(["SCREENSHOT_UNAVAILABLE", "X"], "stored", True) == ["X"]


def test_a_channel_key_said_as_what_it_is():
    from geo_pipeline.domain.words import channel_label

    api = channel_label("deepseek__web", "api")
    browser = channel_label("deepseek_web__desktop", "browser")
    assert api == "deepseek__web = deepseek, model API, device 'web'"
    assert "our own browser" in browser and "device 'desktop'" in browser


def test_why_no_trend():
    from geo_pipeline.domain.words import trend_note

    assert trend_note({"monitor_id": "m", "scheduled_for": "2026-12-01"}, 2) is None
    assert "belongs to no monitor" in (trend_note({"monitor_id": None}, 0) or "")
    assert "created by hand" in (trend_note({"monitor_id": "m", "scheduled_for": None}, 0) or "")
    assert "one scheduled day" in (trend_note({"monitor_id": "m", "scheduled_for": "d"}, 1) or "")


def test_the_explained_sentence_says_the_exact_difference_too():
    """The scraped demo run said "we charged 0.04 USD more" above a line reading exact -0.024."""
    from geo_pipeline.domain.words import reconciliation_text

    lines = reconciliation_text(0, -4, 0, "USD", explained_exact_minor="-2.4")
    assert lines[1].endswith("we charged 0.02 USD (exact 0.024 USD) more than the platforms billed")
    # below half a minor unit the direction is still said, never "none"
    tiny = reconciliation_text(0, 0, 0, "USD", explained_exact_minor="-0.4")
    assert tiny[1].endswith("we charged 0.00 USD (exact 0.004 USD) more than the platforms billed")
    plain = reconciliation_text(0, -4, 0, "USD", explained_exact_minor="-4")
    assert plain[1].endswith("we charged 0.04 USD more than the platforms billed")


def test_one_sample_is_not_all_1_samples():
    """The browser demo run read "full_success: all 1 samples completed"."""
    from geo_pipeline.domain.words import status_text

    assert status_text({"overall": "full_success", "total": 1}) == (
        "full_success: its 1 sample completed with its evidence stored"
    )


def test_one_fee_statement_is_not_1_fee_statements():
    """The demo read "reconciled against 1 fee statements" (third newcomer read, F11)."""
    from geo_pipeline.domain.words import counted

    assert counted(1, "fee statement") == "1 fee statement"
    assert counted(2, "fee statement") == "2 fee statements"
    assert counted(0, "fee statement") == "0 fee statements"


def test_one_rate_format_in_the_terminal_the_html_and_the_chart():
    """F10 (third read): "0.90 [0.44, 0.99]" in the terminal, "90 % (44–99 %, n = 10)" in the
    HTML table, "90.0 % [44.1 %, 99.0 %]" in the HTML chart: one format, the HTML table's."""
    from geo_pipeline.analysis.charts import rate_bars_svg
    from geo_pipeline.cli.ops import _rate
    from geo_pipeline.domain.words import rate_text

    said = "90 % (44–99 %, n = 10)"
    assert rate_text(0.9, 0.441, 0.99, 10) == said
    row = {"mention_rate": 0.9, "mention_rate_lower": 0.441, "mention_rate_upper": 0.99, "n": 10}
    assert _rate(row) == said
    svg = rate_bars_svg(
        [
            {
                "channel": "kimi__web",
                "brand": "b",
                "rate": 0.9,
                "lower": 0.441,
                "upper": 0.99,
                "n": 10,
            }
        ]
    )
    assert f"b on kimi__web: {said}" in svg
