"""Charts where the Dagster UI shows them without a click (issue 36).

Dagster 1.13 (ui-core ``metadata/MetadataEntry.tsx``, the version ``dagster-webserver`` 1.13.27
ships) renders a Markdown metadata value in place only when the view asks for small values to be
expanded and the Markdown is shorter than 1,000 characters; anything longer is the link
"[Show Markdown]" that opens a dialog. The views of an asset's materialisation (its latest
materialisation, its events and a partition's events: ``LastMaterializationMetadata.tsx``,
``AssetEventMetadataEntriesTable.tsx``) ask for that. Its Markdown sanitiser keeps an image's
``http``, ``https`` and ``data`` sources. A chart as a ``data:`` URI is some kilobytes, so it
was always behind the click; a Markdown image whose source is a short URL renders in place.

So a chart is stored once, content-addressed, in the evidence archive (``charts/<sha256>.svg``,
the archive the asset already writes to: S3 or a directory) and the metadata is
``![alt](<GEO_CHART_URL>/charts/<sha256>.svg)``; ``geo-pipeline dagster charts`` serves the
archive's charts at that URL (``geo-pipeline dev`` runs it). The address names the content, so a
materialisation's chart is the one it drew, forever, and a URL cannot be guessed without the
chart's bytes. Without ``GEO_CHART_URL`` the chart stays a ``data:`` URI (behind the click)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from geo_pipeline.defs.markdown import md_text
from geo_pipeline.evidence.charts import chart_key

# Dagster 1.13.27, ui-core/src/metadata/MetadataEntry.tsx: `expandSmallValues && mdStr.length
# < 1000` renders the Markdown in place.
INLINE_MARKDOWN_LIMIT = 1000


class ChartUrlError(ValueError):
    """GEO_CHART_URL is not an http(s) base URL a Markdown image can carry."""


def check_base_url(base: str) -> str:
    """The base without a trailing slash; refused (naming the variable, the value and what is
    allowed) unless it is an http(s) URL with a host and no character that would end or break
    a Markdown link destination."""
    parts = urlsplit(base)
    if (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or parts.query
        or parts.fragment
        or re.search(r"[\s()<>\\\"']", base)
    ):
        raise ChartUrlError(
            f"GEO_CHART_URL={base!r}: expected the http(s) address where "
            "`geo-pipeline dagster charts` serves, e.g. http://127.0.0.1:3001 (no query, "
            "fragment, spaces, quotes, brackets or parentheses)"
        )
    return base.rstrip("/")


def chart_url(base: str, digest: str) -> str:
    return f"{check_base_url(base)}/{chart_key(digest)}"


def md_linked_image(url: str, alt: str) -> str:
    """A Markdown image of a served chart, short enough for Dagster to render in place: the alt
    text escaped like a table cell (md_text) and cut so the whole stays under the limit."""
    room = INLINE_MARKDOWN_LIMIT - len(url) - len("![]()") - 1
    text = md_text(alt)
    if len(text) > room:
        text = text[: max(room - 1, 0)].rstrip("\\") + "…"
    return f"![{text}]({url})"
