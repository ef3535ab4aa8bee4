"""The HTTP endpoint every long-running process exposes (R26, D11): ``/metrics`` in the
Prometheus text format and ``/healthz`` for liveness and readiness probes.

``/healthz`` answers 200 with a small JSON body while every registered check passes and 503
(with the failing checks named) otherwise. A loop that must keep turning calls
``beat("name", stale_after_s)`` each iteration; when it stops beating for longer than that, the
probe fails and the orchestrator restarts the process. Nothing in the body is a credential or an
answer (D2): names, booleans and ages only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

_STARTED = time.time()
_lock = threading.Lock()
_checks: dict[str, Callable[[], bool]] = {}
_beats: dict[str, tuple[float, float]] = {}  # name -> (last beat, stale after seconds)


def register_check(name: str, check: Callable[[], bool]) -> None:
    """Add a readiness check (e.g. "database reachable"); it must be quick and never raise."""
    with _lock:
        _checks[name] = check


def beat(name: str, stale_after_s: float = 60.0) -> None:
    """Record that the loop ``name`` is alive; the probe fails if it goes quiet too long."""
    with _lock:
        _beats[name] = (time.monotonic(), stale_after_s)


def health() -> tuple[bool, dict[str, Any]]:
    """(healthy, body) of the current process."""
    now = time.monotonic()
    results: dict[str, bool] = {}
    with _lock:
        checks = dict(_checks)
        beats = dict(_beats)
    for name, check in checks.items():
        try:
            results[name] = bool(check())
        except Exception:
            results[name] = False
    ages = {name: round(now - at, 3) for name, (at, _) in beats.items()}
    for name, (at, stale) in beats.items():
        results[f"beat:{name}"] = now - at <= stale
    ok = all(results.values())
    body = {
        "status": "ok" if ok else "failing",
        "uptime_s": round(time.time() - _STARTED, 3),
        "checks": results,
        "beat_age_s": ages,
    }
    return ok, body


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            payload = generate_latest(REGISTRY)
            self._send(200, CONTENT_TYPE_LATEST, payload)
        elif path in ("/healthz", "/livez", "/readyz"):
            ok, body = health()
            self._send(200 if ok else 503, "application/json", json.dumps(body).encode())
        else:
            self._send(404, "text/plain", b"not found: try /metrics or /healthz\n")

    def _send(self, code: int, ctype: str, payload: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        # Probes every few seconds would flood the JSON logs (D6); requests are not events.
        return


def start_server(port: int, addr: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve /metrics and /healthz on a daemon thread; returns the server (``.server_port`` is
    the bound port when ``port`` is 0)."""
    server = ThreadingHTTPServer((addr, port), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="geo-metrics", daemon=True)
    thread.start()
    return server
