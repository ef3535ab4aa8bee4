"""Values in the Markdown of asset metadata (``MetadataValue.md``): a brand name is data, and the
Dagster UI renders Markdown, so a name holding ``|``, ``*``, ``[x](javascript:...)`` or ``<img>``
would otherwise become table structure, emphasis, a link or HTML."""

from __future__ import annotations

import re
from typing import Any

# CommonMark: any ASCII punctuation character may be backslash-escaped, and is then literal.
_PUNCTUATION = re.compile(r"""([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def md_text(value: Any) -> str:
    """A value as literal text in one Markdown table cell: punctuation escaped, line breaks (which
    would end the row) turned into spaces."""
    return _PUNCTUATION.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(value)))
