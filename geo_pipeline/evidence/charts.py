"""Charts in the evidence archive, content-addressed: ``charts/<sha256 of the SVG>.svg`` (issue
36). The brand_visibility asset stores them (defs/charts.py links them from its metadata) and
``geo-pipeline dagster charts`` serves them (ops/chart_server.py): one address rule for both."""

from __future__ import annotations

import hashlib
import re
from typing import Protocol

CHART_PREFIX = "charts/"
SVG_MEDIA_TYPE = "image/svg+xml"
_DIGEST = re.compile(r"[0-9a-f]{64}")


class ChartArchive(Protocol):
    def put(self, key: str, data: bytes, *, mime_type: str) -> object: ...


def chart_key(digest: str) -> str:
    """The archive key of a chart: ``charts/<sha256 of its bytes>.svg``."""
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 hex digest: {digest!r}")
    return f"{CHART_PREFIX}{digest}.svg"


def digest_of_key(key: str) -> str | None:
    """The digest a chart key names, or None when ``key`` is not one (``charts/<64 hex>.svg``)."""
    m = re.fullmatch(rf"{CHART_PREFIX}([0-9a-f]{{64}})\.svg", key)
    return m[1] if m else None


def store_chart(archive: ChartArchive, svg: str) -> str:
    """Put the SVG under its content address (idempotent: the same chart is the same object);
    return its digest."""
    data = svg.encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    archive.put(chart_key(digest), data, mime_type=SVG_MEDIA_TYPE)
    return digest
