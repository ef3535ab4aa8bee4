"""Loading the platform catalogue (geo_pipeline.domain.catalogue) for this deployment.

Read from ``GEO_CONNECTORS_FILE`` or the bundled ``registry.yaml``. ``${VAR:-default}`` in the
file is expanded from the environment, so URLs and key variable names can differ per deployment
while the file stays free of credentials (D2). The keys themselves are read only when a
connector sends a request (``api_key``) -- and, for an entry with ``requires_key: true`` (a real
engine), whether its variable is set at all: until it is, the platform is registered but
disabled (``Registry.disabled``), never offered for planning, and a config naming it is refused
with the variable to set.

A deployment's file may start from the bundled registry instead of copying it: ``extends:
bundled`` takes every bundled platform and ``defaults``, then the file's own sections on top (a
platform of the same name replaces the bundled one). examples/services-registry.yaml does so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from geo_pipeline.domain.catalogue import PlatformEntry, Registry, RegistryError, parse_catalogue
from geo_pipeline.settings import settings, variable

REGISTRY_ENV = "GEO_CONNECTORS_FILE"
_VAR = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


def api_key(entry: PlatformEntry) -> str | None:
    """The platform's key, from the environment variable its entry names (D2)."""
    return variable(entry.api_key_env) if entry.api_key_env else None


def key_is_set(name: str) -> bool:
    """Whether the key variable ``name`` holds a value (empty counts as unset)."""
    return variable(name) is not None


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: variable(m.group(1)) or m.group(2) or "", value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


BUNDLED = Path(__file__).with_name("registry.yaml")
# libyaml's safe loader when PyYAML has it: the same documents, ~8x faster than the pure-Python
# one (every process loading the code location reads the registry: issue 36).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read(source: Path) -> dict[str, Any]:
    try:
        data = yaml.load(source.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except OSError as exc:
        raise RegistryError(f"cannot read connector registry {source}: {exc.strerror}") from exc
    if data is not None and not isinstance(data, dict):
        raise RegistryError(f"connector registry {source}: not a mapping")
    return dict(data or {})


def _extended(data: dict[str, Any], source: Path) -> dict[str, Any]:
    """``extends: bundled``: the bundled registry with this file's sections on top."""
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if base_name != "bundled" or source.resolve() == BUNDLED.resolve():
        raise RegistryError(
            f"connector registry {source}: extends: {base_name!r} (only 'bundled' is known)"
        )
    base = _read(BUNDLED)
    merged = {**base, **{k: v for k, v in data.items() if k not in ("defaults", "platforms")}}
    merged["defaults"] = {**(base.get("defaults") or {}), **(data.get("defaults") or {})}
    merged["platforms"] = {**(base.get("platforms") or {}), **(data.get("platforms") or {})}
    return merged


def load_registry(path: str | Path | None = None) -> Registry:
    source = Path(path or settings().connectors_file or BUNDLED)
    data = _extended(_read(source), source)
    return parse_catalogue(_expand(data), key_is_set)
