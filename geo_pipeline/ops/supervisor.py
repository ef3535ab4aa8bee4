"""A small process supervisor for the demo and dev commands.

It starts each part of the pipeline (simulator, relay, workers, sweeper, Dagster) as its own
subprocess — the same way they run in production, one process per role, so each can be killed on
its own (D1) — writes each one's output to ``<log_dir>/<name>.log``, and stops every process it
started when the block ends, on an exception or on Ctrl-C: SIGTERM first (workers hand back what
they hold), SIGKILL after a grace period. It only ever signals the processes it started, by pid:
a child's process group is signalled as a group only while the child is unreaped (its number
cannot be anyone else's then); once it is gone, only the members of its group that started
before it was seen gone (and their children) are signalled, never a process that was given the
same number later (pids are reused: 32,768 of them on a busy box go round in minutes).

A child started with a :class:`Restart` policy (what ``geo-pipeline dev`` gives every process)
is started again when it exits, after an exponential back-off bounded by the policy; the event is
one line in ``<log_dir>/supervisor.log`` (and the ``say`` callback). A child without one fails
the supervisor (:meth:`Supervisor.poll` raises :class:`ProcessFailed`), as the demo wants: its
run cannot finish without it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from geo_pipeline.settings import environment


class ProcessFailed(RuntimeError):
    """A supervised process exited while it should be running; the message names its log."""


@dataclass(frozen=True)
class Restart:
    """Restart a child that exited: after ``initial_s``, then ``factor`` times longer after each
    crash in a row, never longer than ``max_s``. A child that ran ``stable_s`` before it exited
    starts the series again."""

    initial_s: float = 0.5
    factor: float = 2.0
    max_s: float = 30.0
    stable_s: float = 60.0

    def delay(self, crashes_in_a_row: int) -> float:
        return float(min(self.max_s, self.initial_s * self.factor ** max(0, crashes_in_a_row - 1)))


@dataclass
class Managed:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    log_offset: int = 0  # where this start's output begins in the (appended) log
    started_at: float = field(default_factory=time.monotonic)
    env: dict[str, str] = field(default_factory=dict)
    restart: Restart | None = None
    restarts: int = 0  # how many times this name was started again
    crashes_in_a_row: int = 0
    restart_due: float | None = None  # monotonic time of the next start, once it exited
    gone_at: int | None = None  # when it was first seen exited, in clock ticks since boot

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        if self.proc.poll() is None:
            return True
        self.seen_gone()
        return False

    def seen_gone(self) -> None:
        """Note when the child was first seen exited: its helpers started before that."""
        if self.gone_at is None:
            self.gone_at = _ticks_now()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Supervisor:
    """Start, watch and stop child processes. Use as a context manager."""

    def __init__(
        self,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        grace_s: float = 15.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.env = dict(env if env is not None else environment())
        self.grace_s = grace_s
        self.say = say
        self.children: list[Managed] = []
        # Children a restart replaced: helpers they started (in their process group) may still
        # run, e.g. Dagster run workers, and are stopped with everything else at the end.
        self.retired: list[Managed] = []

    def __enter__(self) -> Supervisor:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        extra_env: Mapping[str, str] | None = None,
        restart: Restart | None = None,
    ) -> Managed:
        env = dict(self.env)
        env.update(extra_env or {})
        child = self._spawn(name, list(argv), env, restart)
        self.children.append(child)
        return child

    def child(self, name: str) -> Managed:
        """The current process of ``name`` (a restart replaces it)."""
        for c in self.children:
            if c.name == name:
                return c
        raise KeyError(name)

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str], restart: Restart | None
    ) -> Managed:
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("ab")
        # Logs are appended across invocations (history helps); readiness looks only at what
        # this start wrote, never at a previous run's "ready" line.
        offset = log_file.tell()
        # A new session: Ctrl-C in the terminal reaches only us, and we stop the children in
        # order (workers first get SIGTERM and hand back their leases) instead of all at once.
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=default_stop_signals,
        )
        return Managed(name, argv, proc, log_path, log_file, offset, env=env, restart=restart)

    def check(self) -> None:
        """Raise ProcessFailed if a child without a restart policy has exited."""
        for c in self.children:
            code = c.proc.poll()
            if code is not None:
                c.seen_gone()
            if code is not None and c.restart is None:
                raise ProcessFailed(
                    f"{c.name} (pid {c.pid}) exited with code {code}; its log {c.log_path} "
                    f"ends with:\n{c.log_tail()}"
                )

    def poll(self) -> list[Managed]:
        """One round of supervision: raise ProcessFailed for an exited child without a restart
        policy; schedule the restart of one with a policy (a log line says when) and start it
        again once its back-off has passed. Returns the children started again in this round.
        Nothing else is touched: the other children keep running."""
        self.check()
        restarted: list[Managed] = []
        now = time.monotonic()
        for i, c in enumerate(self.children):
            code = c.proc.poll()
            if code is None or c.restart is None:
                continue
            c.seen_gone()
            if c.restart_due is None:
                ran = now - c.started_at
                c.crashes_in_a_row = 1 if ran >= c.restart.stable_s else c.crashes_in_a_row + 1
                delay = c.restart.delay(c.crashes_in_a_row)
                c.restart_due = now + delay
                last = c.log_tail(1).strip()[:300]
                self._event(
                    f"{c.name} (pid {c.pid}) exited with code {code}; restarting in {delay:g}s "
                    f"(restart {c.restarts + 1}, crash {c.crashes_in_a_row} in a row); its log "
                    f"{c.log_path}" + (f" ends with: {last}" if last else "")
                )
            if now >= c.restart_due:
                c.log_file.close()
                new = self._spawn(c.name, c.argv, c.env, c.restart)
                new.restarts = c.restarts + 1
                new.crashes_in_a_row = c.crashes_in_a_row
                self.children[i] = new
                self.retired.append(c)
                self._event(f"{c.name} restarted as pid {new.pid} (was pid {c.pid})")
                restarted.append(new)
        return restarted

    def _event(self, text: str) -> None:
        """One line in ``supervisor.log`` (UTC time first) and to ``say``."""
        from datetime import UTC, datetime

        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        with (self.log_dir / "supervisor.log").open("a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {text}\n")
        if self.say is not None:
            self.say(text)

    def wait_for_line(self, child: Managed, predicate: Any, timeout_s: float = 60.0) -> str:
        """Wait until a line of the child's log satisfies ``predicate``; return that line."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), child.log_path.open("rb") as fh:
                fh.seek(child.log_offset)
                for line in fh.read().decode("utf-8", errors="replace").splitlines():
                    if predicate(line):
                        return line
            if not child.alive():
                raise ProcessFailed(
                    f"{child.name} exited with code {child.proc.returncode} before it was ready; "
                    f"log {child.log_path}:\n{child.log_tail()}"
                )
            time.sleep(0.05)
        raise ProcessFailed(
            f"{child.name} was not ready after {timeout_s:.0f}s; log {child.log_path}:\n"
            f"{child.log_tail()}"
        )

    def stop(self, child: Managed) -> int | None:
        """SIGTERM, wait up to the grace period, then SIGKILL. Returns the exit code."""
        if child.alive():
            _signal_group(child, signal.SIGTERM)
            try:
                child.proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.proc.wait(timeout=10)
        child.seen_gone()
        child.log_file.close()
        return child.proc.returncode

    def stop_all(self) -> dict[str, int | None]:
        """Stop every child, newest first (workers before the services they use). SIGTERM goes
        to all of them at once so the grace periods overlap; stragglers are killed."""
        codes: dict[str, int | None] = {}
        live = [c for c in reversed(self.children) if c.alive()]
        for c in live:
            _signal_group(c, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for c in reversed(self.children):
            remaining = max(0.0, deadline - time.monotonic())
            try:
                c.proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                _signal_group(c, signal.SIGKILL)
                c.proc.wait(timeout=10)
            c.seen_gone()
            # Helpers a child started in its own process group (Dagster's code servers) go too.
            _signal_group(c, signal.SIGKILL, leader_too=False)
            c.log_file.close()
            codes[c.name] = c.proc.returncode
        for c in self.retired:
            _signal_group(c, signal.SIGKILL, leader_too=False)
        self.retired.clear()
        self.children.clear()
        return codes


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def default_stop_signals() -> None:
    """In a child between fork and exec: SIGTERM and SIGINT at their default action and not
    blocked, whatever the supervisor's own process had (an ignored or blocked signal survives
    exec): stopping a child starts with SIGTERM, and a child that inherited it ignored could
    only be killed, without handing back what it holds. A CI run's pytest worker had SIGTERM
    ignored or blocked by then: its children outlived SIGTERM (the stop test's polite child
    was SIGKILLed at the end of its 10 s grace). Only async-signal-safe calls: no locks."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _signal_group(child: Managed, sig: int, leader_too: bool = True) -> None:
    """Signal the process group we created for ``child`` (start_new_session: its pid is the
    group id), so helpers it spawned stop with it. Never any other process: while the child is
    unreaped its pid, and so its group id, is ours; once it is gone the number may have been
    given to another process (a session leader's group id is its pid), so only the group's
    members that started before the child was seen gone, and their children, are signalled."""
    if child.proc.poll() is None:
        if not leader_too:
            return
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(sig)
        return
    child.seen_gone()
    assert child.gone_at is not None
    for pid in _helpers(child.pid, child.gone_at):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _ticks_now() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat gives start times in."""
    with open("/proc/uptime", encoding="ascii") as fh:
        uptime_s = float(fh.read().split()[0])
    return int(uptime_s * os.sysconf("SC_CLK_TCK"))


def _helpers(pgid: int, gone_at: int) -> list[int]:
    """The processes of group ``pgid`` that started before ``gone_at`` (clock ticks since boot),
    and those any of them started since: a gone leader's helpers, not a later process that was
    given the leader's number."""
    members: dict[int, tuple[int, int]] = {}  # pid -> (parent pid, start time)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # After the command's closing parenthesis: state, ppid, pgrp, ..., starttime (field 22).
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 19 and int(fields[2]) == pgid:
            members[int(entry)] = (int(fields[1]), int(fields[19]))
    ours = {pid for pid, (_, started) in members.items() if started < gone_at}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in members.items() if ppid in ours} - ours
        ours |= more
        grew = bool(more)
    return sorted(ours)


@contextlib.contextmanager
def sigterm_as_keyboard_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C so ``with Supervisor(...)`` cleans up either way."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
