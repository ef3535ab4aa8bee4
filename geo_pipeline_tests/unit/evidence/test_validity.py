"""Answer validity (R22): completed ≠ valid; every verdict says why and under which rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.domain.validity import RULE_VERSION, classify

LONG_EN = (
    "For a small business, the most often recommended CRM tools are HubSpot, Zoho and Pipedrive. "
    "HubSpot has a generous free tier, Zoho is cheap at scale, and Pipedrive is simple to learn. "
    "Choose by team size and budget."
)
LONG_ZH = "适合小企业的CRM有很多选择，常被推荐的是纷享销客、销售易和HubSpot。它们各有侧重：纷享销客适合移动办公，销售易适合大客户管理。"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("\u3000\u200b\ufeff", "empty"),
        ("Please log in to continue.", "login_page"),
        ("Sign in to view this answer. Create an account to continue", "login_page"),
        ("请先登录后查看完整回答", "login_page"),
        ("扫码登录 | 登录/注册", "login_page"),
        ("Internal Server Error", "error_page"),
        ("502 Bad Gateway\nnginx", "error_page"),
        ("Something went wrong. Please try again later.", "error_page"),
        ("Too many requests, rate limit exceeded.", "error_page"),
        ("服务器繁忙，请稍后再试。", "error_page"),
        ("系统异常，出错了", "error_page"),
        ("Please complete the CAPTCHA to continue.", "captcha"),
        ("Verify you are human by completing the action below.", "captcha"),
        ("Checking your browser before accessing the site.", "captcha"),
        ("请完成安全验证", "captcha"),
        ("拖动下方滑块完成拼图", "captcha"),
        ("I'm sorry, but I can't help with that request.", "refusal"),
        ("I cannot provide information about that topic.", "refusal"),
        ("As an AI language model, I cannot browse the internet for prices today.", "refusal"),
        ("抱歉，我无法回答这个问题。", "refusal"),
        ("这个问题我还没学会，换个话题吧。", "refusal"),
        ("Here is a script:\n\n```python\nprint('hi')\n", "truncated"),
        ("The three leading brands in this market are Acme, Globex and", "truncated"),
        ("Based on reviews, the leading brands are the following ones:", "truncated"),
        ("推荐以下几个品牌：华为、小米和", "truncated"),
        ("综合来看，在国内市场上最受欢迎的几款手机品牌分别是华为，", "truncated"),
        (
            "这是一个很长的回答，内容涉及很多品牌的比较，我们逐一分析各自的优缺点以及适用的人",
            "truncated",
        ),
        ("Yes.", "too_short"),
        ("是的。", "too_short"),
        ("**OK**", "too_short"),
    ],
)
def test_invalid_answers_get_a_reason(text, reason):
    verdict = classify(text)
    assert (verdict.valid, verdict.reason) == (False, reason)
    assert verdict.rule_version == RULE_VERSION and verdict.label == "invalid"


@pytest.mark.parametrize(
    "text",
    [
        LONG_EN,
        LONG_ZH,
        "以下是推荐的几款手机：\n\n1. 华为 Mate 60\n2. 小米 14\n3. OPPO Find X7\n",
        "| 品牌 | 评分 | 说明 |\n|---|---|---|\n| Acme | 9 | 性价比高 |\n| Globex | 8 | 售后好 |\n",
        "Example:\n\n```bash\npip install acme\n```\n\nThat installs the client library for you.",
        "Learn more about the leading products at https://example.com/compare",
        # Long answers that merely talk about logins, captchas or errors are answers.
        LONG_EN + " Note that some vendors require you to log in to continue using the trial, "
        "and a captcha may appear. " * 10,
        "I can't give financial advice, but " + LONG_EN,
        "## Summary\n\n" + LONG_ZH,
    ],
)
def test_real_answers_are_valid(text):
    verdict = classify(text)
    assert verdict.valid, verdict
    assert verdict.reason is None and verdict.label == "valid"


def test_provider_truncation_flag_wins_over_a_tidy_ending():
    verdict = classify(LONG_EN, provider_truncated=True)
    assert (verdict.valid, verdict.reason) == (False, "truncated")
    assert "provider" in (verdict.detail or "")


def test_empty_stays_empty_even_when_flagged_truncated():
    assert classify("  ", provider_truncated=True).reason == "empty"


@given(st.text(max_size=400), st.booleans())
def test_classifier_is_total_and_consistent(text, flag):
    verdict = classify(text, flag)
    assert verdict.valid == (verdict.reason is None)
    assert verdict.rule_version == RULE_VERSION


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        # The status-code phrases are a pattern apart from the word phrases (for speed): the
        # earlier match in the text is the one a verdict names, as with one pattern.
        ("502 Bad Gateway\nnginx", "matched '502 bad gateway'"),
        ("Bad gateway: 502 error", "matched 'bad gateway'"),
        ("Oops. Something went wrong (404 Not Found)", "matched 'something went wrong'"),
        ("error 1500 timeout, then 403 forbidden", "matched '403 forbidden'"),
        ("抱歉，我无法回答这个问题。", "matched '抱歉，我无法'"),
        ("该话题我暂时无法讨论。", "matched '该话题我暂时无法'"),
        ("Sign in to continue", "matched 'sign in to continue'"),
    ],
)
def test_the_detail_names_the_earliest_phrase(text: str, detail: str) -> None:
    assert classify(text).detail == detail


def _too_short_reference(text: str) -> bool:
    """validity._too_short before issue 33's early exit: the whole body built, then weighed."""
    from geo_pipeline.domain import validity as v

    body = v._MARKUP.sub("", v._SPACE.sub("", text))
    if len(body) >= v.MIN_WEIGHT:
        return False
    return v._weight(body) < v.MIN_WEIGHT


@given(
    st.text(
        alphabet=st.sampled_from(list("ab1 \t\n\u3000\u200b\ufeff\xa0#*_`>|-=~[]()!中あ한。.")),
        max_size=60,
    )
)
def test_too_short_early_exit_agrees_with_weighing_the_whole_body(text):
    from geo_pipeline.domain.validity import _too_short

    assert _too_short(text) == _too_short_reference(text)
    assert _too_short(text * 3) == _too_short_reference(text * 3)


@pytest.mark.parametrize(
    "filler", list(" \t\n\r\x0b\x0c\x85\xa0\u2028\u3000\u200b\u200c\u200d\ufeff#*_`>|-=~[]()!")
)
def test_too_short_early_exit_skips_what_the_body_drops(filler):
    """Forty spaces or markup characters and a two-letter word: too short either way (and a
    character the early exit counted by mistake would say it is not)."""
    from geo_pipeline.domain.validity import _too_short

    text = filler * 40 + "ab"
    assert _too_short(text) == _too_short_reference(text) is True


def test_compacting_without_the_regex_is_the_regex():
    """classify compacts whitespace with str.split (issue 33): every character _SPACE matches is
    one split() splits on or one made a space first, and no other."""
    import re
    import sys

    from geo_pipeline.domain.validity import _SPACE, _ZERO_WIDTH_AS_SPACE

    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        by_split = ch.isspace() or cp in _ZERO_WIDTH_AS_SPACE
        assert bool(_SPACE.fullmatch(ch)) == by_split == bool(re.fullmatch(r"\s", ch) or by_split)
        assert ch.translate(_ZERO_WIDTH_AS_SPACE).split() == ([] if by_split else [ch]), hex(cp)


@given(
    st.text(
        alphabet=st.sampled_from(
            list("ab 中\t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000\u200b\u200c\u200d\ufeff\u2060")
        ),
        max_size=40,
    )
)
def test_classify_compacts_as_the_regex_did(text):
    from geo_pipeline.domain.validity import _SPACE, _compact

    assert _compact(text) == _SPACE.sub(" ", text).strip()
