"""Citation URL normalisation (R18): raw kept, only content-neutral differences removed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.domain.urls import DEFAULT_TRACKING_PARAMS, normalise_url, registrable_domain


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("HTTPS://WWW.Example.COM/Path", "https://www.example.com/Path"),  # path case kept
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("https://example.com", "https://example.com/"),
        ("https://example.com/docs/", "https://example.com/docs/"),  # trailing slash kept
        ("https://example.com/docs", "https://example.com/docs"),
        ("https://example.com/a/./b/../c", "https://example.com/a/c"),
        ("https://example.com/a#section-2", "https://example.com/a"),
        ("https://example.com/#/app/route", "https://example.com/#/app/route"),
        ("https://example.com/#!/page", "https://example.com/#!/page"),
        ("https://example.com/%7euser/%2Fx%2f", "https://example.com/~user/%2Fx%2F"),
        ("https://example.com/a b", "https://example.com/a%20b"),
        ("https://example.com/中文", "https://example.com/%E4%B8%AD%E6%96%87"),
        ("https://example.com/100%", "https://example.com/100%25"),
        ("https://bücher.de/", "https://xn--bcher-kva.de/"),
        ("https://example.com./a", "https://example.com/a"),
        ("  https://example.com/a  ", "https://example.com/a"),
        # tracking parameters go, everything else stays in order and spelling
        ("https://e.com/p?utm_source=openai", "https://e.com/p"),
        ("https://e.com/p?b=2&utm_medium=x&a=1", "https://e.com/p?b=2&a=1"),
        ("https://e.com/p?gclid=1&fbclid=2&msclkid=3&spm=a.b&id=9", "https://e.com/p?id=9"),
        ("https://e.com/p?yclid=1&mc_eid=2&mc_cid=3&x=", "https://e.com/p?x="),
        ("https://e.com/p?UTM_Source=Foo&Page=2", "https://e.com/p?Page=2"),
        ("https://e.com/p?q=a+b&ref=home", "https://e.com/p?q=a+b&ref=home"),
        ("https://e.com/p?id=1&id=2", "https://e.com/p?id=1&id=2"),
        ("https://e.com/p?q=%e4%b8%ad", "https://e.com/p?q=%E4%B8%AD"),
        ("https://e.com/p?&&a=1&", "https://e.com/p?a=1"),
    ],
)
def test_normalisation_rules(raw, normalized):
    result = normalise_url(raw)
    assert result.normalized == normalized
    assert result.raw == raw  # the raw URL is kept exactly


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("www.example.com", "example.com"),
        ("a.b.example.com.cn", "example.com.cn"),
        ("www.beijing.gov.cn", "beijing.gov.cn"),
        ("news.bbc.co.uk", "bbc.co.uk"),
        ("user.github.io", "user.github.io"),
        ("zhuanlan.zhihu.com", "zhihu.com"),
        ("www.example.org.cn", "example.org.cn"),
        ("shop.example.com.hk", "example.com.hk"),
        ("example.co.jp", "example.co.jp"),
        ("www.xn--fsqu00a.xn--55qx5d.cn", "xn--fsqu00a.xn--55qx5d.cn"),  # www.例子.公司.cn
        ("com.cn", None),
        ("localhost", None),
        ("127.0.0.1", None),
        ("::1", None),
    ],
)
def test_registrable_domain(host, domain):
    assert registrable_domain(host) == domain


def test_unparseable_and_other_schemes_are_kept_as_received():
    for raw in ("not a url", "mailto:a@b.com", "ftp://x.com/a", "https://h:99999/", "https:///x"):
        result = normalise_url(raw)
        assert result.normalized == raw and result.registrable_domain is None


def test_tracking_list_is_configurable_by_argument_and_environment(monkeypatch, url_env):
    # The name list alone: the platform rules (which strip utm_* everywhere) are switched off
    # here and tested in test_url_tracking_rules.py. The environment reaches the domain the way
    # a process's entry point hands it over (settings.configure_domain).
    url_env("GEO_URL_TRACKING_RULES", "off")
    url = "https://e.com/p?ref=x&utm_source=y&k=1"
    assert (
        normalise_url(url, tracking_params=["ref"]).normalized == "https://e.com/p?utm_source=y&k=1"
    )
    url_env("GEO_URL_TRACKING_PARAMS", "ref,utm_*")
    assert normalise_url(url).normalized == "https://e.com/p?k=1"
    url_env("GEO_URL_TRACKING_PARAMS", "off")
    assert normalise_url(url).normalized == url  # no list strips nothing
    url_env("GEO_URL_TRACKING_PARAMS", None)
    assert normalise_url(url).normalized == "https://e.com/p?ref=x&k=1"
    assert "utm_*" in DEFAULT_TRACKING_PARAMS


_url = st.builds(
    lambda host, path, q: f"https://{host}/{path}?{q}",
    st.from_regex(r"[a-z]{1,10}\.(com|com\.cn|co\.uk)", fullmatch=True),
    st.text(alphabet="abc/._~%20中-", max_size=20),
    st.lists(
        st.from_regex(r"(utm_[a-z]{1,5}|gclid|id|q|page)=[a-z0-9%]{0,5}", fullmatch=True),
        max_size=5,
    ).map("&".join),
)


@given(_url)
def test_normalisation_is_idempotent_and_never_drops_content_params(url):
    once = normalise_url(url)
    assert normalise_url(once.normalized).normalized == once.normalized
    kept = [
        p.split("=")[0]
        for p in url.split("?", 1)[1].split("&")
        if p and not p.startswith(("utm_", "gclid"))
    ]
    query = once.normalized.split("?", 1)[1] if "?" in once.normalized else ""
    assert [p.split("=")[0] for p in query.split("&") if p] == kept


def test_normalisation_is_remembered_per_url_and_rules_in_force(url_env):
    """Issue #14: one LRU entry per distinct (URL, rules in force), bounded; the result is the
    uncached function's, and changing the rules never serves a result made under the old ones."""
    from geo_pipeline.domain import urls

    url = "https://Shop.Example.com.cn:443/p/1?ref=x&utm_source=y&spm=a.b&id=3"
    urls._normalise_cached.cache_clear()
    first = normalise_url(url)
    hits = urls._normalise_cached.cache_info().hits
    assert normalise_url(url) is first  # remembered
    assert urls._normalise_cached.cache_info().hits == hits + 1
    assert first == urls._normalise_cached.__wrapped__(url, None, None, urls._settings)
    assert first.normalized == "https://shop.example.com.cn/p/1?ref=x&id=3"
    url_env("GEO_URL_TRACKING_PARAMS", "ref")  # new rules in force: not the remembered result
    assert normalise_url(url).normalized == "https://shop.example.com.cn/p/1?id=3"
    url_env("GEO_URL_TRACKING_PARAMS", None)
    assert normalise_url(url) == first
    info = urls._normalise_cached.cache_info()
    assert info.maxsize == urls.URL_CACHE_SIZE == urls.registrable_domain.cache_info().maxsize
