"""The connector registry: which platforms exist, their capabilities, base URLs and keys.

Read from ``GEO_CONNECTORS_FILE`` or the bundled ``registry.yaml``. ``${VAR:-default}`` in the
file is expanded from the environment, so URLs and key variable names can differ per deployment
while the file stays free of credentials (D2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from geo_pipeline.domain.platforms import Capabilities, PriceList, RateLimits

REGISTRY_ENV = "GEO_CONNECTORS_FILE"
_VAR = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


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

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class Registry:
    entries: Mapping[str, PlatformEntry]

    def capabilities(self) -> dict[str, Capabilities]:
        return {name: e.capabilities for name, e in self.entries.items()}

    def channels(self) -> list[str]:
        return sorted(ch for e in self.entries.values() for ch in e.capabilities.channels())

    def connector(self, platform: str, client: Any = None) -> Any:
        """The connector of ``platform`` (see connectors.factory.build_connector); pass the
        process's shared ``httpx.AsyncClient`` or use ``ConnectorSet``, which owns one."""
        from geo_pipeline.connectors.factory import build_connector

        return build_connector(self.entry(platform), client)

    def entry(self, platform: str) -> PlatformEntry:
        try:
            return self.entries[platform]
        except KeyError:
            raise RegistryError(
                f"platform {platform!r} is not registered; known: {', '.join(sorted(self.entries))}"
            ) from None


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def parse_registry(data: Mapping[str, Any]) -> Registry:
    data = _expand(dict(data))
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


def load_registry(path: str | Path | None = None) -> Registry:
    source = Path(path or os.environ.get(REGISTRY_ENV) or Path(__file__).with_name("registry.yaml"))
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RegistryError(f"cannot read connector registry {source}: {exc.strerror}") from exc
    return parse_registry(data or {})


def __getattr__(name: str) -> Any:
    # ``from geo_pipeline.connectors.registry import build_connector`` works too; the factory
    # lives in connectors.factory, which imports this module, hence the lazy lookup.
    if name in ("build_connector", "ConnectorSet"):
        from geo_pipeline.connectors import factory

        return getattr(factory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
