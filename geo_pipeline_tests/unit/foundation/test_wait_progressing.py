"""The tests' wait on a process (geo_pipeline_tests/processes.py ``wait_progressing``): it waits
for as long as the process moves (uses CPU or writes its log), however slow the machine, and fails
a hung one without a wall-clock guess (issue 30: flat 30 s, then 180 s, bounds on start-up and
on a crash point)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from geo_pipeline_tests.processes import cpu_seconds, wait_progressing


def _python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def test_a_process_that_keeps_writing_is_waited_for_past_the_stall_bound(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    # 40 lines 0.1 s apart: about 4 s in all, twice the stall bound, never 2 s without a line.
    code = (
        "import sys, time\n"
        f"with open({str(log)!r}, 'a', buffering=1) as f:\n"
        "    for i in range(40):\n"
        "        f.write(f'line {i}\\n'); time.sleep(0.1)\n"
    )
    proc = _python(code)
    try:
        wait_progressing(lambda: proc.poll() is not None, proc, what="writer", files=[log],
                         stall_s=2.0)  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0
    assert len(log.read_text().splitlines()) == 40


def test_a_hung_process_fails_once_it_stops_moving(tmp_path: Path) -> None:
    proc = _python("import time; time.sleep(600)")
    try:
        with pytest.raises(AssertionError, match=r"hung one: no progress for 0\.5 s") as err:
            wait_progressing(lambda: False, proc, what="hung one", files=[tmp_path / "none"],
                             stall_s=0.5, describe=lambda: "its streams here")  # fmt: skip
        assert "its streams here" in str(err.value)
        assert proc.poll() is None  # the caller decides what to do with it
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_exits_before_it_is_done_fails_with_its_exit_code() -> None:
    proc = _python("import sys; sys.exit(3)")
    with pytest.raises(AssertionError, match="exited 3"):
        wait_progressing(lambda: False, proc, what="quitter", stall_s=60.0)
    proc.wait()


def test_cpu_seconds_counts_a_busy_process_and_none_once_it_is_gone() -> None:
    proc = _python("n = 0\nwhile True: n += 1", stdout=subprocess.DEVNULL)
    try:
        wait_progressing(lambda: (cpu_seconds(proc.pid) or 0.0) >= 0.05, proc, what="busy",
                         stall_s=60.0)  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    assert cpu_seconds(proc.pid) is None
