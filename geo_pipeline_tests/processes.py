"""What a test says when a process it started did not do what it expected: both of its streams.

A command of the CLI writes its JSON (and its JSON error) to stdout and its log lines to stderr;
a failure message with only one of them can be empty while the cause sits in the other (issue 30:
the demo's ``{"error": "No such file or directory: useradd"}`` was on stdout, the test printed
stderr).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TAIL = 3000  # characters of each stream: the end is where a failure says what happened


def _text(stream: str | bytes | None) -> str:
    if stream is None:
        return "(not captured)"
    if isinstance(stream, bytes):
        stream = stream.decode("utf-8", "replace")
    return stream[-TAIL:] if stream else "(empty)"


def streams(stdout: str | bytes | None, stderr: str | bytes | None) -> str:
    return f"--- stdout ---\n{_text(stdout)}\n--- stderr ---\n{_text(stderr)}"


def outcome(proc: subprocess.CompletedProcess[Any]) -> str:
    """The exit status, the command and both streams of a finished process."""
    args = proc.args if isinstance(proc.args, str) else " ".join(map(str, proc.args))
    return f"exit {proc.returncode}: {args}\n{streams(proc.stdout, proc.stderr)}"


def run_ok(cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` that captures both streams and fails the test with both of them (a
    ``check=True`` failure shows neither)."""
    kwargs.setdefault("capture_output", True)
    proc = subprocess.run(list(cmd), check=False, **kwargs)
    assert proc.returncode == 0, outcome(proc)
    return proc


# --------------------------------------------------------------------------- waiting on progress
def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a live process has used (Linux /proc); None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def wait_progressing(
    done: Callable[[], bool],
    proc: subprocess.Popen[Any],
    *,
    what: str,
    files: Sequence[Path] = (),
    stall_s: float = 60.0,
    cap_s: float = 1800.0,
    poll_s: float = 0.05,
    describe: Callable[[], str] = lambda: "",
) -> None:
    """Wait until ``done()``, for as long as ``proc`` makes progress: it uses CPU or one of
    ``files`` (its logs) grows. A loaded machine only slows it down, so no wall-clock bound
    applies to a process that moves; one that used no CPU and wrote nothing for ``stall_s`` is
    hung (a process starved by other work still gets CPU slices), and fails the test with
    ``describe()``. ``cap_s`` is only a safety net against one that moves forever.
    ``done()`` is checked before the process's exit, so "it exited" can be what is waited for."""
    started = time.monotonic()
    last_move = started
    seen: tuple[float | None, tuple[int, ...]] = (cpu_seconds(proc.pid), tuple(map(_size, files)))
    while not done():
        now = time.monotonic()
        if proc.poll() is not None:
            if done():
                return
            raise AssertionError(f"{what}: the process exited {proc.returncode}\n{describe()}")
        mark = (cpu_seconds(proc.pid), tuple(map(_size, files)))
        if mark != seen:
            seen, last_move = mark, now
        elif now - last_move > stall_s:
            raise AssertionError(
                f"{what}: no progress for {stall_s:g} s (no CPU used, nothing written; "
                f"{now - started:.1f} s in all)\n{describe()}"
            )
        if now - started > cap_s:
            raise AssertionError(f"{what}: still moving after {cap_s:g} s\n{describe()}")
        time.sleep(poll_s)


@contextmanager
def closed_port() -> Iterator[socket.socket]:
    """A socket bound to a port of 127.0.0.1 and not listening: a connection to the port is
    refused, and nobody else can bind the port while it is held. A port found free and closed
    again is no such thing: under pytest-xdist another test can take it before it is used (a
    "dead" Redis URL then reaches someone's server; a port meant for a child process is in use
    when the child binds it). ``sock.listen()`` makes the port answer later, race-free."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        yield sock
    finally:
        sock.close()
