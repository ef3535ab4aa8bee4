"""``geo-pipeline dagster charts`` (geo_pipeline/ops/chart_server.py): a stored chart comes back
byte for byte as an SVG image that may not run scripts; anything else is 404; an object whose
bytes no longer hash to its name is refused, never served."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from geo_pipeline.defs.charts import ChartUrlError, chart_url
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.evidence.charts import chart_key, store_chart
from geo_pipeline.ops.chart_server import serve

SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><title>t</title></svg>'


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_a_stored_chart_is_served_as_an_svg_image_and_nothing_else_is(tmp_path):
    archive = LocalArchive(tmp_path / "evidence")
    digest = store_chart(archive, SVG)
    assert store_chart(archive, SVG) == digest  # content-addressed: the same chart once
    server = serve(archive, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        status, headers, body = get(chart_url(base, digest))
        assert status == 200 and body == SVG.encode()
        assert headers["Content-Type"] == "image/svg+xml"
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        for path in ("/", "/charts/../secret", f"/{chart_key(digest)}x", "/charts/abc.svg"):
            assert get(base + path)[0] == 404, path
        assert get(chart_url(base, "0" * 64))[0] == 404  # well-formed, not stored
        # Altered after it was stored: refused, not served.
        (tmp_path / "evidence" / chart_key(digest)).write_bytes(b"<svg><script/></svg>")
        status, _, body = get(chart_url(base, digest))
        assert status == 500 and b"script" not in body
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "base", ["javascript:alert(1)", "http://x/a b", "http://x/)", "http://x/?q=1", "ftp://x", ""]
)
def test_a_chart_url_that_would_break_the_markdown_link_is_refused(base):
    with pytest.raises(ChartUrlError, match="GEO_CHART_URL"):
        chart_url(base, "a" * 64)
