"""The analysis assets' metadata: per-brand plots (stable keys), the visibility table as typed
table metadata and as Markdown, and the charts as Markdown images. Pure functions of the rows."""

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import dagster as dg

from geo_pipeline.analysis.charts import rate_bars_svg, trend_charts
from geo_pipeline.defs.markdown import md_svg_image, md_text


def plain_json(value: Any) -> Any:
    """Summaries may be dataclasses or mappings; metadata wants plain JSON."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    return value


def rounded_rate(row: dict[str, Any] | None, col: str) -> float | None:
    value = row.get(col) if row else None
    return None if value is None else round(float(value), 4)


def brand_metadata_keys(brands: Iterable[str]) -> dict[str, str]:
    """A metadata key part per brand, stable from one materialisation to the next (the UI plots
    a key across materialisations): lower case, letters and digits kept (CJK included), any
    other run of characters one ``_``. Brands that would share a part all get a digest suffix,
    so no two brands plot as one and the keys do not depend on the brands' order."""
    base = {b: "_".join(re.findall(r"[^\W_]+", b.casefold())) or "brand" for b in set(brands)}
    clashes = Counter(base.values())
    return {
        b: k if clashes[k] == 1 else f"{k}_{hashlib.sha256(b.encode()).hexdigest()[:8]}"
        for b, k in base.items()
    }


# The per-brand figures the UI's "Plots" tab draws over a partition's materialisations: the
# rate and THE 95 % interval (question-clustered where pooled), as every report shows them.
PLOTTED_RATES = ("mention_rate", "mention_rate_lower", "mention_rate_upper")


def rate_plots(table: list[dict[str, Any]]) -> dict[str, dg.FloatMetadataValue]:
    """``mention_rate/<brand>`` with its 95 % bounds (question-clustered where pooled), floats;
    a brand without an analysed answer has no rate and no point (never a 0 that would read as
    "not mentioned")."""
    keys = brand_metadata_keys(str(r["brand"]) for r in table)
    out: dict[str, dg.FloatMetadataValue] = {}
    for r in table:
        for prefix in PLOTTED_RATES:
            value = rounded_rate(r, prefix)
            if value is not None:
                out[f"{prefix}/{keys[str(r['brand'])]}"] = dg.MetadataValue.float(value)
    return out


# What ``mention_rate_trend_chart`` says for a run outside a monitor (issue 36: the chart never
# appeared and nothing said why).
NO_TREND = (
    "no trend chart: this run is not one of a monitor's daily runs (a trend is drawn over a "
    "monitor's days; create one with `geo-pipeline monitors create`)"
)


def chart_metadata(
    channel: str,
    table: list[dict[str, Any]],
    trends: list[dict[str, Any]],
    fdr_q: float | None,
    image: Callable[[str, str], str] = md_svg_image,
) -> dict[str, dg.MetadataValue]:
    """The run report's charts as Markdown images (SVG, every text escaped, nothing
    executable): ``mention_rate_chart``, each brand's mention rate on the channel with its 95 %
    interval (question-clustered where pooled, as the table has it); and
    ``mention_rate_trend_chart``, for a monitor's run the channel's rates over days with the
    flagged changes marked (``trends``: this channel's rows of :func:`brand_trends`), else a
    sentence saying why there is none. ``image(svg, alt)`` makes the Markdown: a ``data:`` URI
    by default, a served chart's short link where one is configured (defs/charts.py)."""

    def bound(r: dict[str, Any], side: str) -> float | None:
        value = r.get(f"mention_rate_{side}")
        return None if value is None else float(value)

    bars = rate_bars_svg(
        (
            {
                "channel": channel,
                "brand": r["brand"],
                "rate": None if r["mention_rate"] is None else float(r["mention_rate"]),
                "lower": bound(r, "lower"),
                "upper": bound(r, "upper"),
                "n": r["n"],
            }
            for r in table
        ),
        title=f"Mention rate on {channel}",
    )
    out: dict[str, dg.MetadataValue] = {
        "mention_rate_chart": dg.MetadataValue.md(
            image(bars, f"Mention rate per brand on {channel} with 95 % intervals")
        )
    }
    if trends:
        [(_, svg)] = trend_charts(trends, fdr_q)  # one channel's rows: one chart
        out["mention_rate_trend_chart"] = dg.MetadataValue.md(
            image(svg, f"Mention rate per brand by day on {channel}, flagged changes marked")
        )
    else:
        out["mention_rate_trend_chart"] = dg.MetadataValue.text(NO_TREND)
    return out


VISIBILITY_COLUMNS = (
    ("brand", "string", "tracked brand"),
    ("target", "bool", "the monitored brand"),
    ("n", "int", "analysed valid answers"),
    ("mentions", "int", "answers mentioning the brand"),
    ("mention_rate", "float", "mentions / n"),
    ("lower_95", "float", "95 % lower bound: question-clustered where questions are pooled"),
    ("upper_95", "float", "95 % upper bound: question-clustered where questions are pooled"),
    ("interval", "string", "the method of lower_95 / upper_95"),
    ("n_effective", "float", "n / design effect"),
    ("wilson_lower", "float", "Wilson 95 % lower bound (answers as independent)"),
    ("wilson_upper", "float", "Wilson 95 % upper bound (answers as independent)"),
    ("avg_rank", "float", "average position among tracked brands"),
    ("analysing", "int", "answers still being analysed (never 'not mentioned')"),
    ("failed", "int", "samples whose collection failed: no answer, in no rate"),
)


def visibility_table_metadata(table: list[dict[str, Any]]) -> dg.TableMetadataValue:
    """The per-brand results as typed table metadata (sortable in the UI)."""
    records = [
        dg.TableRecord(
            {
                "brand": str(r["brand"]),
                "target": bool(r["is_target"]),
                "n": int(r["n"]),
                "mentions": int(r["mentions"]),
                "mention_rate": rounded_rate(r, "mention_rate"),
                "lower_95": rounded_rate(r, "mention_rate_lower"),
                "upper_95": rounded_rate(r, "mention_rate_upper"),
                "interval": str(r.get("mention_rate_interval") or ""),
                "n_effective": rounded_rate(r, "n_effective"),
                "wilson_lower": rounded_rate(r, "mention_rate_wilson_lower"),
                "wilson_upper": rounded_rate(r, "mention_rate_wilson_upper"),
                "avg_rank": rounded_rate(r, "avg_rank"),
                "analysing": int(r["analysing_samples"]),
                "failed": int(r.get("failed_samples") or 0),
            }
        )
        for r in table
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn(name, type_, description=desc)
            for name, type_, desc in VISIBILITY_COLUMNS
        ]
    )
    return dg.MetadataValue.table(records, schema=schema)


def visibility_markdown(table: list[dict[str, Any]]) -> str:
    head = (
        "| brand | target | n | mentions | mention rate (95% interval) | interval | effective n "
        "| avg rank | analysing | of which collecting | failed |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        rate = (
            f"{r['mention_rate']:.2f} ({r['mention_rate_lower']:.2f}-{r['mention_rate_upper']:.2f})"
            if r["mention_rate"] is not None and r["mention_rate_lower"] is not None
            else "-"
        )
        method = md_text(str(r.get("mention_rate_interval") or "-"))
        n_eff = f"{r['n_effective']:.1f}" if r.get("n_effective") is not None else "-"
        rank = f"{r['avg_rank']:.1f}" if r["avg_rank"] is not None else "-"
        lines.append(
            f"| {md_text(r['brand'])} | {'yes' if r['is_target'] else ''} | {r['n']} "
            f"| {r['mentions']} "
            f"| {rate} | {method} | {n_eff} | {rank} | {r['analysing_samples']} "
            f"| {r['collecting_samples']} | {r.get('failed_samples') or 0} |"
        )
    return "\n".join(lines)


def ui_api_metadata(sections: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The channel's fan-out, citation gap and UI-vs-API agreement (issue 31) as Markdown
    tables in the words of the reports (analysis.ui_api.display_rows), plus the raw rows for
    machines. One entry per section, said "none" when the channel has no rows."""
    from geo_pipeline.analysis import ui_api

    shown = ui_api.display_rows(sections)
    out: dict[str, Any] = {}
    for name, title in ui_api.SECTION_TITLES.items():
        rows = shown[name]
        if rows:
            cols = list(rows[0])
            lines = [
                "| " + " | ".join(md_text(c) for c in cols) + " |",
                "|" + "---|" * len(cols),
                *("| " + " | ".join(md_text(r[c]) for c in cols) + " |" for r in rows),
            ]
            text = f"**{title}**\n\n" + "\n".join(lines)
        else:
            text = f"**{title}**: none"
        out[name] = dg.MetadataValue.md(text + "\n\n" + md_text(ui_api.SECTION_NOTES[name]))
        out[f"{name}_rows"] = dg.MetadataValue.json(plain_json(sections[name]))
    return out
