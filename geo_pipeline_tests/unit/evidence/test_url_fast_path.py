"""normalise_url's fast path (issue 33: the worker's main thread spends its evidence time here)
gives exactly what the urlsplit path gives: the urlsplit-only implementation it replaced is kept
below as the oracle, and both are run on generated URLs of every shape the rules care about
(IDNA, escapes, userinfo, ports, IPv6, fragments, tracking and platform parameters, unicode,
controls) and on the simulator's citations."""

from __future__ import annotations

import random
import re
from collections.abc import Collection
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geo_pipeline.domain import urls
from geo_pipeline.domain.urls import (
    _DEFAULT_PORTS,
    _PATH_SAFE,
    _QUERY_SAFE,
    CONTENT_PARAMS,
    NormalisedUrl,
    _encode_host,
    _normalise_escapes,
    _remove_dot_segments,
    load_provider_rules,
    registrable_domain,
    tracking_rules,
)


def _filter_query_reference(query: str, rules, platform) -> str:  # type: ignore[no-untyped-def]
    """urls._filter_query before issue 33's inlining (the name lower-cased once, no unquote call
    for a name without '%', a content parameter kept without asking the platform rules)."""
    kept: list[str] = []
    for piece in query.split("&"):
        if not piece:
            continue
        name = unquote(piece.split("=", 1)[0].replace("+", " "))
        if rules.is_tracking(name):
            continue
        if callable(platform) and name.lower() not in CONTENT_PARAMS:
            platform = platform()
        if platform and name.lower() not in CONTENT_PARAMS and urls._stripped(platform, name):
            continue
        kept.append(_normalise_escapes(piece, _QUERY_SAFE))
    return "&".join(kept)


def reference(raw: str, tracking_params: Collection[str] | None = None) -> NormalisedUrl:
    """urls._normalise as it was before the fast path: every URL through urlsplit/urlunsplit."""
    text = raw.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return NormalisedUrl(raw, text, None)
    scheme = parts.scheme.lower()
    hostname = parts.hostname
    if scheme not in _DEFAULT_PORTS or not hostname:
        return NormalisedUrl(raw, text, None)
    host = _encode_host(hostname)
    if ":" in host:
        host = f"[{host}]"
    netloc = host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{host}:{port}"
    if "@" in parts.netloc and parts.username is not None:
        userinfo = parts.username + (f":{parts.password}" if parts.password is not None else "")
        netloc = f"{userinfo}@{netloc}"
    path = _remove_dot_segments(_normalise_escapes(parts.path or "/", _PATH_SAFE))

    def platform() -> tuple[re.Pattern[str], ...]:
        seen = urlunsplit(SplitResult(scheme, netloc, path, parts.query, ""))
        return load_provider_rules().stripper(seen)

    query = _filter_query_reference(parts.query, tracking_rules(tracking_params), platform)
    fragment = parts.fragment if parts.fragment.startswith(("!", "/")) else ""
    normalized = urlunsplit(SplitResult(scheme, netloc, path, query, fragment))
    return NormalisedUrl(raw, normalized, registrable_domain(host.strip("[]")))


_SCHEMES = ["https", "http", "HTTPS", "Http", "ftp", "", "https:", "https:/", "https:///", "//"]
_HOSTS = [
    "example.com", "WWW.Example.COM", "shop.example.com.cn", "example.com.", "a..b", ".", "..",
    "bücher.de", "xn--bcher-kva.de", "Ｅｘａｍｐｌｅ.com", "\u212aelvin.com", "\u017fite.com",
    "127.0.0.1", "[::1]", "[2001:db8::1]", "[v1.x]", "[::1", "user@example.com",
    "user:pw@example.com", "@example.com", "u@p@example.com", "example.com:443", "example.com:80",
    "example.com:8080", "example.com:", "example.com:99999", "example.com:-1", "example.com:0",
    "example.com:١٢", "-x.com", "0.com", "b.bilibili.com", "www.bilibili.com", "amazon.de",
    "www.youtube.com", "e.com", "localhost", "a_b.com", "x.github.io", "com", "", "exa mple.com",
]  # fmt: skip
_PATHS = [
    "", "/", "/a", "/a/./b/../c", "/..", "/.", "/a/..", "//x", "///", "/docs/", "/%7euser",
    "/%2Fx%2f", "/a b", "/中文", "/100%", "/%zz", "/%e4%b8%ad", "/a;b=c", "/~!$&'()*+,;=:@",
    "/a\tb", "/a\nb", "/a\x01b", "/a\x7fb", "/\u3000", "/a\\b", "/a|b", "/a%20b", "/?", "/#",
    "/video/BV1xx411c7mD", "/p/1",
]  # fmt: skip
_QUERIES = [
    "", "?", "?utm_source=openai", "?b=2&utm_medium=x&a=1", "?q=a+b&ref=home", "?id=1&id=2",
    "?q=%e4%b8%ad", "?&&a=1&", "?UTM_Source=Foo&Page=2", "?spm_id_from=333&vd_source=x&p=2",
    "?gclid=1&fbclid=2", "?a=1?b=2", "?a=中", "?a=%", "?utm%5Fsource=x", "?a+b=c", "?x=1 2",
    "?a=\t1", "?tag=abc-21&ref_=x&keywords=y", "?si=abc&v=xyz", "?=&=x", "?ID=1&spm_id_from=2",
    "?P=2&vd_source=x&Utm_X=1", "?%69d=1&vd%5Fsource=2", "?Q+=1&wd=%E4",
]  # fmt: skip
_FRAGMENTS = ["", "#", "#section-2", "#/app/route", "#!/page", "#a#b", "#a?b", "#中", "#a b"]


def _corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        scheme = rng.choice(_SCHEMES)
        sep = "" if scheme.endswith(("/", ":")) or scheme in ("", "//") else "://"
        url = scheme + sep + rng.choice(_HOSTS) + rng.choice(_PATHS)
        url += rng.choice(_QUERIES) + rng.choice(_FRAGMENTS)
        if rng.random() < 0.1:
            url = rng.choice(["  ", "\t", "\n", "\x00", "\u3000"]) + url + rng.choice([" ", ""])
        out.append(url)
    return out


def _simulator_urls() -> list[str]:
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.simulator.answers import generate_answer
    from geo_pipeline.simulator.profiles import profile_from_registry_entry

    registry = load_registry()
    found = []
    for platform in ("deepseek", "doubao", "qwen", "kimi"):
        profile = profile_from_registry_entry(registry.entry(platform))
        for i in range(100):
            for question in ("best CRM for small business", "推荐几款国产新能源汽车"):
                ans = generate_answer(0, f"s{i}:1", question, profile)
                found += [c.url for c in ans.citations + ans.search_results]
    return found


def _same(url: str) -> None:
    assert urls._normalise(url, None) == reference(url), url
    assert urls._normalise(url, ("ref", "utm_*")) == reference(url, ("ref", "utm_*")), url


def test_fast_path_agrees_with_urlsplit_on_a_generated_corpus():
    corpus = _corpus(20_000, seed=33)
    simple = sum(1 for u in corpus if urls._SIMPLE.fullmatch(u.strip()))
    assert simple > 1_000  # both paths are exercised
    for url in corpus:
        _same(url)


def test_fast_path_agrees_with_urlsplit_on_simulator_citations():
    found = _simulator_urls()
    assert found and all(urls._SIMPLE.fullmatch(u) for u in found)  # the worker's common case
    for url in found:
        _same(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://\u212aelvin.com/a",  # the Kelvin sign is not [A-Za-z]: urlsplit path
        "https://e.com/a\tb?x=1",  # urlsplit drops tab, CR and LF
        "https://example.com:443/a", "https://u:p@example.com/a", "https://[::1]:8443/a",
        "https://.//x", "https://example.com./a/../../b?spm_id_from=1#!/x",
    ],
)  # fmt: skip
def test_fast_path_agrees_with_urlsplit_on_edge_cases(url):
    _same(url)


@settings(max_examples=500)
@given(
    st.text(
        alphabet=st.sampled_from(list("hHtTpPsS:/?#&=%.@[]-_~+ 中aZ09\t\x00\u212a")), max_size=40
    )
)
def test_fast_path_agrees_with_urlsplit_on_any_text(text):
    _same(text)
    _same("https://" + text)


def test_remembered_queries_agree_with_urlsplit_when_met_again():
    """A query of tracking and content parameters only is remembered (issue 33): met again on
    another host, path or platform, or under another name list, it gives what the reference
    gives."""
    urls._TRACKING_ONLY.clear()
    corpus = _corpus(5_000, seed=7)
    for url in corpus + corpus[::-1]:
        _same(url)
    assert urls._TRACKING_ONLY  # some were remembered
    for query in ("?utm_source=x&p=2", "?spm=1&id=3", "?p=2"):
        for host in ("www.bilibili.com", "b.bilibili.com", "example.com", "amazon.de"):
            _same(f"https://{host}/video/BV1{query}")
            _same(f"https://{host}/video/BV1{query}")


def test_the_remembered_queries_stay_bounded(monkeypatch):
    monkeypatch.setattr(urls, "_TRACKING_ONLY_SIZE", 10)
    urls._TRACKING_ONLY.clear()
    for i in range(50):
        _same(f"https://example.com/a?utm_source=s{i}&p={i}")
    assert 0 < len(urls._TRACKING_ONLY) <= 10


def _tracking_or_content_reference(query: str, rules) -> bool:  # type: ignore[no-untyped-def]
    """The second pass over the query that _filter_query_asking's flag replaced (issue 33):
    every parameter's name a tracking or a content one."""
    for piece in query.split("&"):
        if not piece:
            continue
        low = unquote(piece.split("=", 1)[0].replace("+", " ")).lower()
        if not (low in rules.exact or low.startswith(rules.prefixes) or low in CONTENT_PARAMS):
            return False
    return True


def test_the_platform_rules_are_asked_exactly_when_a_parameter_is_neither_kind():
    """The flag that decides whether a query is remembered says what the replaced second pass
    said, and the filtered query is _filter_query's, on every generated query."""
    platform = load_provider_rules().stripper("https://www.bilibili.com/video/BV1")
    queries = [q.lstrip("?") for q in _QUERIES] + [
        u.split("?", 1)[1].split("#", 1)[0] for u in _corpus(3_000, seed=5) if "?" in u
    ]
    for names in (None, ("ref", "utm_*"), ()):
        rules = tracking_rules(names)
        for query in queries:
            filtered, asked = urls._filter_query_asking(query, rules, platform)
            assert filtered == _filter_query_reference(query, rules, platform), query
            assert asked is not _tracking_or_content_reference(query, rules), query


def test_remembered_hosts_agree_with_urlsplit_and_stay_bounded(monkeypatch):
    """A host name of the common shape is remembered with its registrable domain (issue 33):
    met again in another case, with a trailing dot or another path it gives what the reference
    gives, a name longer than DNS allows is not remembered, and the memory stays bounded."""
    monkeypatch.setattr(urls, "_HOSTS_SIZE", 10)
    urls._HOSTS.clear()
    hosts = ["Example.COM", "example.com.", "news.bbc.co.uk", "x.github.io", "localhost",
             "127.0.0.1", "com", "a..b", "0.com", "www.zhihu.com"]  # fmt: skip
    for _ in range(2):
        for i, host in enumerate(hosts * 3):
            _same(f"https://{host}/p/{i}?utm_source=x")
            _same(f"http://{host}")
    assert 0 < len(urls._HOSTS) <= 10
    long_host = "a" * 250 + ".example.com"
    _same(f"https://{long_host}/x")
    assert long_host not in urls._HOSTS
    for i in range(50):
        _same(f"https://h{i}.example.org/")
    assert 0 < len(urls._HOSTS) <= 10


def test_remembered_queries_follow_the_rules_in_force(monkeypatch):
    """The remembered queries and the name list in force are keyed by the rules object: after
    configure() a query remembered before is filtered by the new list."""
    monkeypatch.setattr(urls, "_settings", urls.UrlSettings())
    url = "https://example.com/a?ref=x&p=2"
    urls.configure("ref")
    first = urls._normalise(url, None)
    assert first == reference(url, ("ref",))
    assert first.normalized == "https://example.com/a?p=2"  # ref: a tracking name, remembered
    urls.configure("utm_*")
    assert urls._normalise(url, None) == reference(url, ("utm_*",))
    assert urls._normalise(url, None).normalized == "https://example.com/a?ref=x&p=2"
    urls.configure("ref")
    assert urls._normalise(url, None) == first


def _same_parts(url: str, target: str | None = None) -> None:
    """normalised_parts (the citations' way in, issue 33) gives normalise_url's two values and,
    for a URL without a target, the urlsplit reference's -- met for the first time and again."""
    made = urls.normalise_url(url, target=target)
    want = (made.normalized, made.registrable_domain)
    if not target:
        ref = reference(url)
        assert want == (ref.normalized, ref.registrable_domain), url
    assert urls.normalised_parts(url, target) == want, (url, target)
    assert urls.normalised_parts(url, target) == want, (url, target)  # remembered


def test_normalised_parts_agree_with_normalise_url_on_a_generated_corpus():
    urls._PARTS.clear()
    corpus = _corpus(20_000, seed=34)
    for url in corpus:
        _same_parts(url)
    for url in _simulator_urls():
        _same_parts(url)


@settings(max_examples=500)
@given(
    st.text(
        alphabet=st.sampled_from(list("hHtTpPsS:/?#&=%.@[]-_~+! 中aZ09\t\x00\u212a")), max_size=40
    ),
    st.sampled_from([None, "", "example.com", "https://a.org/x?utm_source=1", "标题", "com"]),
)
def test_normalised_parts_agree_with_normalise_url_on_any_text(text, target):
    _same_parts(text, target)
    _same_parts("https://" + text, target)
    _same_parts("https://e.com/" + text, target)


@pytest.mark.parametrize(
    "url",
    [
        "https://e.com/a/./b", "https://e.com/a/../b/", "https://e.com/.a/..b/c.", "https://e.com/.",
        "https://e.com/a/%2E%2E/b", "https://e.com/a/%2e/b", "https://e.com/a.b/c..d",
        "https://e.com#!/x", "https://e.com?#/x", "https://e.com/?a=1#!", "https://e.com/#x/y",
        "https://e.com/a?utm_source=x#/r", "HTTPS://E.COM./A?Q=1", "https://e.com?",
    ],
)  # fmt: skip
def test_normalised_parts_agree_on_dot_segments_and_fragments(url):
    urls._PARTS.clear()
    _same_parts(url)


def test_normalised_parts_follow_the_rules_in_force_and_stay_bounded(monkeypatch):
    monkeypatch.setattr(urls, "_settings", urls.UrlSettings())
    url = "https://example.com/a?ref=x&p=2"
    urls.configure("ref")
    assert urls.normalised_parts(url) == ("https://example.com/a?p=2", "example.com")
    urls.configure("utm_*")
    assert urls.normalised_parts(url) == ("https://example.com/a?ref=x&p=2", "example.com")
    monkeypatch.setattr(urls, "URL_CACHE_SIZE", 10)
    for i in range(50):
        _same_parts(f"https://h{i}.example.org/?utm_source=1")
    assert 0 < len(urls._PARTS) <= 10
