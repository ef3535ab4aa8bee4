"""Redis key names. Every key starts with a namespace prefix (``GEO_REDIS_PREFIX``, default
``geo``) so tests and deployments share a server without touching each other's keys.

The outbox ``stream`` column holds the logical name (the part after ``<ns>:``), e.g.
``collect:deepseek``; :func:`stream_key` adds the prefix.
"""

from __future__ import annotations

# The names are defined once in domain.streams; COMPLETIONS and DEAD are re-exported here.
from geo_pipeline.domain.streams import COLLECT_PREFIX, SCREENSHOT_PREFIX
from geo_pipeline.domain.streams import COMPLETIONS as COMPLETIONS
from geo_pipeline.domain.streams import DEAD as DEAD
from geo_pipeline.settings import settings

PREFIX_ENV = "GEO_REDIS_PREFIX"
REDIS_URL_ENV = "GEO_REDIS_URL"
DEFAULT_PREFIX = "geo"
GROUP = "workers"  # the consumer group every worker of a stream joins


def namespace(explicit: str | None = None) -> str:
    return explicit or settings().redis_prefix or DEFAULT_PREFIX


def redis_url(explicit: str | None = None) -> str:
    return explicit or settings().redis_url or "redis://127.0.0.1:6379/0"


def collect_stream(platform: str) -> str:
    """Logical name of a platform's text-collection stream (R10)."""
    return f"{COLLECT_PREFIX}{platform}"


def screenshot_stream(platform: str) -> str:
    """Logical name of a platform's screenshot-download stream; apart from text (R10)."""
    return f"{SCREENSHOT_PREFIX}{platform}"


def stream_key(ns: str, logical: str) -> str:
    return f"{ns}:{logical}"


def rate_key(ns: str, platform: str, op: str) -> str:
    return f"{ns}:rl:{platform}:{op}"
