"""The platform catalogue: which platforms exist, what each can do and charge, and how it is
reached (protocol, base URL, the name of its key's environment variable).

Pure: ``parse_catalogue`` turns an already-read mapping into values. Reading the file and
expanding ``${VAR:-default}`` from the environment happen at the edge
(``geo_pipeline.connectors.registry.load_registry``), so planning, billing and the simulator
can use the same capabilities and prices without touching the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from geo_pipeline.domain.platforms import Capabilities, PriceList, RateLimits


class RegistryError(ValueError):
    pass


@dataclass(frozen=True)
class PlatformEntry:
    platform: str
    protocol: str
    base_url: str
    capabilities: Capabilities
    api_key_env: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Registry:
    entries: Mapping[str, PlatformEntry]

    def capabilities(self) -> dict[str, Capabilities]:
        return {name: e.capabilities for name, e in self.entries.items()}

    def channels(self) -> list[str]:
        return sorted(ch for e in self.entries.values() for ch in e.capabilities.channels())

    def entry(self, platform: str) -> PlatformEntry:
        try:
            return self.entries[platform]
        except KeyError:
            raise RegistryError(
                f"platform {platform!r} is not registered; known: {', '.join(sorted(self.entries))}"
            ) from None


def parse_catalogue(data: Mapping[str, Any]) -> Registry:
    """The registry of an already-expanded mapping (``defaults`` and ``platforms``)."""
    defaults = data.get("defaults") or {}
    entries: dict[str, PlatformEntry] = {}
    for name, spec in (data.get("platforms") or {}).items():
        try:
            prices = PriceList.from_mapping(spec["prices"])
            caps = Capabilities(
                platform=name,
                devices=tuple(spec["devices"]),
                regions=tuple(spec["regions"]),
                modes=tuple(spec["modes"]),
                screenshot=bool(spec.get("screenshot", False)),
                submit_cap=int(spec.get("submit_cap", 100)),
                prices=prices,
                rate_limits=RateLimits(**(spec.get("rate_limits") or {})),
                # A synchronous chat API takes no idempotency key: a re-send is a second paid
                # call, so the worker never re-sends there after an unknown outcome.
                idempotency_keys=bool(
                    spec.get("idempotency_keys", bool(spec.get("asynchronous", True)))
                ),
                lookup_by_key=bool(spec.get("lookup_by_key", True)),
                cancellable=bool(spec.get("cancellable", False)),
                asynchronous=bool(spec.get("asynchronous", True)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RegistryError(f"platforms.{name}: {exc!r}") from exc
        entries[name] = PlatformEntry(
            platform=name,
            protocol=str(spec.get("protocol", "simulator")),
            base_url=str(spec.get("base_url") or defaults.get("base_url", "")),
            capabilities=caps,
            api_key_env=spec.get("api_key_env"),
            options=spec.get("options") or {},
        )
    if not entries:
        raise RegistryError("the connector registry lists no platforms")
    return Registry(entries)
