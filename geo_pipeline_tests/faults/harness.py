"""Real processes for the fault tests: the platform simulator, ``geo-pipeline relay``,
``geo-pipeline worker`` and ``geo-pipeline sweeper``, each a subprocess that can be SIGKILLed at
a named crash point (GEO_CRASH_AT), SIGSTOPped past its lease, and restarted. Invariants are
checked from the database (and the simulator's per-key submit counts) afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from geo_pipeline_tests.integration.execution.helpers import fetch, states
from geo_pipeline_tests.processes import cpu_seconds, wait_progressing

LEASE_S = 2.0
SWEEP_S = 0.5
CLI = [sys.executable, "-m", "geo_pipeline.cli.main"]
APP_PREFIX = "geo-fault-"  # application_name of each role's PostgreSQL sessions


def start_simulator(
    sets: list[str] | None = None, *, port: int = 0, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """Start the simulator and wait for its URL line while it makes progress (no wall-clock
    bound: under load its start-up was seen taking over 30 s, the old flat bound). Its stderr
    (the JSON log lines) goes to a temporary file, shown if it does not start."""
    args = [*CLI, "simulator", "--port", str(port), "--json", "--seed", "7"]
    for s in sets or []:
        args += ["--set", s]
    err = tempfile.NamedTemporaryFile(mode="w", prefix="geo-sim-err-", delete=False)
    err_path = Path(err.name)
    with err:  # the child keeps its copy
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    assert proc.stdout is not None
    stdout = proc.stdout
    found: list[str] = []
    said: list[str] = []  # stdout before the URL: a refusal is a JSON error line there

    def read_url() -> None:
        for line in stdout:
            said.append(line.strip())
            m = re.search(r'"url":\s*"([^"]+)"', line)
            if m:
                found.append(m.group(1))
                return

    reader = threading.Thread(target=read_url, daemon=True)
    reader.start()

    def stderr_tail() -> str:
        return (
            f"--- stdout ---\n{chr(10).join(said)[-2000:]}\n"
            f"--- stderr ---\n{err_path.read_text(errors='replace').strip()[-2000:]}"
        )

    try:
        wait_progressing(lambda: not reader.is_alive(), proc, what="the simulator did not start",
                         files=[err_path], describe=stderr_tail)  # fmt: skip
        if not found:
            raise AssertionError(f"the simulator did not start: no URL line\n{stderr_tail()}")
    except AssertionError as exc:
        proc.kill()
        proc.wait(timeout=10)
        raise RuntimeError(str(exc)) from None
    finally:
        err_path.unlink(missing_ok=True)
    return proc, found[0]


class Cluster:
    """The processes of one fault test, sharing one database, namespace and simulator."""

    def __init__(self, db_url: str, redis_url: str, ns: str, sim_url: str, tmp: Path) -> None:
        self.db_url = db_url
        self.sim_url = sim_url
        self.tmp = tmp
        self.env = {
            **os.environ,
            "GEO_DATABASE_URL": db_url,
            "GEO_REDIS_URL": redis_url,
            "GEO_REDIS_PREFIX": ns,
            "GEO_SIMULATOR_URL": sim_url,
            "GEO_EVIDENCE_URL": (tmp / "evidence").as_uri(),
        }
        for k in ("GEO_CRASH_AT", "GEO_CRASH_AFTER"):
            self.env.pop(k, None)
        self.procs: list[subprocess.Popen[str]] = []
        self._n = 0
        # pid -> (role, wall-clock spawn time, its stderr log): the chaos soak measures each
        # process's start-up and the sweeper's cadence from them.
        self.spawned: dict[int, tuple[str, float, Path]] = {}

    def _spawn(
        self,
        args: list[str],
        crash_at: str | None,
        crash_after: int | None,
        extra_env: dict[str, str] | None = None,
    ) -> Any:
        env = {**self.env, **(extra_env or {})}
        if crash_at:
            env["GEO_CRASH_AT"] = crash_at
            env["GEO_CRASH_AFTER"] = str(crash_after or 1)
        # libpq reads PGAPPNAME: each role's PostgreSQL sessions are named after it, so a chaos
        # test can terminate the workers' backends and nobody else's.
        env["PGAPPNAME"] = f"{APP_PREFIX}{args[0]}"
        self._n += 1
        path = self.tmp / f"{args[0]}-{self._n}.log"
        with open(path, "w") as log:  # the child keeps its copy
            spawned_at = time.time()
            proc = subprocess.Popen(
                [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=log, text=True
            )
        self.procs.append(proc)
        self.spawned[proc.pid] = (args[0], spawned_at, path)
        return proc

    def reap(self) -> None:
        """Forget processes that have exited (closing their pipes): a soak restarts hundreds."""
        alive = []
        for p in self.procs:
            if p.poll() is None:
                alive.append(p)
            elif p.stdout:
                p.stdout.close()
        self.procs = alive

    def terminate_backends(self, role: str = "worker") -> int:
        """pg_terminate_backend on every session of ``role``'s processes in this database."""
        rows = fetch(
            self.db_url,
            "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s "
            "AND pid <> pg_backend_pid()",
            (f"{APP_PREFIX}{role}",),
        )
        return sum(1 for r in rows if r["ok"])

    def worker(
        self,
        *,
        crash_at: str | None = None,
        crash_after: int | None = None,
        platforms: tuple[str, ...] = ("deepseek",),
        lease_s: float = LEASE_S,
    ) -> subprocess.Popen[str]:
        args = ["worker", "--lease-s", str(lease_s), "--reclaim-idle-ms", "1500",
                "--reclaim-every-s", "0.5", "--idle-claim-s", "0.3", "--drain-timeout-s", "3"]  # fmt: skip
        for p in platforms:
            args += ["--platform", p]
        return self._spawn(args, crash_at, crash_after)  # type: ignore[no-any-return]

    def relay(self, *, crash_at: str | None = None) -> subprocess.Popen[str]:
        return self._spawn(["relay", "--idle-s", "0.05"], crash_at, None)  # type: ignore[no-any-return]

    def sweeper(
        self, *, interval_s: float = SWEEP_S, log_level: str | None = None
    ) -> subprocess.Popen[str]:
        args = ["sweeper", "--interval-s", str(interval_s), "--grace-s", "0.5", "--hint-ttl-s", "2"]
        extra = {"GEO_LOG_LEVEL": log_level} if log_level else None
        return self._spawn(args, None, None, extra)  # type: ignore[no-any-return]

    def wait(self, cond: Callable[[], bool], timeout_s: float, what: str) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if cond():
                return time.monotonic() - t0
            time.sleep(0.1)
        raise AssertionError(
            f"timed out after {timeout_s}s waiting for {what}: {self.states()}\n{self.logs()}"
        )

    def wait_progress(
        self, cond: Callable[[], bool], what: str, stall_s: float = 120.0, cap_s: float = 1800.0
    ) -> float:
        """Wait until ``cond()`` for as long as the samples move: a change of any state count or
        a new state transition is progress, so a loaded machine only slows the wait down (issue
        30); ``stall_s`` without either fails, with the states and the processes' logs."""
        t0 = last = time.monotonic()
        seen: object = None
        while not cond():
            now = time.monotonic()
            moved = fetch(self.db_url, "SELECT count(*) AS n FROM geo.state_transitions")[0]["n"]
            mark = (tuple(sorted(self.states().items())), moved)
            if mark != seen:
                seen, last = mark, now
            elif now - last > stall_s or now - t0 > cap_s:
                raise AssertionError(
                    f"no progress for {now - last:.0f}s ({now - t0:.0f}s in all) waiting for "
                    f"{what}: {self.states()}\n{self.logs()}"
                )
            time.sleep(0.2)
        return time.monotonic() - t0

    def logs(self, tail: int = 15) -> str:
        out = []
        for path in sorted(self.tmp.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def held_by(self, proc: subprocess.Popen[str]) -> int:
        """Samples still leased to ``proc`` (a dead worker's leases not yet taken over)."""
        owner = f"worker:{socket.gethostname()}:{proc.pid}"
        return int(
            fetch(
                self.db_url,
                "SELECT count(*) AS n FROM geo.samples WHERE lease_owner = %s "
                "AND collection_state = 'running'",
                (owner,),
            )[0]["n"]
        )

    def wait_dead(self, proc: subprocess.Popen[str], stall_s: float = 60.0) -> int:
        """Wait for ``proc`` to reach its crash point and exit, while it makes progress (uses
        CPU or writes its log): under a load average of 15-33 that was seen taking over 30 s
        (issue 30). Fails if it stops moving for ``stall_s`` without exiting."""
        log = self.spawned[proc.pid][2] if proc.pid in self.spawned else None
        wait_progressing(
            lambda: proc.poll() is not None, proc, what="process did not die",
            files=[log] if log else [], stall_s=stall_s,
            describe=lambda: f"states {self.states()}\n{self.logs()}",
        )  # fmt: skip
        return int(proc.returncode)

    def wait_on(
        self, proc: subprocess.Popen[str], cond: Callable[[], bool], what: str, stall_s: float = 60
    ) -> None:
        """Wait until ``cond()`` for as long as ``proc`` (the process that must bring it about)
        makes progress: uses CPU or writes its log. A process still starting beside other work
        only takes longer (start-up alone was seen taking over 30 s); one that stands still
        for ``stall_s`` fails, with the states and every log."""
        log = self.spawned[proc.pid][2] if proc.pid in self.spawned else None
        wait_progressing(
            cond, proc, what=what, files=[log] if log else [], stall_s=stall_s, poll_s=0.1,
            describe=lambda: f"states {self.states()}\n{self.logs()}",
        )  # fmt: skip

    def wait_started(self, proc: subprocess.Popen[str], stall_s: float = 60.0) -> None:
        """Until ``proc`` has logged its ``<role>.started`` line (its loop runs), while it moves."""
        role, _, log = self.spawned[proc.pid]
        self.wait_on(
            proc, lambda: f'"{role}.started"' in log.read_text(errors="replace"),
            f"{role} (pid {proc.pid}) to start", stall_s,
        )  # fmt: skip

    def states(self) -> dict[str, int]:
        return dict(states(self.db_url))

    def all_terminal(self) -> bool:
        s = states(self.db_url)
        return bool(s) and set(s) <= {"completed", "failed"}

    def stop(self, proc: subprocess.Popen[str], stall_s: float = 60.0) -> dict[str, Any]:
        """SIGTERM, wait while the process makes progress (CPU or its log grows; its stdout is
        read meanwhile), and return its JSON report (the last stdout object). A fixed 20 s once
        failed a draining worker on a loaded CI box with nothing to show for it; one that stops
        moving for ``stall_s`` fails with its stdout and every process's log."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        log = self.spawned[proc.pid][2] if proc.pid in self.spawned else None
        mark = lambda: (cpu_seconds(proc.pid), log.stat().st_size if log and log.exists() else 0)  # noqa: E731
        seen, last_move = mark(), time.monotonic()
        while True:
            try:
                out, _ = proc.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                now, moved = time.monotonic(), mark()
                if moved != seen:
                    seen, last_move = moved, now
                elif now - last_move > stall_s:
                    proc.kill()
                    out, _ = proc.communicate()
                    raise AssertionError(
                        f"pid {proc.pid} did not stop after SIGTERM: no CPU and no log for "
                        f"{stall_s:.0f} s\nstdout:\n{out}\n{self.logs()}"
                    ) from None
        assert proc.returncode == 0, f"exit code {proc.returncode}\nstdout:\n{out}\n{self.logs()}"
        text = out.strip()
        start = text.rfind("\n{")
        return json.loads(text[start + 1 :] if start >= 0 else text)  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if p.stdout:
                p.stdout.close()

    # ------------------------------------------------------------------ simulator
    def sim_stats(self) -> dict[str, Any]:
        r = httpx.get(f"{self.sim_url}/_control/stats", timeout=10)
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]

    def sim_tasks(self) -> dict[str, Any]:
        """The stats with every upstream task the simulator created (``task_ids``)."""
        r = httpx.get(f"{self.sim_url}/_control/stats", params={"tasks": 1}, timeout=60)
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]

    def max_tasks_per_key(self) -> int:
        """The most upstream tasks the platform created under one idempotency key."""
        keys = self.sim_stats().get("keys", {})
        return max((v["tasks_created"] for per in keys.values() for v in per.values()), default=0)

    def max_submits_per_key(self) -> int:
        keys = self.sim_stats().get("keys", {})
        return max((v["submit_calls"] for per in keys.values() for v in per.values()), default=0)
