"""The platform catalogue: which platforms exist, what each can do and charge, and how it is
reached (protocol, base URL, the name of its key's environment variable).

Pure: ``parse_catalogue`` turns an already-read mapping into values. Reading the file and
expanding ``${VAR:-default}`` from the environment happen at the edge
(``geo_pipeline.connectors.registry.load_registry``), so planning, billing and the simulator
can use the same capabilities and prices without touching the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, TypeVar, overload

from geo_pipeline.domain.platforms import (
    ACCESS_KINDS,
    CANCEL_SCOPES,
    Capabilities,
    PriceList,
    RateLimits,
)


class RegistryError(ValueError):
    pass


class PlatformDisabled(RegistryError):
    """A registered platform that is not offered: its key variable is not set."""

    def __init__(self, platform: str, variable: str):
        self.platform = platform
        self.variable = variable
        super().__init__(disabled_message(platform, variable))


# Connector options that are yes/no (the others are numbers, read where they are used).
FLAG_OPTIONS = ("poll_includes_result",)


def _flag(spec: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    """A yes/no field: a YAML boolean or absent. Anything else is refused, because Python's
    truth of a string would read a quoted ``"false"`` as true (a ``lookup_by_key`` taken for
    granted decides when a request is sent again, R12)."""
    value = spec.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RegistryError(
            f"platforms.{where}.{key}: {value!r} is not a boolean; allowed: true or false"
            " (unquoted)"
        )
    return value


def _choice(
    spec: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...], where: str
) -> Any:
    """A field with a fixed set of values; anything else is refused with its path."""
    value = spec.get(key, default)
    if value not in allowed:
        raise RegistryError(
            f"platforms.{where}.{key}: {value!r} is not allowed; allowed: {', '.join(allowed)}"
        )
    return value


def _seconds(spec: Mapping[str, Any], key: str, where: str) -> float | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise RegistryError(
            f"platforms.{where}.{key}: {value!r} is not a positive number of seconds"
        )
    return float(value)


def _options(options: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    if not isinstance(options, Mapping):
        raise RegistryError(f"platforms.{where}.options: {options!r} is not a mapping")
    for key in FLAG_OPTIONS:
        _flag(options, key, False, f"{where}.options")
    return options


# The browser lane's switch (registry.yaml): its channels are disabled until this names the
# directory of the accounts' browser profiles -- not an API key.
BROWSER_PROFILES_VARIABLE = "GEO_BROWSER_PROFILES"


def disabled_message(platform: str, variable: str) -> str:
    if variable == BROWSER_PROFILES_VARIABLE:
        return (
            f"platform {platform!r} is a browser channel, disabled until {variable} names the "
            "directory of its accounts' browser profiles (see docs/browser-lane.md); then add "
            f"and log in accounts with `geo-pipeline accounts add|login`"
        )
    return (
        f"platform {platform!r} is disabled until its API key is set: set the environment "
        f"variable {variable} (see docs/operations.md, 'Real engines and prices'), then check "
        f"it with `geo-pipeline connectors check {platform}`"
    )


@dataclass(frozen=True)
class PlatformEntry:
    platform: str
    protocol: str
    base_url: str
    capabilities: Capabilities
    api_key_env: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # A real engine: offered for planning only while ``api_key_env`` is set (never sent keyless).
    requires_key: bool = False


_T = TypeVar("_T")


class OfferedCapabilities(dict[str, Capabilities]):
    """The capabilities of the platforms offered for planning. Iteration, ``in`` and ``len``
    see only those; looking up a platform that is registered but disabled (``get`` or ``[]``)
    raises ``PlatformDisabled`` naming the variable to set, instead of "unknown platform"."""

    def __init__(self, offered: Mapping[str, Capabilities], disabled: Mapping[str, str]):
        super().__init__(offered)
        self.disabled: dict[str, str] = dict(disabled)  # platform -> its key variable

    def _refuse(self, key: object) -> None:
        if isinstance(key, str) and key in self.disabled and not dict.__contains__(self, key):
            raise PlatformDisabled(key, self.disabled[key])

    def __missing__(self, key: str) -> Capabilities:
        self._refuse(key)
        raise KeyError(key)

    @overload
    def get(self, key: str, default: None = None, /) -> Capabilities | None: ...
    @overload
    def get(self, key: str, default: Capabilities, /) -> Capabilities: ...
    @overload
    def get(self, key: str, default: _T, /) -> Capabilities | _T: ...
    def get(self, key: str, default: object = None, /) -> object:
        self._refuse(key)
        return super().get(key, default)


@dataclass(frozen=True)
class Registry:
    entries: Mapping[str, PlatformEntry]
    # Registered but not offered until their key variable is set (``requires_key``).
    disabled: Mapping[str, PlatformEntry] = field(default_factory=dict)

    def capabilities(self) -> dict[str, Capabilities]:
        """The offered platforms' capabilities, as an ``OfferedCapabilities`` (looking up a
        disabled platform raises ``PlatformDisabled``); a copy (``dict(...)``) is plain."""
        return OfferedCapabilities(
            {name: e.capabilities for name, e in self.entries.items()},
            {name: str(e.api_key_env) for name, e in self.disabled.items()},
        )

    def channels(self) -> list[str]:
        return sorted(ch for e in self.entries.values() for ch in e.capabilities.channels())

    def entry(self, platform: str) -> PlatformEntry:
        try:
            return self.entries[platform]
        except KeyError:
            if platform in self.disabled:
                raise PlatformDisabled(platform, str(self.disabled[platform].api_key_env)) from None
            raise RegistryError(
                f"platform {platform!r} is not registered; known: {', '.join(sorted(self.entries))}"
            ) from None

    def every_entry(self) -> dict[str, PlatformEntry]:
        """Offered and disabled entries, by name (what ``connectors check`` reports on)."""
        return dict(sorted({**self.disabled, **self.entries}.items()))


def parse_catalogue(
    data: Mapping[str, Any], key_is_set: Callable[[str], bool] | None = None
) -> Registry:
    """The registry of an already-expanded mapping (``defaults`` and ``platforms``).

    ``key_is_set(variable)`` says whether a key variable holds a value; an entry with
    ``requires_key: true`` whose ``api_key_env`` is not set goes to ``Registry.disabled``
    (registered, not offered). Without it every entry is offered."""
    defaults = data.get("defaults") or {}
    entries: dict[str, PlatformEntry] = {}
    disabled: dict[str, PlatformEntry] = {}
    for name, spec in (data.get("platforms") or {}).items():
        try:
            prices = PriceList.from_mapping(spec["prices"])
            caps = Capabilities(
                platform=name,
                devices=tuple(spec["devices"]),
                regions=tuple(spec["regions"]),
                modes=tuple(spec["modes"]),
                screenshot=_flag(spec, "screenshot", False, name),
                submit_cap=int(spec.get("submit_cap", 100)),
                prices=prices,
                rate_limits=RateLimits(**(spec.get("rate_limits") or {})),
                # A synchronous chat API takes no idempotency key: a re-send is a second paid
                # call, so the worker never re-sends there after an unknown outcome.
                idempotency_keys=_flag(
                    spec, "idempotency_keys", _flag(spec, "asynchronous", True, name), name
                ),
                lookup_by_key=_flag(spec, "lookup_by_key", True, name),
                cancellable=_flag(spec, "cancellable", False, name),
                asynchronous=_flag(spec, "asynchronous", True, name),
                access=_choice(spec, "access", "api", ACCESS_KINDS, name),
                cancel_scope=_choice(spec, "cancel_scope", "task", CANCEL_SCOPES, name),
                result_retention_s=_seconds(spec, "result_retention_s", name),
                engine=str(spec.get("engine") or ""),
            )
        except RegistryError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise RegistryError(f"platforms.{name}: {exc!r}") from exc
        requires_key = _flag(spec, "requires_key", False, name)
        key_env = spec.get("api_key_env") or None
        if requires_key and not key_env:
            raise RegistryError(f"platforms.{name}: requires_key needs api_key_env (its variable)")
        entry = PlatformEntry(
            platform=name,
            protocol=str(spec.get("protocol", "simulator")),
            base_url=str(spec.get("base_url") or defaults.get("base_url", "")),
            capabilities=caps,
            api_key_env=key_env,
            options=_options(spec.get("options") or {}, name),
            requires_key=requires_key,
        )
        if requires_key and key_is_set is not None and not key_is_set(str(key_env)):
            disabled[name] = entry
        else:
            entries[name] = entry
    if not entries and not disabled:
        raise RegistryError("the connector registry lists no platforms")
    return Registry(entries, disabled)


# --------------------------------------------------------------------------- price versions
@dataclass(frozen=True)
class PriceVersion:
    """One published price list of a platform and the instant it takes effect (R4, R23).

    A quote prices with the version effective when the run is created and freezes its name;
    the registry's static ``prices`` are the fallback version of a platform with no other."""

    platform: str
    effective_from: datetime
    prices: PriceList
    source: str = ""

    @property
    def version(self) -> str:
        return self.prices.version


class PriceFileError(ValueError):
    """A price file with problems; ``problems`` are ``field.path: what is wrong``, all at once."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(
            "the price file has "
            + (f"{len(problems)} problems" if len(problems) != 1 else "1 problem")
            + ":\n"
            + "\n".join(f"  {p}" for p in problems)
        )


# The fields of one price list in a price file, in the order people read them.
PRICE_FIELDS = (
    "platform",
    "version",
    "effective_from",
    "currency",
    "base",
    "deep_thinking",
    "web_search",
    "screenshot",
    "retry_fee_rule",
    "source",
    "credits",
    "credit_price",
)
_PRICE_KEYS = frozenset(PRICE_FIELDS)
_RETRY_FEE_RULES = ("charged", "free_after_failure", "free")


def _minor_units(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _instant(value: object) -> datetime | None:
    """A date (00:00 UTC of that day) or an ISO datetime with a zone; None when it is neither."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else None
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                return _instant(date.fromisoformat(text))
            return _instant(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def parse_price_versions(
    data: object, caps: Mapping[str, Capabilities] | None = None
) -> list[PriceVersion]:
    """The price versions of an already-read price file (YAML or JSON)::

        source: "vendor pricing page, read 2026-12-01"     # default for every list
        price_lists:
          - {platform: deepseek, version: deepseek-2026-12, effective_from: 2026-12-15,
             currency: CNY, base: {standard: 9, deep_thinking: 9, web_search: 9},
             deep_thinking: 12, web_search: 4, screenshot: 3, retry_fee_rule: free_after_failure}

    Amounts are integer minor units; a float is refused, never rounded. With ``caps`` (the
    registry), the platform must be registered, in the currency it quotes in, and the list must
    price every mode the platform offers (a quote needs a base price per mode). Every problem is
    reported with its field path; nothing is returned unless the whole file is valid."""
    problems: list[str] = []
    if not isinstance(data, Mapping):
        raise PriceFileError(["(top): expected a mapping with a 'price_lists' list"])
    default_source = data.get("source", "")
    lists = data.get("price_lists")
    if not isinstance(lists, list) or not lists:
        raise PriceFileError(["price_lists: expected a non-empty list of price lists"])
    out: list[PriceVersion] = []
    seen: dict[tuple[str, str], str] = {}
    for i, spec in enumerate(lists):
        at = f"price_lists[{i}]"
        if not isinstance(spec, Mapping):
            problems.append(f"{at}: expected a mapping")
            continue
        before = len(problems)
        for key in sorted(set(spec) - _PRICE_KEYS):
            problems.append(f"{at}.{key}: unknown field; known: {', '.join(sorted(_PRICE_KEYS))}")
        for key in ("platform", "version", "currency"):
            if not isinstance(spec.get(key), str) or not str(spec.get(key)).strip():
                problems.append(f"{at}.{key}: required, a non-empty string")
        platform = str(spec.get("platform") or "")
        currency = spec.get("currency")
        if isinstance(currency, str) and not (
            len(currency) == 3 and currency.isalpha() and currency.isupper()
        ):
            problems.append(f"{at}.currency: {currency!r} is not an ISO 4217 code like 'CNY'")
        when = _instant(spec.get("effective_from"))
        if when is None:
            problems.append(
                f"{at}.effective_from: required, a date (YYYY-MM-DD, 00:00 UTC) or an ISO "
                f"datetime with a zone, got {spec.get('effective_from')!r}"
            )
        base = spec.get("base")
        if base is None and isinstance(spec.get("credits"), Mapping) and spec["credits"]:
            base = dict(spec["credits"])  # the modes; the amounts are computed from the credits
        if not isinstance(base, Mapping) or not base:
            problems.append(f"{at}.base: required, a mapping of mode to minor units")
            base = {}
        for mode, value in base.items():
            if not _minor_units(value):
                problems.append(
                    f"{at}.base.{mode}: must be a non-negative integer of minor units, "
                    f"got {value!r}"
                )
        for key in ("deep_thinking", "web_search", "screenshot"):
            if key in spec and not _minor_units(spec[key]):
                problems.append(
                    f"{at}.{key}: must be a non-negative integer of minor units, got {spec[key]!r}"
                )
        rule = spec.get("retry_fee_rule", "charged")
        if rule not in _RETRY_FEE_RULES:
            problems.append(
                f"{at}.retry_fee_rule: {rule!r} is not one of {', '.join(_RETRY_FEE_RULES)}"
            )
        if caps is not None and platform:
            cap = caps.get(platform)
            if cap is None:
                problems.append(
                    f"{at}.platform: {platform!r} is not registered; known: "
                    f"{', '.join(sorted(caps))}"
                )
            else:
                if isinstance(currency, str) and currency != cap.prices.currency:
                    problems.append(
                        f"{at}.currency: {platform} quotes in {cap.prices.currency}, not "
                        f"{currency} (a run is quoted in one currency)"
                    )
                for mode in cap.modes:
                    if mode not in base:
                        problems.append(f"{at}.base.{mode}: missing; {platform} offers {mode}")
                for mode in base:
                    if mode not in cap.modes:
                        problems.append(
                            f"{at}.base.{mode}: {platform} offers no mode {mode!r}; "
                            f"modes: {', '.join(cap.modes)}"
                        )
        version = str(spec.get("version") or "")
        if platform and version:
            if (platform, version) in seen:
                problems.append(f"{at}.version: {version!r} repeats {seen[(platform, version)]}")
            seen.setdefault((platform, version), at)
        if len(problems) > before or when is None:
            continue
        try:
            prices = PriceList.from_mapping(spec)
        except (ValueError, TypeError) as exc:
            problems.append(f"{at}: {exc}")
            continue
        out.append(
            PriceVersion(
                platform=platform,
                effective_from=when,
                prices=prices,
                source=str(spec.get("source", default_source) or ""),
            )
        )
    if problems:
        raise PriceFileError(problems)
    return out


def price_list_mapping(prices: PriceList) -> dict[str, Any]:
    """A price list as the registry and the price file write it (stored as jsonb)."""
    return {
        "version": prices.version,
        "currency": prices.currency,
        "base": dict(sorted(prices.base.items())),
        "deep_thinking": prices.deep_thinking,
        "web_search": prices.web_search,
        "screenshot": prices.screenshot,
        "retry_fee_rule": prices.retry_fee_rule,
        **(
            {
                "credits": dict(sorted(prices.credits.items())),
                "credit_price": {
                    "minor": prices.credit_price.minor,
                    "per_credits": prices.credit_price.per_credits,
                },
            }
            if prices.credit_price is not None
            else {}
        ),
    }


def effective_version(versions: Iterable[PriceVersion], at: datetime) -> PriceVersion | None:
    """The version in effect at ``at``: the latest whose effective_from is not after it."""
    due = [v for v in versions if v.effective_from <= at]
    return max(due, key=lambda v: v.effective_from) if due else None


def reprice(prices: PriceList, mode: str, items: Mapping[str, int]) -> dict[str, int] | None:
    """What ``prices`` charges for the items of one answer (the nonzero items of a charge);
    None when that list does not price one of them (so it cannot explain a difference)."""
    out: dict[str, int] = {}
    for item, amount in items.items():
        if amount == 0:
            continue
        if item == "base":
            if mode not in prices.base:
                return None
            out[item] = prices.base[mode]
        elif item in ("deep_thinking", "web_search", "screenshot"):
            unit = int(getattr(prices, item))
            if not unit:
                return None
            out[item] = unit
        else:
            return None
    return out
