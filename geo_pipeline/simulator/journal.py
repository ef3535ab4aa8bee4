"""The simulator's memory on disk, so a restarted simulator is the same platform.

A real platform does not forget the tasks it ran or the fees it charged when one of its servers
restarts; the simulator keeps everything in memory (state.py). With ``--state-file`` every change
that a later answer depends on — a task created, a task cancelled, a synchronous call made (and
what it cost) — is appended to a JSON-lines journal as it happens, and a simulator started on the
same file replays it first. Polls, results, statements and the usage/cost APIs then answer as
before the restart (``geo-pipeline dev`` restarts a crashed simulator on its port and file).

One line per event, written with one ``write`` call: a ``kill -9`` loses at most the line being
written, and a torn last line is skipped on replay. Times are kept as wall-clock acceptance plus
offsets and turned back into this process's monotonic clock on replay. Request and fault counters
(what a test reads from ``/_control/stats``) are not kept: they describe one process's traffic.
``/_control/reset`` empties the journal.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from geo_pipeline.simulator.state import SimState, Task

# A paid synchronous call, as the usage/cost APIs sum it: (protocol, model, finished, minor).
SyncCost = tuple[str, str, datetime, int]


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("a", encoding="utf-8")

    # ------------------------------------------------------------------ writing
    def _write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._fh.flush()

    def task(self, task: Task) -> None:
        t0 = task.t0
        self._write(
            {
                "k": "task",
                "id": task.task_id,
                "platform": task.platform,
                "key": task.key,
                "question": task.question,
                "device": task.device,
                "region": task.region,
                "mode": task.mode,
                "tenant": task.tenant,
                "shot_requested": task.screenshot_requested,
                "accepted_at": task.accepted_at.isoformat(),
                "done_after": task.done_at - t0,
                "fails": task.fails,
                "shot": task.shot,
                "shot_after": task.shot_ready_at - t0,
                "visible_after": task.visible_at - t0,
            }
        )

    def cancel(self, task: Task) -> None:
        assert task.cancelled_at is not None
        self._write({"k": "cancel", "id": task.task_id, "after": task.cancelled_at - task.t0})

    def sync(
        self,
        platform: str,
        key: str,
        response_id: str,
        paid: bool,
        cost: SyncCost | None,
    ) -> None:
        record: dict[str, Any] = {
            "k": "sync",
            "platform": platform,
            "key": key,
            "rid": response_id,
            "paid": paid,
        }
        if cost is not None:
            protocol, model, at, minor = cost
            record["cost"] = [protocol, model, at.isoformat(), minor]
        self._write(record)

    def service(self, name: str, record: dict[str, Any]) -> None:
        """One change of an answer-scraping service's state (simulator.services.persist)."""
        self._write({"k": "svc", "svc": name, **record})

    def service_records(self) -> list[dict[str, Any]]:
        """The services' records in the order they were written (a torn line is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("k") == "svc":
                out.append(r)
        return out

    def reset(self) -> None:
        self._fh.close()
        self._fh = self.path.open("w", encoding="utf-8")

    def close(self) -> None:
        self._fh.close()

    # ------------------------------------------------------------------ replay
    def replay(self, state: SimState, sync_costs: list[SyncCost]) -> int:
        """Apply the journal to a fresh simulator's state and paid synchronous calls; returns
        the events applied."""
        if not self.path.exists():
            return 0
        now_mono = time.monotonic()
        now_wall = SimState.now_utc()
        applied = 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line torn by a kill: nothing after it was written either
            kind = r.get("k")
            if kind == "task":
                accepted = datetime.fromisoformat(r["accepted_at"])
                t0 = now_mono - (now_wall - accepted).total_seconds()
                task = Task(
                    task_id=r["id"],
                    platform=r["platform"],
                    key=r["key"],
                    question=r["question"],
                    device=r["device"],
                    region=r["region"],
                    mode=r["mode"],
                    tenant=r["tenant"],
                    screenshot_requested=r["shot_requested"],
                    accepted_at=accepted,
                    t0=t0,
                    done_at=t0 + r["done_after"],
                    fails=r["fails"],
                    shot=r["shot"],
                    shot_ready_at=t0 + r["shot_after"],
                    visible_at=t0 + r["visible_after"],
                )
                plat_key = (task.platform, task.key)
                state.tasks[task.task_id] = task
                state.by_key[plat_key] = task.task_id
                state.tasks_created[plat_key] += 1
                state.created[plat_key].append(task.task_id)
            elif kind == "cancel":
                found = state.tasks.get(r["id"])
                if found is not None:
                    found.cancelled_at = found.t0 + r["after"]
            elif kind == "sync":
                plat_key = (r["platform"], r["key"])
                state.tasks_created[plat_key] += 1
                state.created[plat_key].append(r["rid"])
                state.sync_paid[r["rid"]] = bool(r["paid"])
                if "cost" in r:
                    protocol, model, at, minor = r["cost"]
                    sync_costs.append((protocol, model, datetime.fromisoformat(at), minor))
            else:
                continue
            applied += 1
        return applied
