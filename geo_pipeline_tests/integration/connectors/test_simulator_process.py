"""``geo-pipeline simulator`` as a process, like every other one (issue 30: its log stayed
empty, it wrote to stdout only and died on SIGTERM without a word): JSON lines on stderr saying
where it listens, and on SIGTERM a stop report on stdout with what it served, exit 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from geo_pipeline_tests.processes import streams


def test_the_simulator_logs_to_stderr_and_reports_when_stopped(tmp_path: Path) -> None:
    err_path = tmp_path / "simulator.log"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "geo_pipeline.cli.main", "simulator", "--port", "0", "--json"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            assert proc.stdout is not None
            url = json.loads(proc.stdout.readline())["url"]
            for _ in range(2):
                httpx.get(f"{url}/v1/deepseek/prices", timeout=30).raise_for_status()
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = err_path.read_text()
    assert proc.returncode == 0, streams(out, log)
    events = {}
    for line in log.splitlines():
        body = json.loads(line)  # every stderr line is a JSON log line
        events[body["event"]] = body
    assert events["simulator.listening"]["url"] == url, log
    report = json.loads(out.strip().splitlines()[-1])
    assert report["simulator"] == url and report["requests"] == 2, report
    assert report["requests_by_kind"] == {"prices": 2}, report
    assert events["simulator.stopped"]["requests"] == 2, log
