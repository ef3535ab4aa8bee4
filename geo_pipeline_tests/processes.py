"""What a test says when a process it started did not do what it expected: both of its streams.

A command of the CLI writes its JSON (and its JSON error) to stdout and its log lines to stderr;
a failure message with only one of them can be empty while the cause sits in the other (issue 30:
the demo's ``{"error": "No such file or directory: useradd"}`` was on stdout, the test printed
stderr).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
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
