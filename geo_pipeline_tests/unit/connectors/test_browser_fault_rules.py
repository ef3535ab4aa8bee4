"""The pure rules behind the browser lane's faults (issue #32): a changed page waits a bounded
number of times and then ends with a reason naming the layout; a region's proxy credentials are
handed to Chromium apart from the URL; a channel no vendor bills reconciles as explained, in one
wording."""

from __future__ import annotations

import pytest

from geo_pipeline.connectors.browser.connector import proxy_settings
from geo_pipeline.connectors.browser.spec import InvalidCapability, PageChanged
from geo_pipeline.connectors.protocols import OWN_ESTIMATE, statement_source
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.billing import NO_VENDOR_BILL, ReconLine, is_explained, summarise
from geo_pipeline.domain.retry import ErrorFacts, RetryPolicy, classify
from geo_pipeline.domain.words import reconciliation_text


def _layout(waits: int, waited: int | None = None) -> ErrorFacts:
    return ErrorFacts(
        "unavailable",
        "submit",
        attempt_no=waits + 1,
        waited_so_far=waits if waited is None else waited,
        cause=PageChanged.cause,
        layout_waits=waits,
    )


def test_a_changed_page_waits_once_then_fails_naming_the_layout() -> None:
    policy = RetryPolicy()
    first = classify(_layout(0), policy, rnd=0.0)
    assert first.action == "retry" and first.reason == "unavailable:layout_changed"
    assert first.delay_s >= policy.wait_base_s / 2
    last = classify(_layout(policy.max_layout_waits), policy, rnd=0.0)
    assert last.action == "fail" and last.reason == "unavailable:layout_changed:waits_spent"
    # Waits for an account do not spend the layout's: only the page's own misses count.
    assert classify(_layout(0, waited=20), policy, rnd=0.0).action == "retry"
    # Other waits stay unbounded (a person logs in, whenever).
    login = ErrorFacts("unavailable", "submit", 50, waited_so_far=49, cause="needs_login")
    assert classify(login, policy, rnd=0.0).action == "retry"


def test_page_changed_is_the_invalid_capability_class() -> None:
    err = PageChanged("x")
    assert isinstance(err, InvalidCapability) and err.error_class == "unavailable"
    assert err.cause == "layout_changed"


def test_a_proxy_url_with_credentials_is_split_for_chromium() -> None:
    assert proxy_settings("http://alice:s%40cret@10.0.0.1:3128") == {
        "server": "http://10.0.0.1:3128",
        "username": "alice",
        "password": "s@cret",
    }
    assert proxy_settings("socks5://proxy.example:1080") == {
        "server": "socks5://proxy.example:1080"
    }
    with pytest.raises(InvalidCapability) as info:
        proxy_settings("alice:pw@host")
    assert "pw" not in str(info.value)


def test_browser_channels_have_no_vendor_bill_and_reconcile_explained() -> None:
    entries = load_registry().every_entry()
    for name in ("deepseek_web", "doubao_web", "kimi_web"):
        assert statement_source(entries[name]) == OWN_ESTIMATE
    assert is_explained(NO_VENDOR_BILL)
    line = ReconLine("u1", "deepseek_web", NO_VENDOR_BILL, "completed", 10, 0, "CNY")
    other = ReconLine("u2", "deepseek_web", "matched", "completed", 0, 0, "CNY")
    s = summarise("r1", "CNY", [line, line, other])
    assert s.unexplained_difference_minor == 0 and s.unexplained_lines == 0
    # theirs 0 - ours 20, explained by what the channel is: in the explained difference like
    # every explained line's (one rule, issue #34), and said as what it is in the last line
    assert s.explained_difference_minor == -20
    assert s.no_vendor_bill_ours_minor == 20 and s.clean
    words = reconciliation_text(
        s.unexplained_difference_minor,
        s.explained_difference_minor,
        0,
        "CNY",
        no_vendor_bill_minor=s.no_vendor_bill_ours_minor,
    )
    # a zero amount reads 0.00 CNY, never "none" (read as "no such lines"); with no vendor
    # statement the sentence never says "than the platforms billed" (third newcomer read, F6/F7)
    assert words[0] == "unexplained difference: 0.00 CNY"
    assert "than the platforms billed" not in words[1], words
    assert words[1].endswith(
        "0.00 CNY on lines a platform bills, and 0.20 CNY we charged that no platform bills"
    ), words
    assert words[-1].startswith("not billed by any platform: 0.20 CNY charged at our own")
