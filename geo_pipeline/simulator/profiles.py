"""Platform profiles of the simulator: what each imitated platform accepts, how fast it is, and
which faults it injects at which rates.

A profile starts from the connector registry (devices, regions, modes, prices, screenshot support,
cancellability — the same values planning validates against, R16) and is overridden from a
profile file, CLI flags or, at runtime, ``POST /_control/profiles/{platform}``. Every rate is a
probability in [0, 1]; every duration is in seconds and may be 0.

Profile file (YAML or JSON)::

    seed: 7
    defaults: {completion_s: [0.05, 0.2], transient_rate: 0.01}   # every platform
    platforms:
      deepseek: {rate_limited_rate: 0.05, retry_after_s: 1}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import PlatformEntry, Registry
from geo_pipeline.domain.platforms import PriceList


class ProfileError(ValueError):
    pass


@dataclass(frozen=True)
class BrandSpec:
    """A brand the generated answers may mention. ``position`` says where in the ranked list the
    brand tends to appear: first, middle, last or any."""

    name: str
    aliases: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    mention_rate: float = 0.5
    position: str = "any"


# The brand and competitors of examples/collection.yaml, so the demo finds mentions out of the box.
DEFAULT_BRANDS: tuple[BrandSpec, ...] = (
    BrandSpec("瑞幸咖啡", ("Luckin Coffee", "luckin", "瑞幸"), ("luckincoffee.com",), 0.7, "any"),
    BrandSpec("星巴克", ("Starbucks",), ("starbucks.com.cn", "starbucks.com"), 0.6, "first"),
    BrandSpec("库迪咖啡", ("Cotti Coffee", "库迪"), ("cotticoffee.com",), 0.4, "middle"),
    BrandSpec("Manner Coffee", ("Manner",), (), 0.3, "last"),
)


@dataclass(frozen=True)
class Profile:
    platform: str
    devices: tuple[str, ...]
    regions: tuple[str, ...]
    modes: tuple[str, ...]
    screenshot_supported: bool
    cancellable: bool
    prices: PriceList
    # Latency: uniform ranges [lo, hi] in seconds.
    accept_delay_s: tuple[float, float] = (0.0, 0.0)
    completion_s: tuple[float, float] = (0.0, 0.0)
    # A created task becomes visible to the idempotency-key lookup only after this delay: a real
    # platform's lookup index is not linearizable with its submits, so "not found" right after a
    # timed-out submit does not mean "not accepted". A re-submit with the key sees it at once.
    register_delay_s: tuple[float, float] = (0.0, 0.0)
    screenshot_delay_s: tuple[float, float] = (0.5, 2.0)  # extra wait of a *late* screenshot
    # Authentication: when required, ``Authorization: Bearer <api_key>`` must match.
    require_auth: bool = False
    api_key: str | None = None
    # Rate limiting: a token bucket on submits (None = off) plus a random 429 share.
    submit_rate_per_s: float | None = None
    submit_burst: int = 50
    retry_after_s: float = 1.0
    # What a lost response looks like to the client: the connection is dropped ("drop") or the
    # answer is withheld for lost_hold_s ("hold", the client's read timeout fires).
    lost_mode: str = "drop"
    lost_hold_s: float = 30.0
    # Fault and content rates (probabilities).
    rate_limited_rate: float = 0.0
    transient_rate: float = 0.0
    response_lost_rate: float = 0.0
    invalid_params_rate: float = 0.0
    permission_error_rate: float = 0.0
    upstream_failure_rate: float = 0.0
    poll_error_rate: float = 0.0
    unparseable_rate: float = 0.0
    screenshot_late_rate: float = 0.0
    screenshot_never_rate: float = 0.0
    bad_answer_rate: float = 0.0
    hostile_rate: float = 0.0
    error_in_200_rate: float = 0.0
    statement_amount_mismatch_rate: float = 0.0
    statement_missing_line_rate: float = 0.0
    statement_extra_line_rate: float = 0.0
    # Content.
    brands: tuple[BrandSpec, ...] = DEFAULT_BRANDS
    citations_range: tuple[int, int] = (2, 5)
    search_results_range: tuple[int, int] = (0, 3)
    brand_domain_citation_rate: float = 0.2
    language: str = "auto"  # auto (from the question) | zh | en

    def with_overrides(self, overrides: Mapping[str, Any]) -> Profile:
        """A copy with ``overrides`` applied; unknown keys and out-of-range rates are refused so a
        typo in a test profile fails loudly instead of silently testing nothing."""
        known = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known or key == "platform":
                raise ProfileError(f"{self.platform}: unknown profile key {key!r}")
            changes[key] = _coerce(self.platform, key, value, getattr(self, key))
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("api_key", None)  # a test double's secret is still never echoed
        return out


def _coerce(platform: str, key: str, value: Any, current: Any) -> Any:
    where = f"{platform}.{key}"
    try:
        if key == "brands":
            return tuple(
                BrandSpec(
                    name=str(b["name"]),
                    aliases=tuple(b.get("aliases") or ()),
                    domains=tuple(b.get("domains") or ()),
                    mention_rate=float(b.get("mention_rate", 0.5)),
                    position=str(b.get("position", "any")),
                )
                for b in value
            )
        if key == "prices":
            if isinstance(value, PriceList):
                return value
            return PriceList.from_mapping(value)
        if isinstance(current, tuple) and key.endswith("_s"):
            lo, hi = (float(value), float(value)) if not isinstance(value, list | tuple) else value
            lo, hi = float(lo), float(hi)
            if lo < 0 or hi < lo:
                raise ValueError("need 0 <= lo <= hi")
            return (lo, hi)
        if isinstance(current, tuple) and key.endswith("_range"):
            lo, hi = int(value[0]), int(value[1])
            if lo < 0 or hi < lo:
                raise ValueError("need 0 <= lo <= hi")
            return (lo, hi)
        if isinstance(current, tuple):
            return tuple(str(v) for v in value)
        if key.endswith("_rate"):
            rate = float(value)
            if not 0.0 <= rate <= 1.0:
                raise ValueError("a rate is a probability in [0, 1]")
            return rate
        if isinstance(current, bool):
            if isinstance(value, str):
                return value.lower() in {"1", "true", "yes", "on"}
            return bool(value)
        if key == "submit_rate_per_s":
            return None if value in (None, "", "none", "off") else float(value)
        if key == "lost_mode":
            if value not in ("drop", "hold"):
                raise ValueError("lost_mode is 'drop' or 'hold'")
            return value
        if isinstance(current, int) and not isinstance(current, bool):
            return int(value)
        if isinstance(current, float):
            return float(value)
        return None if value is None else str(value)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: {exc}") from exc


def profile_from_registry(registry: Registry, platform: str) -> Profile:
    return profile_from_registry_entry(registry.entry(platform))


def profile_from_registry_entry(entry: PlatformEntry) -> Profile:
    """The fault-free profile of one registered platform (also used by InstantConnector)."""
    caps = entry.capabilities
    return Profile(
        platform=entry.platform,
        devices=caps.devices,
        regions=caps.regions,
        modes=caps.modes,
        screenshot_supported=caps.screenshot,
        cancellable=caps.cancellable,
        prices=caps.prices,
    )


@dataclass
class SimulatorConfig:
    seed: int = 0
    profiles: dict[str, Profile] = field(default_factory=dict)
    # Answer-scraping services' profiles by service name (simulator.services), e.g. ``cloro``.
    services: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_profiles(
    source: str | Path | Mapping[str, Any] | None = None,
    *,
    seed: int | None = None,
    registry: Registry | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> SimulatorConfig:
    """Build every platform's profile: registry values, then the file's ``defaults``, then its
    per-platform section, then ``overrides`` (from CLI flags; key ``*`` = every platform).

    Only platforms whose registry protocol is ``simulator`` are imitated by the task API; the
    OpenAI-compatible endpoint reuses the same profiles, selected by model name."""
    registry = registry or load_registry()
    data: Mapping[str, Any]
    if source is None:
        data = {}
    elif isinstance(source, Mapping):
        data = source
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read simulator profiles {path}: {exc.strerror}") from exc
        try:
            data = (json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)) or {}
        except (ValueError, yaml.YAMLError) as exc:
            raise ProfileError(f"simulator profiles {path} are not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ProfileError("a simulator profile file is a mapping with 'defaults' and 'platforms'")
    defaults = data.get("defaults") or {}
    per_platform = data.get("platforms") or {}
    extra = dict(overrides or {})
    names = [n for n, e in registry.entries.items() if e.protocol == "simulator"]
    unknown = set(per_platform) - set(names)
    unknown |= set(extra) - set(names) - {"*"}
    if unknown:
        raise ProfileError(
            f"profiles name unknown platforms {sorted(unknown)}; simulated: {sorted(names)}"
        )
    profiles: dict[str, Profile] = {}
    for name in names:
        prof = profile_from_registry(registry, name).with_overrides(defaults)
        prof = prof.with_overrides(per_platform.get(name) or {})
        prof = prof.with_overrides(extra.get("*") or {})
        profiles[name] = prof.with_overrides(extra.get(name) or {})
    services = data.get("services") or {}
    if not isinstance(services, Mapping):
        raise ProfileError("services: a mapping of service name to its profile keys")
    return SimulatorConfig(
        seed=int(seed if seed is not None else data.get("seed", 0)),
        profiles=profiles,
        services={str(k): dict(v or {}) for k, v in services.items()},
    )
