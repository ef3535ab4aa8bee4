"""The /metrics + /healthz endpoint of every long-running process (R26, D11)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from geo_pipeline.observability import health
from geo_pipeline.observability.metrics import PROCESSED


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_metrics_and_health_are_served_and_a_stale_loop_fails_the_probe():
    server = health.start_server(0)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        PROCESSED.labels("healthtest", "completed").inc()
        code, body = _get(base + "/metrics")
        assert code == 200
        assert b'geo_samples_processed_total{outcome="completed",platform="healthtest"}' in body
        assert b"geo_stream_pending_entries" in body or b"geo_queue_wait_seconds" in body

        # A fresh beat passes. Its bound is generous: a loaded box may serve the request more
        # than 0.2 s after the beat (with stale_after_s=0.2 here the probe read it as stale).
        health.beat("healthtest-loop", stale_after_s=60)
        code, body = _get(base + "/healthz")
        data = json.loads(body)
        assert code == 200 and data["status"] == "ok"
        assert data["checks"]["beat:healthtest-loop"] is True
        # A beat older than its bound fails the probe (sleeping longer only makes it older).
        health.beat("healthtest-loop", stale_after_s=0.2)
        time.sleep(0.3)
        code, body = _get(base + "/healthz")
        assert code == 503 and json.loads(body)["checks"]["beat:healthtest-loop"] is False
        health.beat("healthtest-loop", stale_after_s=60)
        health.register_check("healthtest-broken", lambda: 1 / 0 == 0)
        code, body = _get(base + "/healthz")
        assert code == 503 and json.loads(body)["checks"]["healthtest-broken"] is False
        assert _get(base + "/nope")[0] == 404
    finally:
        with health._lock:
            health._checks.pop("healthtest-broken", None)
            health._beats.pop("healthtest-loop", None)
        server.shutdown()
        server.server_close()
