"""Citation URL normalisation (R18): keep the raw URL, store a normalised one, and the registrable
domain that analysis groups by.

Invariant: normalisation only removes differences that cannot change which content a URL names.
The rules, in order:

* surrounding whitespace is trimmed; an unparseable URL is kept as it is (never dropped);
* scheme and host are lower-cased; the host is IDNA-encoded (``bücher.de`` → ``xn--bcher-kva.de``)
  and loses a trailing dot; the default port (80 for http, 443 for https) is removed;
* the path has dot-segments removed (RFC 3986 §5.2.4) and its percent-encoding normalised:
  escapes of unreserved characters are decoded (``%7E`` → ``~``), other escapes get upper-case
  hex, and characters that must be escaped (spaces, non-ASCII) are UTF-8 percent-encoded;
  reserved escapes such as ``%2F`` stay escaped because decoding them changes the path;
* trailing-slash rule: an empty path becomes ``/``; otherwise a trailing slash is neither added nor
  removed, because ``/docs`` and ``/docs/`` may be different resources on a real server;
* the query keeps every parameter in its original order and spelling, except tracking parameters:
  those on the configured name list (see ``DEFAULT_TRACKING_PARAMS``) and those the platform
  rules strip (below); an emptied query loses its ``?``;
* the fragment is removed (it is not sent to the server), except hash-bang and ``#/`` fragments
  that single-page sites route on.

Two layers decide what is a tracking parameter, and a parameter goes when either says so:

* the **name list**, replaced with the ``tracking_params`` argument or, for a process,
  :func:`configure` (from ``GEO_URL_TRACKING_PARAMS``: comma-separated; a trailing ``*`` makes a
  prefix, e.g. ``utm_*``);
* the **platform rules**: ``tracking_rules.json`` beside this module, written for this project in
  the provider format of the public ClearURLs rules (a pinned copy of ClearURLs' own
  ``data.min.json`` can replace it, see below), so a share link such as
  bilibili's ``?spm_id_from=…&vd_source=…`` names the same page as the bare URL. A provider
  whose ``urlPattern`` matches the URL, and none of whose ``exceptions`` does, removes the
  parameters whose whole name matches one of its ``rules``; nothing else of the format is applied
  (no redirections, no path rewriting). Parameters in ``CONTENT_PARAMS`` (``id``, ``p``,
  ``page``, ``q``, ``v``, …) choose content and are never removed by a rule (R18).
  ``GEO_URL_TRACKING_RULES`` (through :func:`configure`) names another file of the same format,
  or ``off`` for none.

Names match case-insensitively in both layers.

A citation that reaches the page through a redirect (Gemini's grounding links) keeps the redirect
as its raw URL; ``normalise_url(raw, target=…)`` records the page or site the engine says it
stands for as the normalised URL and the registrable domain.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from urllib.parse import unquote, urlsplit

_BUNDLED_RULES = "tracking_rules.json"

# Parameters that only attribute a visit (campaign, click and e-mail ids); removing them never
# changes the page served. ``utm_source=openai`` and similar engine-added tags fall under utm_*.
# spm/scm are Alibaba's click-tracking ids; srsltid is Google Merchant's result id.
DEFAULT_TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*",
    "gclid",
    "gclsrc",
    "dclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "msclkid",
    "yclid",
    "mc_cid",
    "mc_eid",
    "spm",
    "scm",
    "_hsenc",
    "_hsmi",
    "igshid",
    "srsltid",
)

# Parameters that choose content on the platforms engines cite (an id, a page or part, a query, a
# video or playlist, bilibili's av/BV/part ids): no platform rule ever removes them, whatever a
# rules file says (R18). The name list above is the operator's and is not limited.
CONTENT_PARAMS: frozenset[str] = frozenset(
    {"id", "p", "page", "q", "query", "wd", "v", "list", "bvid", "aid", "cid"}
)

_DEFAULT_PORTS = {"http": 80, "https": 443}
URL_CACHE_SIZE = 16_384  # distinct citation URLs remembered per process (~5 MB at most)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters that may appear literally in a path or query (RFC 3986 pchar / query, plus '%').
_PATH_SAFE = _UNRESERVED | frozenset("!$&'()*+,;=:@/%")
_QUERY_SAFE = _PATH_SAFE | frozenset("?")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
# The shape nearly every cited URL has: http(s), a plain ASCII host name (no userinfo, port, IP
# literal or IDNA), no tab, CR, LF, space or control character anywhere. For it the parts are
# exactly what ``urlsplit`` gives (path up to the first ``?`` or ``#``, query up to the first
# ``#``, the rest the fragment), read in one match; any other URL goes through ``urlsplit``.
# test_urls' oracle checks both paths agree on generated and real URLs.
_SIMPLE = re.compile(
    r"([Hh][Tt][Tt][Pp][Ss]?)://([A-Za-z0-9][A-Za-z0-9.-]*)(/[^?#\x00-\x20\x7f]*)?"
    r"(?:\?([^#\x00-\x20\x7f]*))?(?:#([^\x00-\x20\x7f]*))?"
)  # no IGNORECASE: with it [A-Za-z] also matches the Kelvin sign and the long s


@dataclass(frozen=True)
class NormalisedUrl:
    """A citation URL as received (``raw``), normalised, and its registrable domain
    (``example.com.cn`` for ``www.example.com.cn``; None for IP addresses and bare suffixes)."""

    raw: str
    normalized: str
    registrable_domain: str | None


@dataclass(frozen=True)
class TrackingRules:
    exact: frozenset[str]
    prefixes: tuple[str, ...]

    @classmethod
    def parse(cls, names: Collection[str]) -> TrackingRules:
        exact: set[str] = set()
        prefixes: list[str] = []
        for name in names:
            n = name.strip().lower()
            if not n:
                continue
            if n.endswith("*"):
                prefixes.append(n[:-1])
            else:
                exact.add(n)
        return cls(frozenset(exact), tuple(prefixes))

    def is_tracking(self, name: str) -> bool:
        n = name.lower()
        return n in self.exact or n.startswith(self.prefixes)


@cache
def _rules_for(names: tuple[str, ...]) -> TrackingRules:
    return TrackingRules.parse(names)


@dataclass(frozen=True)
class Provider:
    """One provider of the ClearURLs format, compiled: where it applies and what it strips."""

    name: str
    url_pattern: re.Pattern[str]
    rules: tuple[re.Pattern[str], ...]
    exceptions: tuple[re.Pattern[str], ...]

    def applies_to(self, url: str) -> bool:
        return bool(self.url_pattern.search(url)) and not any(
            e.search(url) for e in self.exceptions
        )


@dataclass(frozen=True, eq=False)  # identity hash: the compiled rules key a cache
class ProviderRules:
    """The platform rules in force: the providers of one ClearURLs-format document."""

    providers: tuple[Provider, ...] = ()

    @classmethod
    def parse(cls, data: dict[str, object]) -> ProviderRules:
        """Compile a ClearURLs-format document (``{"providers": {name: {urlPattern, rules,
        exceptions, …}}}``); a pattern that does not compile raises ``re.error`` naming it."""
        providers: list[Provider] = []
        raw_providers = data.get("providers") or {}
        if not isinstance(raw_providers, dict):
            raise ValueError("tracking rules: 'providers' must be an object of providers")
        for name, spec in raw_providers.items():
            # ClearURLs anchors every rule to the whole parameter name and matches ignoring case
            # (the name is matched with fullmatch).
            providers.append(
                Provider(
                    name=str(name),
                    url_pattern=_compile(spec["urlPattern"], name),
                    rules=tuple(_compile(f"(?:{r})", name) for r in spec.get("rules") or ()),
                    exceptions=tuple(_compile(e, name) for e in spec.get("exceptions") or ()),
                )
            )
        return cls(tuple(providers))

    def stripper(self, url: str) -> tuple[re.Pattern[str], ...]:
        """The parameter-name rules of every provider that applies to ``url``."""
        return _stripper(self, url)


class _RuleSet(tuple):  # type: ignore[type-arg]
    """The rules of one combination of applying providers: a tuple made once per combination
    (``_rules_of``) and hashed by identity, so ``_stripped``'s cache key does not hash forty
    patterns for every query parameter."""

    __slots__ = ()

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other


@cache
def _rules_of(rules: ProviderRules, names: tuple[str, ...]) -> _RuleSet:
    by_name = {p.name: p for p in rules.providers}  # names are the document's keys: unique
    return _RuleSet(r for n in names for r in by_name[n].rules)


@lru_cache(maxsize=8192)  # engines cite the same pages again and again
def _stripper(rules: ProviderRules, url: str) -> tuple[re.Pattern[str], ...]:
    universal, any_specific, specific = _prefilter(rules)
    if any_specific is None or any_specific.search(url):
        candidates = universal + specific
    else:  # no platform's pattern matches: only the providers that apply everywhere can
        candidates = universal
    return _rules_of(rules, tuple(p.name for p in candidates if p.applies_to(url)))


@cache
def _prefilter(
    rules: ProviderRules,
) -> tuple[tuple[Provider, ...], re.Pattern[str] | None, tuple[Provider, ...]]:
    """(providers whose pattern matches any URL, one pattern matching where any other provider's
    does, those other providers). Most cited URLs are on no listed platform, and one search of
    the alternation answers that for all of them at once; the providers that do match are then
    checked one by one as before. Without a safe alternation (a back-reference, or a pattern that
    does not compile inside one) every provider is checked."""
    universal = tuple(p for p in rules.providers if p.url_pattern.pattern in ("", ".*", "^.*"))
    specific = tuple(p for p in rules.providers if p not in universal)
    sources = [p.url_pattern.pattern for p in specific]
    if any(re.search(r"\\[1-9]|\(\?P=|\(\?[a-zA-Z]+\)", src) for src in sources):
        return rules.providers, None, ()
    try:
        combined = re.compile("|".join(f"(?:{src})" for src in sources), re.IGNORECASE)
    except re.error:
        return rules.providers, None, ()
    return universal, combined, specific


def _compile(pattern: str, provider: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise re.error(f"tracking rules, provider {provider!r}: {pattern!r}: {exc}") from exc


@cache
def _provider_rules_from(source: str) -> ProviderRules:
    if source.strip().lower() in ("", "off", "none"):
        return ProviderRules()
    if source == _BUNDLED_RULES:
        # Package data, read from the installed package, never fetched at run time.
        text = resources.files(__package__ or "geo_pipeline.domain").joinpath(source).read_text()
    else:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    return ProviderRules.parse(json.loads(text))


@dataclass(frozen=True, eq=False)  # identity hash: keys every normalise_url call's cache lookup
class UrlSettings:
    """What a deployment chose (``GEO_URL_TRACKING_PARAMS``, ``GEO_URL_TRACKING_RULES``, read by
    geo_pipeline/settings.py and handed here by each process's entry point through
    :func:`configure`): the tracking-parameter names, and the platform rules' source."""

    tracking_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS
    rules_source: str = _BUNDLED_RULES


_settings = UrlSettings()


def configure(tracking_params: str | None = None, rules_source: str | None = None) -> None:
    """Set the rules in force for this process: ``tracking_params`` comma-separated (None: the
    default list; ``off``: none), ``rules_source`` a file of the bundled format, ``off`` for none,
    None for the bundled rules."""
    global _settings
    if tracking_params is None:
        params = DEFAULT_TRACKING_PARAMS
    elif tracking_params.strip().lower() in ("off", "none"):
        params = ()
    else:
        params = tuple(tracking_params.split(","))
    _settings = UrlSettings(params, rules_source or _BUNDLED_RULES)


def load_provider_rules() -> ProviderRules:
    """The platform rules in force (:func:`configure`): a file of the bundled format, ``off`` for
    none, else the bundled rules. Compiled once per source."""
    return _provider_rules_from(_settings.rules_source)


def warm() -> None:
    """Load what normalising a URL needs (the Public Suffix List, the rules in force) now: a
    worker calls it at start, so its first completion batch does not pay for it."""
    _psl()
    _prefilter(load_provider_rules())
    tracking_rules()


def tracking_rules(tracking_params: Collection[str] | None = None) -> TrackingRules:
    """The rules in force: the argument, else the configured list (:func:`configure`)."""
    if tracking_params is None:
        tracking_params = _settings.tracking_params
    return _rules_for(tuple(tracking_params))


def _normalise_escapes(text: str, safe: frozenset[str]) -> str:
    """Decode escapes of unreserved characters, upper-case the others, escape what must be."""

    def fix(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    if "%" not in text and safe.issuperset(text):
        return text  # nothing to decode, upper-case or escape (most cited paths and queries)
    text = _PCT.sub(fix, text)
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == "%" and not _PCT.match(text, i):
            out.append("%25")  # a lone '%' is not an escape: encode it
        elif ch in safe:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, for absolute paths."""
    if "." not in path:
        return path
    segments = path.split("/")
    out: list[str] = []
    for seg in segments[1:]:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    result = "/" + "/".join(out)
    if segments[-1] in (".", "..") and not result.endswith("/"):
        result += "/"
    return result


def _encode_host(host: str) -> str:
    host = host.lower().rstrip(".")
    if not host or host.isascii():
        return host
    try:
        return ".".join(
            label.encode("idna").decode("ascii") if not label.isascii() else label
            for label in host.split(".")
        )
    except UnicodeError:
        return host


def _filter_query(
    query: str,
    rules: TrackingRules,
    platform: tuple[re.Pattern[str], ...] | Callable[[], tuple[re.Pattern[str], ...]] = (),
) -> str:
    """The query without tracking parameters and the ones a platform rule strips. ``platform``
    may be a function giving those rules: called only when a parameter is neither a tracking
    parameter nor a content parameter (most cited queries hold ``utm_*`` alone)."""
    return _filter_query_asking(query, rules, platform)[0]


def _filter_query_asking(
    query: str,
    rules: TrackingRules,
    platform: tuple[re.Pattern[str], ...] | Callable[[], tuple[re.Pattern[str], ...]] = (),
) -> tuple[str, bool]:
    """``_filter_query`` and whether it came to the platform rules (a parameter neither a
    tracking nor a content one): when it did not, the result depends on the query and the
    name list alone, and the query may be remembered (``_TRACKING_ONLY``) -- told by this one
    pass rather than a second pass over the parameters (issue 33)."""
    kept: list[str] = []
    asked = False
    for piece in query.split("&"):
        if not piece:
            continue
        name = piece.split("=", 1)[0].replace("+", " ")
        if "%" in name:
            name = unquote(name)  # (which returns a name without '%' as it is)
        low = name.lower()
        if low in rules.exact or low.startswith(rules.prefixes):  # rules.is_tracking(name)
            continue
        if low in CONTENT_PARAMS:
            kept.append(_normalise_escapes(piece, _QUERY_SAFE))
            continue
        asked = True
        if callable(platform):
            platform = platform()
        if platform and _stripped(platform, name):
            continue
        kept.append(_normalise_escapes(piece, _QUERY_SAFE))
    return "&".join(kept), asked


# Filtered queries that no platform rule could change (each parameter a tracking or a content
# one): the same few (``utm_source=chatgpt.com``, …) end most cited URLs, whatever the page.
# Keyed by the query and the identity of the name list's rules (a TrackingRules' dataclass hash
# is a Python call hashing its fields, on every lookup); the rules are kept with the result and
# checked to be the very same object, so a reused id never gives another list's result.
_TRACKING_ONLY: dict[tuple[str, int], tuple[TrackingRules, str]] = {}
_TRACKING_ONLY_SIZE = 1024


def _remember_query(query: str, rules: TrackingRules, filtered: str) -> None:
    if len(_TRACKING_ONLY) >= _TRACKING_ONLY_SIZE:
        _TRACKING_ONLY.clear()  # a bounded memory; the common few come back at once
    _TRACKING_ONLY[query, id(rules)] = (rules, filtered)


def _remembered_query(query: str, rules: TrackingRules) -> str | None:
    known = _TRACKING_ONLY.get((query, id(rules)))
    return known[1] if known is not None and known[0] is rules else None


# The name list's rules for the settings in force, remembered with the settings object they
# came from (configure() replaces it): ``tracking_rules()`` without its tuple and cache key.
_IN_FORCE_RULES: tuple[object, TrackingRules | None] = (None, None)


def _rules_in_force() -> TrackingRules:
    global _IN_FORCE_RULES
    made_for, rules = _IN_FORCE_RULES
    if made_for is not _settings or rules is None:
        rules = tracking_rules()
        _IN_FORCE_RULES = (_settings, rules)
    return rules


# Host names as met in a URL of the common shape (``_SIMPLE``) -> (the host lower-cased without
# its trailing dot, its registrable domain): the path and query are each URL's own, the host is
# not (a few hundred sites are most citations). At most _HOSTS_SIZE names of at most 253
# characters each (a DNS name's limit; longer ones are not remembered): a few MB at worst.
_HOSTS: dict[str, tuple[str, str | None]] = {}
_HOSTS_SIZE = 4096


def _simple_host(hostname: str) -> tuple[str, str | None]:
    known = _HOSTS.get(hostname)
    if known is not None:
        return known
    host = hostname.lower().rstrip(".")  # _encode_host of an ASCII name
    made = (host, registrable_domain(host))
    if len(hostname) <= 253:
        if len(_HOSTS) >= _HOSTS_SIZE:
            _HOSTS.clear()  # a bounded memory; the common sites come back at once
        _HOSTS[hostname] = made
    return made


@lru_cache(maxsize=URL_CACHE_SIZE)
def _stripped(platform: tuple[re.Pattern[str], ...], name: str) -> bool:
    """Whether a platform rule removes the parameter ``name`` (remembered per rule set and name:
    a handful of names recur in every query)."""
    return any(r.fullmatch(name) for r in platform)


@cache
def _psl() -> object:
    # The bundled Public Suffix List snapshot of the ``publicsuffixlist`` wheel; read from the
    # package, never downloaded at run time.
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


@lru_cache(maxsize=URL_CACHE_SIZE)
def registrable_domain(host: str) -> str | None:
    """The registrable domain (public suffix + one label) of an ASCII host, e.g.
    ``news.bbc.co.uk`` → ``bbc.co.uk``, ``foo.github.io`` → ``foo.github.io``. None for IP
    addresses, single-label hosts and bare public suffixes. Pure; remembered per host."""
    host = host.strip(".").lower()
    if not host or "." not in host:
        return None
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    result = _psl().privatesuffix(host)  # type: ignore[attr-defined]
    return str(result) if result else None


def site_url(name: str) -> str | None:
    """``https://<host>/`` for a bare host name such as ``example.com`` (how Gemini's grounding
    chunks name a source); None for anything that is not a host with a registrable domain (a page
    title, a bare public suffix, a single label)."""
    text = name.strip().rstrip(".")
    if not text or any(ch.isspace() or ch in "/:?#@" for ch in text):
        return None
    host = _encode_host(text)
    if not re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+", host) or registrable_domain(host) is None:
        return None
    return f"https://{host}/"


def normalise_url(
    raw: str,
    tracking_params: Collection[str] | None = None,
    *,
    target: str | None = None,
) -> NormalisedUrl:
    """Normalise one citation URL (rules in the module docstring). Never raises: a URL that
    cannot be parsed is returned unchanged (trimmed) with no registrable domain.

    ``target``: for a redirect, the page (URL) or site (host name) the engine says it leads to.
    When usable, the normalised URL and the registrable domain are the target's, ``raw`` stays
    the redirect; when not (None, or neither a URL nor a host name) the redirect is normalised.

    Pure: the result depends only on the arguments and the rules in force (:func:`configure`),
    so it is remembered per distinct call in a bounded LRU (``URL_CACHE_SIZE``; engines cite
    the same pages again and again). The rules in force are part of the cache key."""
    names = None if tracking_params is None else tuple(tracking_params)
    return _normalise_cached(raw, names, target, _settings)


@lru_cache(maxsize=URL_CACHE_SIZE)
def _normalise_cached(
    raw: str, tracking_params: tuple[str, ...] | None, target: str | None, _in_force: UrlSettings
) -> NormalisedUrl:
    # ``_in_force`` only keys the cache: configure() replaces the settings object, so a call
    # after it never sees a result made under other rules.
    if target:
        aim = target.strip() if "://" in target else site_url(target)
        if aim:
            resolved = _normalise(aim, tracking_params)
            if resolved.registrable_domain is not None:
                return NormalisedUrl(raw, resolved.normalized, resolved.registrable_domain)
    return _normalise(raw, tracking_params)


# normalised_parts' memory: raw URL -> (normalised URL, registrable domain) under the settings
# object in _PARTS_FOR (configure() replaces it, and the memory is emptied). A plain dict keyed by
# the raw string (its hash is the string's own, computed once): no LRU key tuple, no link and
# no NormalisedUrl made per call. Bounded: emptied when full.
_PARTS: dict[str, tuple[str, str | None]] = {}
_PARTS_FOR: list[UrlSettings | None] = [None]


def normalised_parts(raw: str, target: str | None = None) -> tuple[str, str | None]:
    """``normalise_url(raw, target=target)``'s (normalised URL, registrable domain) under the
    rules in force: the same values, for a fraction of the time on the evidence path (issue 33:
    every answer's citations; test_url_fast_path checks both agree). Remembered per raw URL
    (bounded, ``URL_CACHE_SIZE``)."""
    if target:
        made = normalise_url(raw, target=target)
        return made.normalized, made.registrable_domain
    if _PARTS_FOR[0] is not _settings:
        _PARTS.clear()
        _PARTS_FOR[0] = _settings
    known = _PARTS.get(raw)
    if known is not None:
        return known
    parts = _parts_in_force(raw)
    if len(_PARTS) >= URL_CACHE_SIZE:
        _PARTS.clear()  # a bounded memory; the pages cited again come back at once
    _PARTS[raw] = parts
    return parts


def _parts_in_force(raw: str) -> tuple[str, str | None]:
    """``_normalise(raw, None)``'s two values, the common shape (``_SIMPLE``) in one function:
    the URL joined directly (``_unsplit`` of a non-empty host and a path starting with ``/``),
    dot segments looked for only after a ``/.`` (a dot segment is a whole segment: without one
    ``_remove_dot_segments`` gives the path back), the remembered queries read in place."""
    text = raw.strip()
    simple = _SIMPLE.fullmatch(text)
    if simple is None:
        made = _normalise(raw, None)
        return made.normalized, made.registrable_domain
    scheme, hostname, path, query, fragment = simple.groups()
    known = _HOSTS.get(hostname)
    host, domain = known if known is not None else _simple_host(hostname)
    if path is None:
        path = "/"
    else:
        if "%" in path or not _PATH_SAFE.issuperset(path):
            path = _normalise_escapes(path, _PATH_SAFE)
        if "/." in path:
            path = _remove_dot_segments(path)
    scheme = scheme.lower()
    url = scheme + "://" + host + path
    if query:
        made_for, rules = _IN_FORCE_RULES
        if made_for is not _settings or rules is None:
            rules = _rules_in_force()
        remembered = _TRACKING_ONLY.get((query, id(rules)))
        if remembered is not None and remembered[0] is rules:
            kept = remembered[1]
        else:
            kept = _filtered_query(query, rules, scheme, host, path)
        if kept:
            url += "?" + kept
    if fragment and fragment[0] in "!/":  # (startswith "!" or "/": one character each)
        url += "#" + fragment
    return url, domain


def _filtered_query(query: str, rules: TrackingRules, scheme: str, netloc: str, path: str) -> str:
    """The query filtered as ``_normalise`` does (and remembered when no platform rule could
    change it); the platform rules see the URL as a browser shows it."""

    def platform() -> tuple[re.Pattern[str], ...]:  # asked for by _filter_query
        seen = _unsplit(scheme, netloc, path, query, "")
        return load_provider_rules().stripper(seen)

    kept, asked = _filter_query_asking(query, rules, platform)
    if not asked:  # every parameter a tracking or a content one
        _remember_query(query, rules, kept)
    return kept


def _unsplit(scheme: str, netloc: str, path: str, query: str, fragment: str) -> str:
    """``urlunsplit`` for an http(s) URL (its scheme is in ``uses_netloc``), without the
    argument coercion: the same string for every input."""
    if netloc or path[:2] != "//":
        if path and path[:1] != "/":
            path = "/" + path
        path = "//" + netloc + path
    url = scheme + ":" + path
    if query:
        url = url + "?" + query
    if fragment:
        url = url + "#" + fragment
    return url


def _normalise(raw: str, tracking_params: Collection[str] | None) -> NormalisedUrl:
    text = raw.strip()
    simple = _SIMPLE.fullmatch(text)
    if simple is not None:  # the common shape: no urlsplit, no netloc re-parsing
        scheme_raw, hostname, raw_path, raw_query, raw_fragment = simple.groups()
        scheme = scheme_raw.lower()
        host, domain = _simple_host(hostname)  # remembered per host name
        netloc = host
        raw_path = raw_path or ""
        raw_query = raw_query or ""
        raw_fragment = raw_fragment or ""
    else:
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError:
            return NormalisedUrl(raw, text, None)
        scheme = parts.scheme.lower()
        hostname = parts.hostname  # parsed out of the netloc on every access: read once
        if scheme not in _DEFAULT_PORTS or not hostname:
            return NormalisedUrl(raw, text, None)

        host = _encode_host(hostname)
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        netloc = host
        if port is not None and port != _DEFAULT_PORTS[scheme]:
            netloc = f"{host}:{port}"
        if "@" in parts.netloc and parts.username is not None:
            userinfo = parts.username + (f":{parts.password}" if parts.password is not None else "")
            netloc = f"{userinfo}@{netloc}"
        raw_path, raw_query, raw_fragment = parts.path, parts.query, parts.fragment
        domain = registrable_domain(host.strip("[]"))

    path = raw_path or "/"
    if "%" in path or not _PATH_SAFE.issuperset(path):  # (_normalise_escapes' own test)
        path = _normalise_escapes(path, _PATH_SAFE)
    if "." in path:  # (_remove_dot_segments' own test)
        path = _remove_dot_segments(path)

    if not raw_query:
        query = ""
    else:
        rules = _rules_in_force() if tracking_params is None else tracking_rules(tracking_params)
        known = _remembered_query(raw_query, rules)
        # The platform rules match the URL as a browser would show it: scheme and host
        # lower-cased, the query as received (ClearURLs patterns and exceptions look at both).
        query = (
            known if known is not None else _filtered_query(raw_query, rules, scheme, netloc, path)
        )
    fragment = raw_fragment if raw_fragment.startswith(("!", "/")) else ""
    normalized = _unsplit(scheme, netloc, path, query, fragment)
    # NormalisedUrl(raw, normalized, domain) without the frozen dataclass's __init__ (a field
    # at a time through object.__setattr__): the same object, for a third of the time.
    made = _new(NormalisedUrl)
    made.__dict__.update(raw=raw, normalized=normalized, registrable_domain=domain)
    return made


_new = object.__new__
