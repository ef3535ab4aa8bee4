"""Charts for the run report and the Dagster metadata: self-contained inline SVG.

No JavaScript, no external references, no ``style`` or event attributes: only SVG elements with
presentation attributes, every text escaped, so a chart passes the report's strict Content
Security Policy (``default-src 'none'``) and is safe whatever a brand or channel is called.
Two charts: a brand's mention rate per channel with its 95 % interval as a whisker (read the
question-clustered bounds, ``mention_rate_cluster_lower/upper``, where the table has them), and
a rate over days with the changes ``analytics.brand_changes`` flagged after FDR control marked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from html import escape
from typing import Any

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 48, 150, 28, 56
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
FLAG = "#d62728"


def _t(value: object) -> str:
    return escape(str(value), quote=True)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f} %"


def _frame(title: str, body: list[str], width: int = WIDTH, height: int = HEIGHT) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" '
        'font-family="sans-serif" font-size="11">'
    )
    return "".join(
        [head, f"<title>{_t(title)}</title>",
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
            tip = (
                f"{brand} on {channel}: {_pct(rate)} "
                f"[{_pct(r.get('lower'))}, {_pct(r.get('upper'))}], n = {r.get('n')}"
            )
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


def trend_svg(rows: Iterable[Mapping[str, Any]], title: str = "Mention rate by day") -> str:
    """Lines with markers: one series per ``series`` label (e.g. brand and channel), x = day,
    y = rate; a shaded band from ``lower`` to ``upper`` when given, and a red ring round every
    day whose change was ``flagged`` (Benjamini-Hochberg, see analytics.brand_changes)."""
    data = [r for r in rows if r.get("rate") is not None]
    series = list(dict.fromkeys(str(r["series"]) for r in data))
    days = sorted({r["day"] for r in data})
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v)

    def x(d: date) -> float:
        if len(days) == 1:
            return LEFT + plot_w / 2
        return LEFT + plot_w * days.index(d) / (len(days) - 1)

    body = _y_axis(y, plot_w)
    step = max(1, len(days) // 8)
    for d in days[::step]:
        body.append(
            f'<text x="{x(d):.1f}" y="{TOP + plot_h + 16:.1f}" text-anchor="middle">'
            f"{_t(d.isoformat() if isinstance(d, date) else d)}</text>"
        )
    for si, name in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        points = sorted((r for r in data if str(r["series"]) == name), key=lambda r: r["day"])
        band = [r for r in points if r.get("lower") is not None and r.get("upper") is not None]
        if len(band) >= 2:
            upper = " ".join(f"{x(r['day']):.1f},{y(float(r['upper'])):.1f}" for r in band)
            lower = " ".join(
                f"{x(r['day']):.1f},{y(float(r['lower'])):.1f}" for r in reversed(band)
            )
            body.append(
                f'<polygon points="{upper} {lower}" fill="{colour}" fill-opacity="0.15" '
                'stroke="none"/>'
            )
        line = " ".join(f"{x(r['day']):.1f},{y(float(r['rate'])):.1f}" for r in points)
        body.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        for r in points:
            px, py = x(r["day"]), y(float(r["rate"]))
            flagged = bool(r.get("flagged"))
            tip = f"{name}, {r['day']}: {_pct(float(r['rate']))}" + (
                " (change flagged)" if flagged else ""
            )
            body.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
                f"<title>{_t(tip)}</title></circle>"
            )
            if flagged:
                body.append(
                    f'<circle cx="{px:.1f}" cy="{py:.1f}" r="7" fill="none" stroke="{FLAG}" '
                    'stroke-width="2"/>'
                )
    body += _legend(series, WIDTH - RIGHT + 12)
    body.append(
        f'<text x="{LEFT}" y="{HEIGHT - 8}" fill="#555555">Red ring: change flagged at a '
        "5 % false discovery rate (brand x channel family of the day)</text>"
    )
    return _frame(title, body)
