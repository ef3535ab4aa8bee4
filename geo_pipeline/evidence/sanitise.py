"""Safe display of untrusted answers (R19).

Engines return Markdown that may embed HTML, and an answer is attacker-controlled text: anyone can
publish a page an engine quotes. The raw text is stored as received; what a person sees is this
module's rendering, made in two independent steps so that one mistake is not enough:

1. a real Markdown parser (markdown-it-py, CommonMark + GFM tables and strikethrough), whose link
   validator already refuses ``javascript:``/``vbscript:``/``file:``/``data:`` links;
2. an allow-list HTML sanitiser (nh3 / ammonia): only the tags and attributes below survive;
   ``script`` and ``style`` are removed with their content; event handlers, ``style`` attributes
   (except exact table alignments), SVG/MathML, forms, frames and images are dropped; links
   keep only http/https/mailto URLs and get ``rel="nofollow noopener noreferrer"``.

Images are not allowed: a remote image in an answer would let whoever wrote it see every analyst
who opens the report (a tracking pixel), and the evidence of record is the screenshot anyway.
"""

from __future__ import annotations

from functools import cache

import nh3
from markdown_it import MarkdownIt

ALLOWED_TAGS: frozenset[str] = frozenset(
    {
        "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6",
        "strong", "em", "b", "i", "u", "s", "del", "ins", "sub", "sup", "mark", "small",
        "code", "pre", "kbd", "samp", "blockquote", "q", "cite", "abbr",
        "ul", "ol", "li", "dl", "dt", "dd",
        "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption",
        "a", "span", "div",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "code": {"class"},  # language-xxx from fenced code blocks
    "ol": {"start"},
    "th": {"colspan", "rowspan"},
    "td": {"colspan", "rowspan"},
}
# Table alignment from Markdown (``|:-:|``) is the only style kept, and only as these exact values.
_ALIGN = {f"text-align:{side}" for side in ("left", "center", "right")}
ALLOWED_ATTRIBUTE_VALUES: dict[str, dict[str, set[str]]] = {
    "th": {"style": _ALIGN},
    "td": {"style": _ALIGN},
}
URL_SCHEMES: frozenset[str] = frozenset({"http", "https", "mailto"})
LINK_REL = "nofollow noopener noreferrer"


@cache
def _markdown() -> MarkdownIt:
    # html=True lets an engine's inline HTML through the parser: the sanitiser, not the parser,
    # is the security boundary, and benign HTML (<b>, <br>) then renders as the engine meant.
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


@cache
def _cleaner() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes=ALLOWED_ATTRIBUTES,
        tag_attribute_values=ALLOWED_ATTRIBUTE_VALUES,
        url_schemes=set(URL_SCHEMES),
        link_rel=LINK_REL,
        strip_comments=True,
        # A relative link in an engine's answer points at nothing of ours; drop it.
        url_relative="deny",
    )


def sanitise_html(html: str) -> str:
    """Allow-list sanitise an HTML fragment (step 2 alone)."""
    return _cleaner().clean(html)


def render_answer(markdown_text: str) -> str:
    """Untrusted Markdown/HTML → HTML that is safe to put in a page (both steps)."""
    return sanitise_html(_markdown().render(markdown_text))
