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
* the query keeps every parameter in its original order and spelling, except tracking parameters
  on the configured list (see ``DEFAULT_TRACKING_PARAMS``); an emptied query loses its ``?``;
* the fragment is removed (it is not sent to the server), except hash-bang and ``#/`` fragments
  that single-page sites route on.

The tracking list can be replaced with the ``tracking_params`` argument or the environment variable
``GEO_URL_TRACKING_PARAMS`` (comma-separated; a trailing ``*`` makes a prefix, e.g. ``utm_*``).
Names match case-insensitively.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

TRACKING_PARAMS_ENV = "GEO_URL_TRACKING_PARAMS"

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

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters that may appear literally in a path or query (RFC 3986 pchar / query, plus '%').
_PATH_SAFE = _UNRESERVED | frozenset("!$&'()*+,;=:@/%")
_QUERY_SAFE = _PATH_SAFE | frozenset("?")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")


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
        return n in self.exact or any(n.startswith(p) for p in self.prefixes)


@cache
def _rules_for(names: tuple[str, ...]) -> TrackingRules:
    return TrackingRules.parse(names)


def tracking_rules(tracking_params: Collection[str] | None = None) -> TrackingRules:
    """The rules in force: the argument, else ``GEO_URL_TRACKING_PARAMS``, else the default list."""
    if tracking_params is None:
        env = os.environ.get(TRACKING_PARAMS_ENV)
        tracking_params = env.split(",") if env is not None else DEFAULT_TRACKING_PARAMS
    return _rules_for(tuple(tracking_params))


def _normalise_escapes(text: str, safe: frozenset[str]) -> str:
    """Decode escapes of unreserved characters, upper-case the others, escape what must be."""

    def fix(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

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


def _filter_query(query: str, rules: TrackingRules) -> str:
    kept: list[str] = []
    for piece in query.split("&"):
        if not piece:
            continue
        name = unquote(piece.split("=", 1)[0].replace("+", " "))
        if rules.is_tracking(name):
            continue
        kept.append(_normalise_escapes(piece, _QUERY_SAFE))
    return "&".join(kept)


@cache
def _psl() -> object:
    # The bundled Public Suffix List snapshot of the ``publicsuffixlist`` wheel; read from the
    # package, never downloaded at run time.
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def registrable_domain(host: str) -> str | None:
    """The registrable domain (public suffix + one label) of an ASCII host, e.g.
    ``news.bbc.co.uk`` → ``bbc.co.uk``, ``foo.github.io`` → ``foo.github.io``. None for IP
    addresses, single-label hosts and bare public suffixes."""
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


def normalise_url(raw: str, tracking_params: Collection[str] | None = None) -> NormalisedUrl:
    """Normalise one citation URL (rules in the module docstring). Never raises: a URL that
    cannot be parsed is returned unchanged (trimmed) with no registrable domain."""
    text = raw.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return NormalisedUrl(raw, text, None)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return NormalisedUrl(raw, text, None)

    host = _encode_host(parts.hostname)
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{host}:{port}"
    if parts.username is not None:
        userinfo = parts.username + (f":{parts.password}" if parts.password is not None else "")
        netloc = f"{userinfo}@{netloc}"

    path = _remove_dot_segments(_normalise_escapes(parts.path or "/", _PATH_SAFE))
    query = _filter_query(parts.query, tracking_rules(tracking_params))
    fragment = parts.fragment if parts.fragment.startswith(("!", "/")) else ""
    normalized = urlunsplit(SplitResult(scheme, netloc, path, query, fragment))
    return NormalisedUrl(raw, normalized, registrable_domain(host.strip("[]")))
