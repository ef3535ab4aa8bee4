"""The processes' JSON logs (D6) are batched, but never held back for long: a quiet process
still shows its last lines within a second, not after 64 of them."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from geo_pipeline.observability import logs


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for h in root.handlers:
        h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def _wait_for(buf: io.StringIO, bound_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if buf.getvalue():
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def test_a_lone_info_line_is_written_within_a_second(restore_root):
    buf = io.StringIO()
    logs.configure(stream=buf)
    logs.event(logging.getLogger("geo_pipeline.test"), "sample.completed", sample_id="s1")
    waited = _wait_for(buf, 1.5)
    assert waited is not None and waited <= 1.1, "the log line stayed in the buffer"
    line = json.loads(buf.getvalue().splitlines()[0])
    assert line["event"] == "sample.completed" and line["sample_id"] == "s1"


def test_lines_are_still_batched_by_size(restore_root):
    buf = io.StringIO()
    logs.configure(stream=buf, buffer_lines=4, flush_s=60.0)
    log = logging.getLogger("geo_pipeline.test")
    for i in range(3):
        log.info("e%d", i)
    assert buf.getvalue() == ""  # below the size and the time bound: still batched
    log.info("e3")
    assert len(buf.getvalue().splitlines()) == 4
