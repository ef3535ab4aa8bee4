"""brand_visibility shows the report's charts in Dagster: the mention rate per brand with its
95 % interval, and for a monitor's run the trend over days, as Markdown images whose source is
a ``data:image/svg+xml;base64`` URI (Dagster's way to put an image in asset metadata)."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from datetime import date
from typing import Any

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.analysis.assets import brand_analysis, brand_visibility
from geo_pipeline.defs.analysis.metadata import NO_TREND
from geo_pipeline.defs.charts import INLINE_MARKDOWN_LIMIT, md_linked_image
from geo_pipeline.defs.collection.assets import collection_results
from geo_pipeline.defs.evidence.assets import validated_evidence
from geo_pipeline.defs.markdown import md_svg_image
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.resources import PipelineSettingsResource
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.evidence.charts import chart_key
from geo_pipeline_tests.dagster.conftest import collection_config, create_run, finish
from geo_pipeline_tests.dagster.test_assets import materialise, metadata

WEB = "deepseek__web"
SVG = "{http://www.w3.org/2000/svg}"
IMAGE = re.compile(
    r"!\[(?P<alt>(?:[^\]\\]|\\.)*)\]\(data:image/svg\+xml;base64,(?P<b64>[A-Za-z0-9+/=]+)\)"
)


def image_svg(markdown: str) -> tuple[str, ET.Element]:
    """The alt text and the parsed SVG of a Markdown image that is the whole value."""
    match = IMAGE.fullmatch(markdown)
    assert match, markdown[:200]
    svg = base64.b64decode(match["b64"], validate=True).decode("utf-8")
    assert svg.startswith("<svg ")
    root = ET.fromstring(svg)  # well-formed or it raises
    assert root.tag == f"{SVG}svg"
    return match["alt"], root


def visibility(conn: Any, instance: dg.DagsterInstance, resources: dict[str, Any], run_id: str):
    finish(conn, run_id, WEB)
    result = materialise(
        [collection_results, validated_evidence, brand_analysis, brand_visibility],
        partition_key(run_id, WEB),
        instance,
        resources,
    )
    assert result.success
    return metadata(result, names.BRAND_VISIBILITY)


def test_visibility_metadata_carries_the_mention_rate_chart(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    vis = visibility(conn, dg_instance, resources, create_run(conn, dg_instance))
    brands = {r.data["brand"] for r in vis["visibility_table"].records}
    assert brands == {"Acme", "Globex"}
    alt, root = image_svg(vis["mention_rate_chart"])
    assert alt and WEB.split("__")[0] in alt
    text = "".join(root.itertext())
    for brand in brands:
        assert brand in text, brand
    # One bar per brand with an analysed answer, its tooltip naming the brand and the channel.
    bars = [el for el in root.iter(f"{SVG}rect") if el.find(f"{SVG}title") is not None]
    assert {el.find(f"{SVG}title").text.split(" on ")[0] for el in bars} == brands  # type: ignore[union-attr]
    # A run outside a monitor has no trend; the metadata says why instead of nothing.
    assert vis["mention_rate_trend_chart"] == NO_TREND


def test_a_monitors_run_also_carries_its_trend_chart(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(
        conn,
        dg_instance,
        config=collection_config(monitor="m-vis-chart"),
        run_id="m-vis-chart-20261101",
        scheduled_for=date(2026, 11, 1),
    )
    vis = visibility(conn, dg_instance, resources, run_id)
    assert "mention_rate_chart" in vis
    _, root = image_svg(vis["mention_rate_trend_chart"])
    assert root.find(f"{SVG}title").text == f"Mention rate by day on {WEB}"  # type: ignore[union-attr]
    # One day of the monitor so far: the chart says so instead of drawing a lone point.
    assert "Only one day of data (2026-11-01)" in "".join(root.itertext())


def test_the_image_alt_text_is_markdown_escaped():
    md = md_svg_image('<svg xmlns="http://www.w3.org/2000/svg"/>', "a](javascript:x) *b*\nc")
    alt, root = image_svg(md)
    # Escaped: the brackets do not end the alt text (the whole value is one image), no emphasis,
    # and the line break (which would end the image) is a space.
    assert alt == r"a\]\(javascript\:x\) \*b\* c"
    assert root.tag == f"{SVG}svg"


# --------------------------------------------------------------------------- served charts
LINKED = re.compile(
    r"!\[(?P<alt>(?:[^\]\\]|\\.)*)\]\((?P<base>http://charts\.test:3001)/charts/"
    r"(?P<digest>[0-9a-f]{64})\.svg\)"
)


def test_with_a_chart_url_the_charts_are_stored_and_linked_short_enough_to_render_in_place(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], evidence_dir: Any
) -> None:
    """Dagster 1.13 shows Markdown metadata in place only under 1,000 characters; a data: URI
    chart is kilobytes, so it was always behind "[Show Markdown]" (issue 36)."""
    import hashlib

    resources = {
        **resources,
        "settings": PipelineSettingsResource(chart_url="http://charts.test:3001/"),
    }
    run_id = create_run(
        conn,
        dg_instance,
        config=collection_config(monitor="m-vis-linked"),
        run_id="m-vis-linked-20261102",
        scheduled_for=date(2026, 11, 2),
    )
    vis = visibility(conn, dg_instance, resources, run_id)
    archive = LocalArchive(evidence_dir)
    for name in ("mention_rate_chart", "mention_rate_trend_chart"):
        md = vis[name]
        assert len(md) < INLINE_MARKDOWN_LIMIT, (name, len(md))
        match = LINKED.fullmatch(md)
        assert match, md
        body = archive.get(chart_key(match["digest"]), sha256=match["digest"])
        assert hashlib.sha256(body).hexdigest() == match["digest"]
        root = ET.fromstring(body.decode("utf-8"))
        assert root.tag == f"{SVG}svg"
    assert "Mention rate by day" in "".join(
        ET.fromstring(
            archive.get(chart_key(LINKED.fullmatch(vis["mention_rate_trend_chart"])["digest"]))  # type: ignore[index]
        ).itertext()
    )


def test_a_linked_chart_alt_text_is_escaped_and_kept_under_the_inline_limit():
    url = "http://127.0.0.1:3001/charts/" + "a" * 64 + ".svg"
    md = md_linked_image(url, "x](javascript:y) " + "品牌" * 2000)
    assert len(md) < INLINE_MARKDOWN_LIMIT
    assert md.startswith(r"![x\]\(javascript\:y\) ") and md.endswith(f"]({url})")
