"""Tracking rules from the pinned ClearURLs snapshot (R18): share and tracking parameters of the
big platforms go, parameters that choose content stay; a redirect keeps its raw URL and records
the target the engine named."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from geo_pipeline.domain.urls import (
    load_provider_rules,
    normalise_url,
    site_url,
)

TRACKING_RULES_ENV = "GEO_URL_TRACKING_RULES"
BV = "https://www.bilibili.com/video/BV1GJ411x7h7/"


def test_bilibili_share_parameters_give_the_bare_url():
    shared = (
        BV + "?spm_id_from=333.1007.tianma.1-1-1.click&vd_source=3c1d5e8b0c6a4f1e9d2b7a6c5e4f3a2b"
    )
    assert normalise_url(shared).normalized == BV
    assert normalise_url(shared).normalized == normalise_url(BV).normalized
    # the mobile site's own share ids too (provider m.bilibili.com)
    mobile = (
        "https://m.bilibili.com/video/BV1GJ411x7h7?share_source=copy_web&bbid=XY1&ts=1700000000"
    )
    assert normalise_url(mobile).normalized == "https://m.bilibili.com/video/BV1GJ411x7h7"


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        # p= picks the part of a multi-part video, t= the start time: content, kept
        (BV + "?p=2&spm_id_from=333.788&vd_source=abc", BV + "?p=2"),
        (BV + "?t=30&share_source=copy_web", BV + "?t=30"),
        (
            "https://www.bilibili.com/read/mobile?id=123&from=search",
            "https://www.bilibili.com/read/mobile?id=123",
        ),
        # Alibaba storefronts: the item id stays, the click-tracking goes
        (
            "https://item.taobao.com/item.htm?id=6543&spm=a21n57.1.0.0&scm=1007.1&pvid=ab12&ali_trackid=2",
            "https://item.taobao.com/item.htm?id=6543",
        ),
        (
            "https://detail.tmall.com/item.htm?id=77&abbucket=3&sourceType=item",
            "https://detail.tmall.com/item.htm?id=77",
        ),
        ("https://weibo.com/1234/AbCd?weibo_id=9&dt_dapp=1", "https://weibo.com/1234/AbCd"),
        (
            "https://zhuanlan.zhihu.com/p/123?share_code=Ab1&utm_psn=177&utm_source=wechat",
            "https://zhuanlan.zhihu.com/p/123",
        ),
        (
            "https://www.douyin.com/video/7311?previous_page=app_code_link&u_code=x&did=1&iid=2",
            "https://www.douyin.com/video/7311",
        ),
        (
            "https://baijiahao.baidu.com/s?id=178&wfr=spider&for=pc",
            "https://baijiahao.baidu.com/s?id=178",
        ),
        (
            "https://item.jd.com/1000.html?pps=seckill.1&cu=true&ad_od=share",
            "https://item.jd.com/1000.html",
        ),
        (
            "https://www.xiaohongshu.com/explore/65ab?xhsshare=CopyLink&appuid=5&apptime=17&xsec_token=T",
            "https://www.xiaohongshu.com/explore/65ab?xsec_token=T",
        ),
        # international platforms
        (
            "https://www.youtube.com/watch?v=dQw4w9WgXcQ&feature=share&t=42",
            "https://www.youtube.com/watch?v=dQw4w9WgXcQ&t=42",
        ),
        ("https://twitter.com/luckin/status/1?s=20&t=AbC", "https://twitter.com/luckin/status/1"),
        (
            "https://www.facebook.com/story.php?story_fbid=5&id=7&__tn__=R&refsrc=x",
            "https://www.facebook.com/story.php?story_fbid=5&id=7",
        ),
        (
            "https://www.google.com/search?q=luckin+coffee&ei=Xy&ved=0ah&sxsrf=A1",
            "https://www.google.com/search?q=luckin+coffee",
        ),
        (
            "https://www.amazon.com/dp/B0C1?psc=1&qid=169&sr=8-1&pf_rd_r=Q",
            "https://www.amazon.com/dp/B0C1?psc=1",
        ),
        (
            "https://www.reuters.com/markets/luckin?taid=65ab&utm_source=twitter",
            "https://www.reuters.com/markets/luckin",
        ),
        # global rules apply to every host
        ("https://e.com/p?_ga=2.1&_gl=1*x&mkt_tok=abc&twclid=9&k=1", "https://e.com/p?k=1"),
    ],
)
def test_provider_rules_strip_tracking_and_keep_content(raw, normalized):
    assert normalise_url(raw).normalized == normalized


def test_exceptions_keep_the_parameters_the_rules_would_strip():
    # bilibili's API is excepted by its provider and by the global rules
    api = "https://api.bilibili.com/x/web-interface/view?bvid=BV1GJ411x7h7&from=web"
    assert normalise_url(api).normalized == api
    # Google Docs is excepted from the Google provider (source= stays there) ...
    doc = "https://docs.google.com/document/d/1/edit?source=drive"
    assert normalise_url(doc).normalized == doc
    # ... but the same parameter goes on a Google search page
    assert normalise_url("https://www.google.com/search?q=a&source=hp").normalized == (
        "https://www.google.com/search?q=a"
    )


def test_rules_do_not_leak_to_other_hosts():
    # 'from' is a bilibili share parameter, not a tracking parameter everywhere
    url = "https://example.com/flights?from=PEK&to=SHA&vd_source=x"
    assert normalise_url(url).normalized == url


def test_content_parameters_are_never_stripped_whatever_a_rule_says(tmp_path, url_env):
    """R18: a snapshot update that starts stripping a content parameter (id, p, page, q, v, …)
    must not merge different pages; the project's keep list wins over any rule."""
    data = {
        "providers": {
            "greedy": {
                "urlPattern": "^https?:\\/\\/(?:[a-z0-9-]+\\.)*?bilibili\\.com",
                "rules": ["id", "p", "q", "spm_id_from"],
                "exceptions": [],
            }
        }
    }
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(data))
    url_env(TRACKING_RULES_ENV, str(path))
    got = normalise_url(BV + "?id=1&p=2&q=x&spm_id_from=333").normalized
    assert got == BV + "?id=1&p=2&q=x"


def test_provider_rules_can_be_switched_off_or_replaced(tmp_path, url_env):
    shared = BV + "?spm_id_from=333&vd_source=abc"
    url_env(TRACKING_RULES_ENV, "off")
    assert normalise_url(shared).normalized == shared
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps({"providers": {"only": {"urlPattern": ".*", "rules": ["vd_source"]}}})
    )
    url_env(TRACKING_RULES_ENV, str(path))
    assert normalise_url(shared).normalized == BV + "?spm_id_from=333"
    url_env(TRACKING_RULES_ENV, None)
    assert normalise_url(shared).normalized == BV


def test_the_bundled_rules_say_what_they_are_and_every_pattern_compiles():
    raw = json.loads(
        resources.files("geo_pipeline.domain").joinpath("tracking_rules.json").read_text()
    )
    about = raw["_about"]
    # Written here in the ClearURLs provider format, so a pinned copy of the maintained public
    # rules can replace it through GEO_URL_TRACKING_RULES.
    assert "ClearURLs" in about["format"] and about["revision"]
    assert "GEO_URL_TRACKING_RULES" in about["maintained_source"]
    for name in (
        "globalRules",
        "bilibili.com",
        "taobao.com",
        "tmall.com",
        "weibo",
        "zhihu",
        "douyin",
        "baidu",
        "jd.com",
        "youtube",
        "google",
        "amazon",
        "facebook",
        "twitter",
    ):
        assert name in raw["providers"], name
    rules = load_provider_rules()  # compiles every urlPattern, rule and exception
    assert len(rules.providers) == len(raw["providers"])


# --------------------------------------------------------------------------- redirect targets
def test_a_redirect_keeps_its_raw_url_and_records_the_target_site():
    redirect = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQH3x-Yz"
    got = normalise_url(redirect, target="www.luckincoffee.com")
    assert got.raw == redirect
    assert got.normalized == "https://www.luckincoffee.com/"
    assert got.registrable_domain == "luckincoffee.com"
    # a full URL as target works the same, tracking rules included
    full = normalise_url(
        redirect, target="https://www.bilibili.com/video/BV1GJ411x7h7/?vd_source=x"
    )
    assert (full.raw, full.normalized, full.registrable_domain) == (redirect, BV, "bilibili.com")
    # no usable target: the redirect itself, as before
    assert normalise_url(redirect, target=None).registrable_domain == "google.com"
    assert (
        normalise_url(redirect, target="Luckin Coffee - Wikipedia").registrable_domain
        == "google.com"
    )


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("example.com", "https://example.com/"),
        ("WWW.Example.com.", "https://www.example.com/"),
        ("zhuanlan.zhihu.com", "https://zhuanlan.zhihu.com/"),
        ("bücher.de", "https://xn--bcher-kva.de/"),
        ("Luckin Coffee - Wikipedia", None),  # a page title, not a host
        ("com.cn", None),  # a bare public suffix
        ("localhost", None),
        ("", None),
    ],
)
def test_site_url_accepts_only_host_names(name, url):
    assert site_url(name) == url


@pytest.mark.parametrize(
    "url",
    [
        "https://www.bilibili.com/video/BV1?spm_id_from=1&vd_source=2&p=3",
        "https://api.bilibili.com/x?spm_id_from=1",
        "https://www.baidu.com/s?wd=x&rsv_spt=1",
        "https://baike.baidu.com/item/x?fr=aladdin",
        "https://API.example.com/v1?utm_source=x",
        "https://example.com/api/v1?utm_source=x",
        "https://shop.example.com.cn/p/1?spm=a&id=3",
        "https://www.google.com.hk/url?q=x&ved=1",
        "https://docs.google.com/d?usp=sharing",
        "https://m.jd.com/item?id=1&utm_term=x",
    ],
)
def test_the_prefilter_picks_the_providers_checking_each_would(url):
    """Issue #14: one alternation search stands in for the platform providers' patterns; the
    rules chosen must be exactly those of checking every provider."""
    from geo_pipeline.domain import urls

    rules = urls.load_provider_rules()
    naive = tuple(r for p in rules.providers if p.applies_to(url) for r in p.rules)
    urls._stripper.cache_clear()
    assert set(urls._stripper(rules, url)) == set(naive)
    assert urls._prefilter(rules)[1] is not None  # the bundled rules do use the alternation


def test_platform_rules_are_looked_up_only_for_parameters_that_survive_tracking_rules():
    """Issue 33 (the evidence path's cost): most cited queries hold tracking parameters alone;
    they are removed without matching the URL against every platform provider, and URLs whose
    applying providers are the same share one rule set (made once, hashed by identity), so a
    parameter's cached verdict is not keyed by forty patterns. The results do not change."""
    from geo_pipeline.domain import urls

    rules = urls.load_provider_rules()
    urls._stripper.cache_clear()
    assert normalise_url("https://example.org/a?utm_source=x&gclid=1").normalized == (
        "https://example.org/a"
    )
    assert urls._stripper.cache_info().misses == 0  # no platform lookup was needed
    first = urls._stripper(rules, "https://example.org/a?id=1")
    second = urls._stripper(rules, "https://example.org/b?page=2")
    assert first is second and first  # one rule set (the global rules) for both
