"""The report's charts are well-formed SVG, escape every text and carry nothing executable."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import date, timedelta

from geo_pipeline.analysis.charts import rate_bars_svg, trend_svg

EVIL = '<script>alert("x")</script> & "quoted" onload=1'
SVG = "{http://www.w3.org/2000/svg}"


def assert_inert(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed, or it raises
    assert root.tag == f"{SVG}svg"
    for el in root.iter():
        assert el.tag.removeprefix(SVG) not in {
            "script",
            "foreignObject",
            "iframe",
            "a",
            "image",
            "use",
        }
        for name, value in el.attrib.items():
            assert not name.lower().startswith("on"), name
            assert name not in ("style", "href", "{http://www.w3.org/1999/xlink}href"), name
            assert "javascript:" not in value.lower() and "url(" not in value.lower()
    assert "<script" not in svg.lower()
    return root


def test_rate_bars_with_whiskers_escaped():
    rows = [
        {
            "channel": "deepseek__web",
            "brand": "瑞幸咖啡",
            "rate": 0.6,
            "lower": 0.4,
            "upper": 0.78,
            "n": 30,
        },
        {
            "channel": "deepseek__web",
            "brand": EVIL,
            "rate": 0.2,
            "lower": 0.08,
            "upper": 0.41,
            "n": 30,
        },
        {"channel": EVIL, "brand": "瑞幸咖啡", "rate": None, "lower": None, "upper": None, "n": 0},
    ]
    svg = rate_bars_svg(rows, title=f"Mention rate {EVIL}")
    root = assert_inert(svg)
    texts = "".join(root.itertext())
    assert EVIL in texts and "瑞幸咖啡" in texts  # shown as text, not markup
    assert len(root.findall(f"{SVG}rect")) >= 2 + 2  # two bars (+ legend swatches)
    assert len([p for p in root.iter(f"{SVG}path")]) == 2  # one whisker per bar with bounds


def test_trend_marks_flagged_days():
    start = date(2026, 11, 1)
    rows = [
        {
            "series": f"瑞幸 · {EVIL}",
            "day": start + timedelta(days=i),
            "rate": 0.3 + 0.05 * i,
            "lower": 0.2 + 0.05 * i,
            "upper": 0.4 + 0.05 * i,
            "flagged": i == 3,
        }
        for i in range(6)
    ] + [{"series": "Manner", "day": start, "rate": None, "flagged": False}]
    root = assert_inert(trend_svg(rows))
    rings = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "flag-day-over-day"]
    assert len(rings) == 1  # the legend's ring has class "legend flag-day-over-day"
    assert len(list(root.iter(f"{SVG}polyline"))) == 1
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "interval"]) == 6
    assert "change flagged" in "".join(root.itertext())


def test_empty_inputs_still_render():
    assert_inert(rate_bars_svg([]))
    assert_inert(trend_svg([]))
    assert_inert(
        trend_svg([{"series": "a", "day": date(2026, 1, 1), "rate": 0.5, "flagged": True}])
    )
