"""The demo's process supervisor: readiness from this start's output only, clean stop of
everything it started (SIGTERM, then SIGKILL for a process that ignores it)."""

from __future__ import annotations

import sys

import pytest

from geo_pipeline.ops.supervisor import ProcessFailed, Restart, Supervisor

PY = sys.executable
# A hang guard for a `python -c` child's first line, not its speed: wait_for_line returns as soon
# as the line is there (0.3 s idle; `python -m geo_pipeline.cli.main relay --help` took 5.4-6.2 s
# beside stress --cpu 8, load 6-10, against 0.3 s idle, so 10 s was within reach of a busy box).
READY_S = 120.0


def test_ready_line_of_a_previous_start_is_not_taken_for_this_one(tmp_path):
    with Supervisor(tmp_path, grace_s=5) as sup:
        first = sup.start("svc", [PY, "-c", "print('ready 1', flush=True)"])
        assert sup.wait_for_line(first, lambda s: s.startswith("ready"), READY_S) == "ready 1"
        first.proc.wait(READY_S)
        second = sup.start(
            "svc", [PY, "-c", "import time; time.sleep(0.3); print('ready 2', flush=True)"]
        )
        assert sup.wait_for_line(second, lambda s: s.startswith("ready"), READY_S) == "ready 2"


def test_stop_all_terminates_and_kills_stubborn_children(tmp_path):
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    # The grace must outlast the polite child's own exit: SIGTERM's default action still needs
    # the child scheduled to die, and with grace_s=1 a CI run at load ~10 saw it killed at the
    # deadline ({'polite': -9}). 10 s costs the test 10 s (the rude child waits it out).
    with Supervisor(tmp_path, grace_s=10) as sup:
        polite = sup.start(
            "polite", [PY, "-c", "print('up', flush=True); import time; time.sleep(60)"]
        )
        rude = sup.start("rude", [PY, "-c", stubborn])
        for c in (polite, rude):
            sup.wait_for_line(c, lambda s: s == "up", READY_S)
        codes = sup.stop_all()
    assert codes == {"rude": -9, "polite": -15}
    assert polite.proc.poll() is not None and rude.proc.poll() is not None


def test_a_child_that_dies_is_reported_with_its_log(tmp_path):
    with Supervisor(tmp_path, grace_s=1) as sup:
        c = sup.start("crash", [PY, "-c", "import sys; print('boom: bad config'); sys.exit(3)"])
        c.proc.wait(READY_S)  # its whole start-up and exit: a hang guard
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
        helper_pid = int(sup.wait_for_line(parent, str.isdigit, READY_S))
    import time

    # Killed by a signal, then reaped: the kernel's work, but a starved reaper may take more than
    # the 5 s this loop once allowed. A generous bound; the loop ends as soon as it is gone.
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            os.kill(helper_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"helper {helper_pid} outlived the supervisor")


# --------------------------------------------------------------------------- restart (dev)
SLEEPER = [PY, "-c", "import time; print('up', flush=True); time.sleep(600)"]


def wait_for_restart(sup: Supervisor, name: str, old_pid: int, policy: Restart) -> None:
    """Drive the supervisor until ``name`` runs under a new pid. The bound is generous and comes
    from the policy (the longest back-off it may wait, many times over), never from timing."""
    import time

    deadline = time.monotonic() + 20 * policy.max_s + 30
    while time.monotonic() < deadline:
        sup.poll()
        if sup.child(name).pid != old_pid and sup.child(name).alive():
            return
        time.sleep(0.02)
    pytest.fail(f"{name} was not restarted; supervisor log:\n{supervisor_log(sup)}")


def supervisor_log(sup: Supervisor) -> str:
    path = sup.log_dir / "supervisor.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_a_killed_child_is_restarted_and_the_others_keep_running(tmp_path):
    import os
    import signal

    policy = Restart(initial_s=0.05, max_s=0.4)
    with Supervisor(tmp_path, grace_s=2) as sup:
        webserver = sup.start("dagster-webserver", SLEEPER, restart=policy)
        worker1 = sup.start("worker-1", SLEEPER, restart=policy)
        worker2 = sup.start("worker-2", SLEEPER, restart=policy)
        for c in (webserver, worker1, worker2):
            sup.wait_for_line(c, lambda s: s == "up", READY_S)
        os.kill(worker1.pid, signal.SIGKILL)
        wait_for_restart(sup, "worker-1", worker1.pid, policy)
        # The others were never touched: same processes, still running.
        assert sup.child("dagster-webserver").pid == webserver.pid and webserver.alive()
        assert sup.child("worker-2").pid == worker2.pid and worker2.alive()
        new = sup.child("worker-1")
        log = supervisor_log(sup)
        assert f"worker-1 (pid {worker1.pid}) exited with code -9" in log, log
        assert f"worker-1 restarted as pid {new.pid}" in log, log
        # The restarted process is a real start of the same command, with the same log file.
        sup.wait_for_line(new, lambda s: s == "up", READY_S)
        assert new.argv == worker1.argv and new.log_path == worker1.log_path


def test_restarts_back_off_exponentially_up_to_the_bound(tmp_path):
    import re

    policy = Restart(initial_s=0.01, factor=2.0, max_s=0.04)
    crash = [PY, "-c", "import sys; sys.exit(7)"]
    with Supervisor(tmp_path, grace_s=2) as sup:
        sup.start("sweeper", crash, restart=policy)
        import time

        deadline = time.monotonic() + 20 * policy.max_s * 6 + 60
        while time.monotonic() < deadline and supervisor_log(sup).count("restarted as") < 5:
            sup.poll()
            time.sleep(0.005)
        log = supervisor_log(sup)
    delays = [float(d) for d in re.findall(r"exited with code 7; restarting in ([0-9.]+)s", log)]
    assert delays[:5] == [0.01, 0.02, 0.04, 0.04, 0.04], log


def test_a_child_without_a_restart_policy_still_fails_the_supervisor(tmp_path):
    with Supervisor(tmp_path, grace_s=1) as sup:
        c = sup.start("crash", [PY, "-c", "import sys; sys.exit(3)"])
        c.proc.wait(READY_S)  # its whole start-up and exit: a hang guard
        with pytest.raises(ProcessFailed, match=r"crash .* exited with code 3"):
            sup.poll()


def test_a_gone_child_s_number_given_to_another_process_is_not_signalled(tmp_path):
    """Pids are reused (32,768 of them go round in minutes on a busy CI box), and every child
    is a session leader, so its group id is its pid. A child that exited long ago must not have
    its number signalled as a group at the end: a CI run saw another test's child killed
    ({'polite': -9}). The reuse is made here by giving the gone child's record the number of a
    process started after it was seen gone, as the kernel would."""
    import signal
    import subprocess

    from geo_pipeline.ops import supervisor as sv

    def uptime() -> str:
        with open("/proc/uptime", encoding="ascii") as fh:
            return fh.read().split()[0]

    innocent = None
    try:
        with Supervisor(tmp_path, grace_s=5) as sup:
            gone = sup.start("gone", [PY, "-c", "print('up', flush=True)"])
            gone.proc.wait(READY_S)
            assert not gone.alive()  # seen gone now
            seen = uptime()
            while uptime() == seen:  # the next clock tick: the other process starts after
                pass
            innocent = subprocess.Popen(
                [PY, "-c", "import time; time.sleep(60)"],
                start_new_session=True,
                preexec_fn=sv.default_stop_signals,  # SIGTERM kills it whatever pytest has
            )
            gone.proc.pid = innocent.pid  # the kernel gave its number to a new session leader
        # Whatever the supervisor sent it has been sent: now ours. A SIGKILL from the supervisor
        # would show as -9; a process it left alone dies of this SIGTERM.
        innocent.terminate()
        assert innocent.wait(READY_S) == -signal.SIGTERM
    finally:
        if innocent is not None and innocent.poll() is None:
            innocent.kill()
            innocent.wait(READY_S)


def test_children_stop_on_sigterm_even_when_the_supervisor_ignores_or_blocks_it(tmp_path):
    """An ignored signal and the blocked mask survive fork and exec: a supervisor whose own
    process ignores or blocks SIGTERM (a CI run's pytest worker did, by the time the stop test
    ran: its polite child was SIGKILLed at the end of the grace, twice) must still start
    children that SIGTERM stops, so they can hand back what they hold."""
    import signal

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        with Supervisor(tmp_path, grace_s=30) as sup:
            polite = sup.start(
                "polite", [PY, "-c", "print('up', flush=True); import time; time.sleep(60)"]
            )
            sup.wait_for_line(polite, lambda s: s == "up", READY_S)
            codes = sup.stop_all()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        signal.signal(signal.SIGTERM, previous)
    assert codes == {"polite": -signal.SIGTERM}
