"""The demo's process supervisor: readiness from this start's output only, clean stop of
everything it started (SIGTERM, then SIGKILL for a process that ignores it)."""

from __future__ import annotations

import sys

import pytest

from geo_pipeline.ops.supervisor import ProcessFailed, Supervisor

PY = sys.executable


def test_ready_line_of_a_previous_start_is_not_taken_for_this_one(tmp_path):
    with Supervisor(tmp_path, grace_s=5) as sup:
        first = sup.start("svc", [PY, "-c", "print('ready 1', flush=True)"])
        assert sup.wait_for_line(first, lambda s: s.startswith("ready"), 10) == "ready 1"
        first.proc.wait(5)
        second = sup.start(
            "svc", [PY, "-c", "import time; time.sleep(0.3); print('ready 2', flush=True)"]
        )
        assert sup.wait_for_line(second, lambda s: s.startswith("ready"), 10) == "ready 2"


def test_stop_all_terminates_and_kills_stubborn_children(tmp_path):
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    with Supervisor(tmp_path, grace_s=1) as sup:
        polite = sup.start(
            "polite", [PY, "-c", "print('up', flush=True); import time; time.sleep(60)"]
        )
        rude = sup.start("rude", [PY, "-c", stubborn])
        for c in (polite, rude):
            sup.wait_for_line(c, lambda s: s == "up", 10)
        codes = sup.stop_all()
    assert codes == {"rude": -9, "polite": -15}
    assert polite.proc.poll() is not None and rude.proc.poll() is not None


def test_a_child_that_dies_is_reported_with_its_log(tmp_path):
    with Supervisor(tmp_path, grace_s=1) as sup:
        c = sup.start("crash", [PY, "-c", "import sys; print('boom: bad config'); sys.exit(3)"])
        c.proc.wait(5)
        with pytest.raises(
            ProcessFailed, match=r"(?s)crash .* exited with code 3.*boom: bad config"
        ):
            sup.check()


def test_helpers_a_child_started_are_stopped_with_it(tmp_path):
    import os

    spawn = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    with Supervisor(tmp_path, grace_s=2) as sup:
        parent = sup.start("parent", [PY, "-c", spawn])
        helper_pid = int(sup.wait_for_line(parent, str.isdigit, 10))
    for _ in range(50):
        try:
            os.kill(helper_pid, 0)
        except ProcessLookupError:
            break
        import time

        time.sleep(0.1)
    else:
        pytest.fail(f"helper {helper_pid} outlived the supervisor")
