"""``geo-pipeline dagster charts``: serves the charts brand_visibility stored in the evidence
archive (``charts/<sha256>.svg``, geo_pipeline/defs/charts.py) at ``/charts/<sha256>.svg``, so
the Dagster UI shows them in place. GET only; any other path is 404; an object whose bytes do
not hash to its name is refused (500), never served.

The SVGs are drawn by geo_pipeline.analysis.charts with every text escaped; the response still
forbids scripts and outside loads (``Content-Security-Policy``) for a person who opens one on its
own, and ``nosniff`` keeps it an image."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from geo_pipeline.evidence.archive import ArchiveError, ObjectMissing
from geo_pipeline.evidence.charts import SVG_MEDIA_TYPE, chart_key, digest_of_key

HEADERS = {
    "Content-Type": SVG_MEDIA_TYPE,
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    # The address is the content: the same URL is always the same bytes.
    "Cache-Control": "public, max-age=31536000, immutable",
}


def make_handler(archive: Any) -> type[BaseHTTPRequestHandler]:
    class ChartHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            digest = digest_of_key(self.path.split("?", 1)[0].lstrip("/"))
            if digest is None:
                self._plain(404, "not a chart: /charts/<sha256>.svg\n")
                return
            try:
                body = archive.get(chart_key(digest), sha256=digest)
            except ObjectMissing:
                self._plain(404, "no such chart\n")
                return
            except ArchiveError as exc:  # unreachable storage, or bytes that are not the name's
                self._plain(500, f"{type(exc).__name__}\n")
                return
            self.send_response(200)
            for k, v in HEADERS.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _plain(self, code: int, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per image load would drown dev's log

    return ChartHandler


def serve(archive: Any, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; the server's ``server_port`` is the bound port."""
    server = ThreadingHTTPServer((host, port), make_handler(archive))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="chart-server", daemon=True).start()
    return server
