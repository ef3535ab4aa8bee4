"""Values in the Markdown of asset metadata (``MetadataValue.md``): a brand name is data, and the
Dagster UI renders Markdown, so a name holding ``|``, ``*``, ``[x](javascript:...)`` or ``<img>``
would otherwise become table structure, emphasis, a link or HTML."""

from __future__ import annotations

import base64
import re
from typing import Any

# CommonMark: any ASCII punctuation character may be backslash-escaped, and is then literal.
_PUNCTUATION = re.compile(r"""([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def md_text(value: Any) -> str:
    """A value as literal text in one Markdown table cell: punctuation escaped, line breaks (which
    would end the row) turned into spaces."""
    return _PUNCTUATION.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(value)))


def md_svg_image(svg: str, alt: str) -> str:
    """An SVG drawing as a Markdown image, the way Dagster documents an image in asset metadata
    (``MetadataValue.md``): ``![alt](data:image/svg+xml;base64,...)``. The SVG travels base64
    encoded inside the URI, so none of its characters reach the Markdown; the alt text is
    escaped like a table cell (:func:`md_text`), so a brand or channel name in it can neither
    end the image nor become a link or HTML."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f"![{md_text(alt)}](data:image/svg+xml;base64,{encoded})"
