"""In-memory state of the simulator: tasks, the idempotency-key index and the counters tests read.

Time is the process's monotonic clock: a task's status is *derived* from its deadlines when it is
asked for, so no timer runs per task and the server stays cheap at thousands of tasks per second.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


@dataclass(slots=True)
class Task:
    task_id: str
    platform: str
    key: str
    question: str
    device: str
    region: str
    mode: str
    tenant: str
    screenshot_requested: bool
    accepted_at: datetime
    t0: float  # monotonic time of acceptance
    done_at: float  # monotonic time of completion (or failure)
    fails: bool
    shot: str  # available | late | never | unsupported | not_requested
    shot_ready_at: float
    cancelled_at: float | None = None
    png: bytes | None = None  # rendered on the first screenshot fetch
    visible_at: float = 0.0  # monotonic time from which a lookup by key finds the task

    def paid(self, now: float) -> bool | None:
        """Whether the platform has billed an answer for this task: True once it completed, False
        once it failed or was cancelled in time, None while it still runs."""
        status = self.status(now)
        if status == "completed":
            return True
        return False if status == "failed" else None

    def status(self, now: float) -> str:
        if self.cancelled_at is not None and self.cancelled_at < self.done_at:
            return "failed"
        if now >= self.done_at:
            return "failed" if self.fails else "completed"
        # The first fifth of the run is queueing upstream; a platform reports that as pending.
        return "pending" if now < self.t0 + (self.done_at - self.t0) * 0.2 else "running"

    def error(self, now: float) -> str | None:
        if self.cancelled_at is not None and self.cancelled_at < self.done_at:
            return "cancelled"
        if self.fails and now >= self.done_at:
            return "upstream_task_failed"
        return None

    def finished_wallclock(self) -> datetime:
        return self.accepted_at + timedelta(seconds=self.done_at - self.t0)


@dataclass
class TokenBucket:
    rate: float
    burst: float
    tokens: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def take(self, now: float) -> float:
        """0.0 when a token was taken, else the seconds until one is available."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class SimState:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.tasks: dict[str, Task] = {}
        self.by_key: dict[tuple[str, str], str] = {}
        self.requests: Counter[str] = Counter()  # "platform:kind:status"
        self.submit_calls: dict[tuple[str, str], int] = defaultdict(int)
        self.tasks_created: dict[tuple[str, str], int] = defaultdict(int)
        # Every upstream task created per (platform, key), in creation order: a task-API task id,
        # or for a synchronous call the response id it answered with and whether it was paid.
        self.created: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.sync_paid: dict[str, bool] = {}  # synchronous response id -> an answer was produced
        self.faults: Counter[str] = Counter()  # "platform:fault"
        # Faults drawn per task rather than per request (a hostile or bad answer, a late or
        # missing screenshot, a disagreeing statement line): "platform:fault" -> the ids it hit,
        # so one fetched twice counts once. The demo says which occurred (issue #34).
        self.injected: dict[str, set[str]] = defaultdict(set)
        self.buckets: dict[str, TokenBucket] = {}
        self.seq = 0
        # Upstream ids are unique for ever on a real platform; a restarted (or reset) simulator
        # must not hand out an id a previous instance gave, or a database that outlives it (the
        # demo's reused state) sees two tasks with one id.
        self.epoch = format(time.time_ns() // 1_000_000, "x")

    def next_id(self, platform: str) -> str:
        self.seq += 1
        return f"{platform}-{self.epoch}-{self.seq:08d}"

    @staticmethod
    def now_utc() -> datetime:
        return datetime.now(UTC)

    def task_list(self, platform: str | None = None) -> dict[str, dict[str, list[list[object]]]]:
        """``{platform: {key: [[task_id, paid], ...]}}``: every upstream task created, with
        ``paid`` True (an answer was produced and billed), False (failed / cancelled in time) or
        None (still running). What an invariant checker compares with the database."""
        now = time.monotonic()
        out: dict[str, dict[str, list[list[object]]]] = defaultdict(dict)
        for (plat, key), ids in self.created.items():
            if platform not in (None, plat):
                continue
            rows: list[list[object]] = []
            for tid in ids:
                task = self.tasks.get(tid)
                rows.append([tid, task.paid(now) if task is not None else self.sync_paid.get(tid)])
            out[plat][key] = rows
        return out

    def stats(
        self, include_keys: bool = True, platform: str | None = None, include_tasks: bool = False
    ) -> dict[str, object]:
        by_kind: Counter[str] = Counter()
        for name, n in self.requests.items():
            plat, kind, _status = name.split(":", 2)
            if platform in (None, plat):
                by_kind[kind] += n
        out: dict[str, object] = {
            "tasks": sum(1 for t in self.tasks.values() if platform in (None, t.platform)),
            "requests": dict(sorted(self.requests.items())),
            "requests_by_kind": dict(sorted(by_kind.items())),
            "faults": dict(sorted(self.faults.items())),
            "injected": {
                k: len(v)
                for k, v in sorted(self.injected.items())
                if v and platform in (None, k.split(":", 1)[0])
            },
        }
        if include_keys:
            keys: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
            for (plat, key), calls in self.submit_calls.items():
                if platform in (None, plat):
                    keys[plat][key] = {
                        "submit_calls": calls,
                        "tasks_created": self.tasks_created.get((plat, key), 0),
                    }
            out["keys"] = keys
            out["max_tasks_per_key"] = max(self.tasks_created.values(), default=0)
            # The key is '<sample_id>:<attempt_no>': tasks per sample sum over its attempts' keys.
            per_sample: dict[str, dict[str, int]] = defaultdict(dict)
            for (plat, key), n in self.tasks_created.items():
                if n and platform in (None, plat):
                    sample = key.rsplit(":", 1)[0]
                    per_sample[plat][sample] = per_sample[plat].get(sample, 0) + n
            out["tasks_per_sample"] = per_sample
            out["max_tasks_per_sample"] = max(
                (n for per in per_sample.values() for n in per.values()), default=0
            )
        if include_tasks:
            out["task_ids"] = self.task_list(platform)
        return out
