"""The report's trend chart (analysis.charts.trend_svg): a rate over days with interval bars, a
marker on the days analytics.brand_changes flagged and on no other, the q of the flags in its
caption, every name escaped, nothing executable, and one day said in words, not drawn."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import date, timedelta

from geo_pipeline.analysis.charts import trend_charts, trend_svg

SVG = "{http://www.w3.org/2000/svg}"
START = date(2026, 11, 1)
HOSTILE = "A&B <Coffee> \"quoted\" 'single' </text><script>alert(1)</script>"


def parse(svg: str) -> ET.Element:
    """Well-formed SVG with nothing a strict CSP would block or a browser would run."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    for el in root.iter():
        tag = el.tag.removeprefix(SVG)
        assert tag not in {"script", "foreignObject", "iframe", "a", "image", "use", "style"}, tag
        for name, value in el.attrib.items():
            assert not name.lower().startswith("on") and name != "style", name
            assert "javascript:" not in value.lower() and "url(" not in value.lower()
    return root


def by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [el for el in root.iter() if cls in (el.get("class") or "").split()]


def data_markers(root: ET.Element, cls: str) -> list[ET.Element]:
    return [el for el in by_class(root, cls) if "legend" not in (el.get("class") or "").split()]


def title_of(el: ET.Element) -> str:
    t = el.find(f"{SVG}title")
    return "" if t is None or t.text is None else t.text


def rows(flag_dod: set[tuple[str, int]], flag_7d: set[tuple[str, int]], n_days: int = 5):
    return [
        {"series": name, "day": START + timedelta(days=i), "rate": 0.2 + 0.1 * i + off,
         "lower": 0.1 + 0.1 * i + off, "upper": 0.3 + 0.1 * i + off,
         "flagged": (name, i) in flag_dod, "flagged_7d": (name, i) in flag_7d}
        for name, off in (("瑞幸咖啡", 0.0), ("星巴克", 0.05))
        for i in range(n_days)
    ]  # fmt: skip


def test_flag_markers_on_the_flagged_days_and_only_those():
    svg = trend_svg(rows({("瑞幸咖啡", 2), ("星巴克", 4)}, {("瑞幸咖啡", 3)}), fdr_q=0.05)
    root = parse(svg)
    rings = data_markers(root, "flag-day-over-day")
    squares = data_markers(root, "flag-rolling-7d")
    assert sorted(title_of(r) for r in rings) == [
        "星巴克, 2026-11-05: change vs the previous day flagged",
        "瑞幸咖啡, 2026-11-03: change vs the previous day flagged",
    ]
    assert [title_of(s) for s in squares] == [
        "瑞幸咖啡, 2026-11-04: last 7 days vs the 7 before flagged"
    ]
    # Each marker sits on its point: the ring's centre is the flagged point's centre.
    points = {title_of(p).split(":")[0]: p for p in by_class(root, "point")}
    assert len(points) == 10
    for ring in rings:
        point = points[title_of(ring).split(":")[0]]
        assert (ring.get("cx"), ring.get("cy")) == (point.get("cx"), point.get("cy"))
    sq = squares[0]
    centre = points["瑞幸咖啡, 2026-11-04"]
    assert float(sq.get("x", "0")) + 9 == float(centre.get("cx", "nan"))
    # The legend names both markers once; no flag, no data marker at all.
    assert len(by_class(root, "legend")) == 2
    text = "".join(root.itertext())
    assert "change vs the previous day" in text and "last 7 days vs the 7 before" in text
    quiet = parse(trend_svg(rows(set(), set()), fdr_q=0.05))
    assert data_markers(quiet, "flag-day-over-day") == []
    assert data_markers(quiet, "flag-rolling-7d") == []
    assert len(by_class(quiet, "legend")) == 2


def test_every_point_has_its_interval_bar():
    data = rows(set(), set())
    data[1] = {**data[1], "lower": None, "upper": None}  # no interval known: no bar, still a point
    root = parse(trend_svg(data, fdr_q=0.05))
    bars = by_class(root, "interval")
    assert len(bars) == len(data) - 1
    assert len(by_class(root, "point")) == len(data)
    # A bar spans its interval: 10 %..30 % of the first point is 20 % of the plot height.
    spans = []
    for bar in bars:
        ys = [float(v) for v in re.findall(r"V([-\d.]+)", bar.get("d", ""))]
        top = float(re.findall(r"M[-\d.]+ ([-\d.]+)", bar.get("d", ""))[1])
        spans.append(round(ys[0] - top, 1))
    assert len(set(spans)) == 1 and spans[0] > 0  # every interval here is 20 points wide
    assert len(list(root.iter(f"{SVG}polyline"))) == 2  # one line per series


def test_names_with_markup_characters_are_text():
    data = [{**r, "series": HOSTILE if r["series"] == "星巴克" else r["series"]}
            for r in rows({("星巴克", 1)}, set())]  # fmt: skip
    svg = trend_svg(data, title=f"Trend of {HOSTILE}", fdr_q=0.05)
    root = parse(svg)
    assert "<script>" not in svg and "<Coffee>" not in svg
    assert "&lt;Coffee&gt;" in svg and "&amp;B" in svg and "&quot;quoted&quot;" in svg
    text = "".join(root.itertext())
    assert HOSTILE in text  # shown as it is written
    assert title_of(root).startswith("Trend of A&B <Coffee>")
    assert [title_of(r) for r in data_markers(root, "flag-day-over-day")] == [
        f"{HOSTILE}, 2026-11-02: change vs the previous day flagged"
    ]


def test_title_desc_and_the_q_in_the_caption():
    root = parse(trend_svg(rows({("瑞幸咖啡", 2)}, set()), title="Mention rate", fdr_q=0.1))
    desc = root.find(f"{SVG}desc")
    assert title_of(root) == "Mention rate" and root.get("role") == "img"
    assert desc is not None and desc.text is not None
    assert "2 series over 5 days, 2026-11-01 to 2026-11-05" in desc.text
    assert "1 day-over-day and 0 rolling 7-day changes flagged" in desc.text
    text = "".join(root.itertext())
    assert "Benjamini-Hochberg at q = 0.1" in text
    assert "q = n/a" in "".join(parse(trend_svg(rows(set(), set()))).itertext())


def test_one_day_is_said_not_drawn():
    one = [r for r in rows({("瑞幸咖啡", 0)}, set(), n_days=1)]
    root = parse(trend_svg(one, fdr_q=0.05))
    text = "".join(root.itertext())
    assert "Only one day of data (2026-11-01)" in text
    assert by_class(root, "point") == [] and list(root.iter(f"{SVG}polyline")) == []
    assert data_markers(root, "flag-day-over-day") == []
    assert "No day with data yet" in "".join(parse(trend_svg([])).itertext())
    # A day without a rate (nothing analysed) does not count as a day.
    none_rate = [*one, {"series": "瑞幸咖啡", "day": START + timedelta(days=1), "rate": None}]
    assert "Only one day" in "".join(parse(trend_svg(none_rate)).itertext())


def test_trend_charts_one_chart_per_channel_from_brand_trends_rows():
    view_rows = [
        {"channel": ch, "brand": b, "scheduled_for": START + timedelta(days=i),
         "mention_rate": 0.5, "mention_rate_lower": 0.3, "mention_rate_upper": 0.7,
         "flagged_day_over_day": ch == "kimi__web" and b == "A" and i == 1,
         "flagged_rolling_7d": False}
        for ch in ("deepseek__web", "kimi__web") for b in ("A", "B") for i in range(2)
    ]  # fmt: skip
    charts = trend_charts(view_rows, fdr_q=0.05)
    assert [ch for ch, _ in charts] == ["deepseek__web", "kimi__web"]
    ds, kimi = (parse(svg) for _, svg in charts)
    assert title_of(kimi) == "Mention rate by day on kimi__web"
    assert data_markers(ds, "flag-day-over-day") == []
    assert [title_of(r) for r in data_markers(kimi, "flag-day-over-day")] == [
        "A, 2026-11-02: change vs the previous day flagged"
    ]
