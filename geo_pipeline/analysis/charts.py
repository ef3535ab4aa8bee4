"""Charts for the run report and the Dagster metadata: self-contained inline SVG.

No JavaScript, no external references, no ``style`` or event attributes: only SVG elements with
presentation attributes, every text escaped, so a chart passes the report's strict Content
Security Policy (``default-src 'none'``) and is safe whatever a brand or channel is called.
Two charts: a brand's mention rate per channel with its 95 % interval as a whisker (read the
interval analysts read, ``mention_rate_lower/upper``: question-clustered where pooled), and
a rate over days (``analytics.brand_trends``, read by :mod:`geo_pipeline.analysis.trends`), one
chart per channel, with the changes ``analytics.brand_changes`` flagged after Benjamini-Hochberg
control marked. Drawing only, no I/O: the report (geo_pipeline.ops) and the asset metadata
(geo_pipeline.defs) both draw from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from html import escape
from typing import Any

from geo_pipeline.domain.words import rate_text

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 48, 150, 28, 56
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
FLAG = "#d62728"


def _t(value: object) -> str:
    return escape(str(value), quote=True)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f} %"


def _frame(
    title: str, body: list[str], width: int = WIDTH, height: int = HEIGHT, desc: str = ""
) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" '
        'font-family="sans-serif" font-size="11">'
    )
    return "".join(
        [head, f"<title>{_t(title)}</title>", f"<desc>{_t(desc)}</desc>" if desc else "",
         f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{_t(title)}</text>',
         *body, "</svg>"]
    )  # fmt: skip


def _y_axis(y: Any, plot_w: float) -> list[str]:
    out = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        yy = y(tick)
        out.append(
            f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + plot_w:.1f}" y2="{yy:.1f}" '
            'stroke="#dddddd" stroke-width="1"/>'
        )
        out.append(
            f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{int(tick * 100)} %</text>'
        )
    return out


def _legend(labels: Sequence[str], x: float) -> list[str]:
    out = []
    for i, label in enumerate(labels):
        yy = TOP + 14 * i
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x:.1f}" y="{yy:.1f}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14:.1f}" y="{yy + 9:.1f}">{_t(label)}</text>')
    return out


def rate_bars_svg(rows: Iterable[Mapping[str, Any]], title: str = "Mention rate") -> str:
    """Grouped bars: one group per channel, one bar per brand, the rate with a whisker from
    ``lower`` to ``upper`` and ``n`` in the tooltip. Rows: channel, brand, rate, lower, upper,
    n (rate None: no known answer, drawn as an empty slot)."""
    data = list(rows)
    channels = list(dict.fromkeys(str(r["channel"]) for r in data))
    brands = list(dict.fromkeys(str(r["brand"]) for r in data))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v)

    body = _y_axis(y, plot_w)
    group_w = plot_w / max(1, len(channels))
    bar_w = group_w * 0.8 / max(1, len(brands))
    by = {(str(r["channel"]), str(r["brand"])): r for r in data}
    for ci, channel in enumerate(channels):
        gx = LEFT + ci * group_w + group_w * 0.1
        body.append(
            f'<text x="{gx + group_w * 0.4:.1f}" y="{TOP + plot_h + 16:.1f}" '
            f'text-anchor="middle">{_t(channel)}</text>'
        )
        for bi, brand in enumerate(brands):
            r = by.get((channel, brand))
            if r is None or r.get("rate") is None:
                continue
            x = gx + bi * bar_w
            rate = float(r["rate"])
            said = rate_text(rate, r.get("lower"), r.get("upper"), r.get("n"))
            tip = f"{brand} on {channel}: {said}"
            body.append(
                f'<rect x="{x:.1f}" y="{y(rate):.1f}" width="{bar_w * 0.9:.1f}" '
                f'height="{plot_h * rate:.1f}" fill="{PALETTE[bi % len(PALETTE)]}">'
                f"<title>{_t(tip)}</title></rect>"
            )
            if r.get("lower") is not None and r.get("upper") is not None:
                cx = x + bar_w * 0.45
                lo, hi = y(float(r["lower"])), y(float(r["upper"]))
                body.append(
                    f'<path d="M{cx - 4:.1f} {hi:.1f}H{cx + 4:.1f}M{cx:.1f} {hi:.1f}V{lo:.1f}'
                    f'M{cx - 4:.1f} {lo:.1f}H{cx + 4:.1f}" stroke="#222222" stroke-width="1.2" '
                    'fill="none"/>'
                )
    body += _legend(brands, WIDTH - RIGHT + 12)
    body.append(
        f'<text x="{LEFT}" y="{HEIGHT - 8}" fill="#555555">Whiskers: 95 % interval '
        "(question-clustered where several questions are pooled)</text>"
    )
    return _frame(title, body)


TREND_HEIGHT = 340
TREND_BOTTOM = 96  # x labels, the flag legend and the caption sit under the plot
# The two comparisons of analytics.brand_changes, as the row key of trend_svg, the marker's
# class and the legend's words.
FLAG_KINDS = (
    ("flagged", "flag-day-over-day", "change vs the previous day"),
    ("flagged_7d", "flag-rolling-7d", "last 7 days vs the 7 before"),
)


def _flag_marker(kind: str, cx: float, cy: float, tip: str = "", legend: bool = False) -> str:
    """A red ring (day over day) or a red square (rolling 7 days) round a point: drawn in
    outline so the point and its colour stay visible inside it. The legend's own markers carry
    the class ``legend`` too, so a reader (or a test) can tell them from the data's."""
    title = f"<title>{_t(tip)}</title>" if tip else ""
    cls = f"legend {kind}" if legend else kind
    if kind == "flag-day-over-day":
        return (
            f'<circle class="{cls}" cx="{cx:.1f}" cy="{cy:.1f}" r="7" fill="none" '
            f'stroke="{FLAG}" stroke-width="2">{title}</circle>'
        )
    return (
        f'<rect class="{cls}" x="{cx - 9:.1f}" y="{cy - 9:.1f}" width="18" height="18" '
        f'fill="none" stroke="{FLAG}" stroke-width="1.5">{title}</rect>'
    )


def trend_svg(
    rows: Iterable[Mapping[str, Any]],
    title: str = "Mention rate by day",
    fdr_q: float | None = None,
) -> str:
    """A rate over days, one line per ``series`` (e.g. the brands of one channel): x = ``day``,
    y = ``rate``, a whisker from ``lower`` to ``upper`` (the 95 % interval) at every point, and
    a red ring round a day whose day-over-day change was ``flagged``, a red square where the
    rolling 7-day comparison was (``flagged_7d``) — both Benjamini-Hochberg at ``fdr_q`` across
    the brand x channel family of the day (analytics.brand_changes). With fewer than two days
    the chart says so instead of drawing a lone point: one day is not a trend."""
    data = [r for r in rows if r.get("rate") is not None]
    series = list(dict.fromkeys(str(r["series"]) for r in data))
    days = sorted({r["day"] for r in data})
    q_text = "q = n/a" if fdr_q is None else f"q = {fdr_q:g}"

    def label(d: Any) -> str:
        return d.isoformat() if isinstance(d, date) else str(d)

    if len(days) < 2:
        said = (
            f"Only one day of data ({label(days[0])}): a trend needs two days or more."
            if days
            else "No day with data yet: nothing to trend."
        )
        body = [f'<text x="{LEFT}" y="44" fill="#555555">{_t(said)}</text>']
        return _frame(title, body, height=60, desc=said)

    plot_w, plot_h = WIDTH - LEFT - RIGHT, TREND_HEIGHT - TOP - TREND_BOTTOM
    # Several brands on one day would hide each other's whiskers: shift each series a little.
    step_w = plot_w / (len(days) - 1)
    dodge = min(6.0, step_w / (len(series) + 1))

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v)

    def x(d: Any, si: int) -> float:
        return LEFT + step_w * days.index(d) + dodge * (si - (len(series) - 1) / 2)

    body = _y_axis(y, plot_w)
    every = max(1, -(-len(days) // 8))  # at most 8 day labels
    for i, d in enumerate(days[::every]):
        body.append(
            f'<text x="{LEFT + step_w * i * every:.1f}" y="{TOP + plot_h + 16:.1f}" '
            f'text-anchor="middle">{_t(label(d))}</text>'
        )
    flagged_points = {kind: 0 for _, kind, _ in FLAG_KINDS}
    for si, name in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        points = sorted((r for r in data if str(r["series"]) == name), key=lambda r: r["day"])
        line = " ".join(f"{x(r['day'], si):.1f},{y(float(r['rate'])):.1f}" for r in points)
        body.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        for r in points:
            px, py = x(r["day"], si), y(float(r["rate"]))
            has_bounds = r.get("lower") is not None and r.get("upper") is not None
            if has_bounds:
                lo, hi = y(float(r["lower"])), y(float(r["upper"]))
                body.append(
                    f'<path class="interval" d="M{px - 3:.1f} {hi:.1f}H{px + 3:.1f}'
                    f'M{px:.1f} {hi:.1f}V{lo:.1f}M{px - 3:.1f} {lo:.1f}H{px + 3:.1f}" '
                    f'stroke="{colour}" stroke-width="1" fill="none"/>'
                )
            interval = (
                f" [{_pct(float(r['lower']))}, {_pct(float(r['upper']))}]" if has_bounds else ""
            )
            flags = [(kind, words) for key, kind, words in FLAG_KINDS if r.get(key)]
            tip = f"{name}, {label(r['day'])}: {_pct(float(r['rate']))}{interval}" + "".join(
                f"; {words}: change flagged ({q_text})" for _, words in flags
            )
            body.append(
                f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
                f"<title>{_t(tip)}</title></circle>"
            )
            for kind, words in flags:
                flagged_points[kind] += 1
                body.append(
                    _flag_marker(kind, px, py, f"{name}, {label(r['day'])}: {words} flagged")
                )
    body += _legend(series, WIDTH - RIGHT + 12)
    legend_y = TOP + plot_h + 40
    lx = float(LEFT)
    for _, kind, words in FLAG_KINDS:
        body.append(_flag_marker(kind, lx + 8, legend_y - 4, legend=True))
        body.append(f'<text x="{lx + 22:.1f}" y="{legend_y:.1f}">{_t(words)}</text>')
        lx += 240
    caption = (
        "Bars: 95 % interval clustered by question.",
        f"Red marks: change flagged by Benjamini-Hochberg at {q_text} "
        "across every brand x channel tested that day.",
    )
    for i, line in enumerate(caption):
        body.append(
            f'<text x="{LEFT}" y="{legend_y + 22 + 14 * i:.1f}" fill="#555555">{_t(line)}</text>'
        )
    desc = (
        f"{title}: {len(series)} series over {len(days)} days, "
        f"{label(days[0])} to {label(days[-1])}; "
        f"{flagged_points['flag-day-over-day']} day-over-day and "
        f"{flagged_points['flag-rolling-7d']} rolling 7-day changes flagged. {' '.join(caption)}"
    )
    return _frame(title, body, height=TREND_HEIGHT, desc=desc)


def trend_charts(
    rows: Iterable[Mapping[str, Any]], fdr_q: float | None = None
) -> list[tuple[str, str]]:
    """One trend chart per channel, a line per brand: (channel, SVG). Rows as
    ``analytics.brand_trends`` has them: channel, brand, scheduled_for, mention_rate,
    mention_rate_lower/upper, flagged_day_over_day, flagged_rolling_7d."""
    by_channel: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_channel.setdefault(str(r["channel"]), []).append(
            {
                "series": r["brand"],
                "day": r["scheduled_for"],
                "rate": r.get("mention_rate"),
                "lower": r.get("mention_rate_lower"),
                "upper": r.get("mention_rate_upper"),
                "flagged": r.get("flagged_day_over_day"),
                "flagged_7d": r.get("flagged_rolling_7d"),
            }
        )
    return [
        (channel, trend_svg(points, title=f"Mention rate by day on {channel}", fdr_q=fdr_q))
        for channel, points in by_channel.items()
    ]
