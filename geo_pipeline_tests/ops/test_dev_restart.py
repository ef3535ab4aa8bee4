"""``geo-pipeline dev``'s simulator under the supervisor: killed with SIGKILL, it is started again
on the same port and state file, and it is the same platform — the tasks it ran, the fee
statement and the cost report are what they were (issue 36: a new simulator with its statements
in memory made 40 earlier charges reconcile as ``missing_theirs``)."""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from geo_pipeline.ops.demo import free_port
from geo_pipeline.ops.supervisor import Restart, Supervisor
from geo_pipeline_tests.clock import clear_of_midnight
from geo_pipeline_tests.processes import cpu_seconds

POLICY = Restart(initial_s=0.05, max_s=0.5)


def simulator_argv(port: int, state_file: Path) -> list[str]:
    # What `dev` starts (demo.start_pipeline with a restart policy): a fixed port and a state
    # file. Instant tasks, no faults (the default profile), so every call is charged.
    return [
        sys.executable, "-m", "geo_pipeline.cli.main", "simulator", "--host", "127.0.0.1",
        "--port", str(port), "--json", "--state-file", str(state_file),
    ]  # fmt: skip


def wait_until_answers(sup: Supervisor, url: str, old_pid: int | None) -> None:
    """Drive the supervisor until a simulator other than ``old_pid`` answers ``/_control/health``
    as the supervisor's own child (its pid: the port is picked free and bound later, so another
    test's process could hold it); waited for while the child moves (CPU), not for a flat time.
    Raises PortTaken, with the child's log, when it cannot bind the port."""
    started = moved = time.monotonic()
    cpu: float | None = None
    while True:
        sup.poll()
        child = sup.child("simulator")
        if child.pid != old_pid and child.alive():
            try:
                health = httpx.get(f"{url}/_control/health", timeout=10)
                if health.status_code == 200 and health.json().get("pid") == child.pid:
                    return
            except httpx.HTTPError:
                pass
        tail = child.log_tail()
        if "address already in use" in tail.lower():
            raise PortTaken(f"{url} is another process's; the simulator's log:\n{tail}")
        now, used = time.monotonic(), cpu_seconds(child.pid)
        if used != cpu:
            cpu, moved = used, now
        if now - moved > 60 or now - started > 600:
            break
        time.sleep(0.05)
    pytest.fail(f"the simulator did not answer at {url}: {sup.child('simulator').log_tail()}")


def platform_fields(url: str, platform: str) -> dict[str, Any]:
    prof = httpx.get(f"{url}/_control/profiles", timeout=10).json()["profiles"][platform]
    return {"device": prof["devices"][0], "region": prof["regions"][0], "mode": prof["modes"][0]}


class PortTaken(Exception):
    """The simulator could not bind its port: another process took it after it was picked."""


def test_a_killed_simulator_comes_back_with_its_tasks_statements_and_costs(tmp_path):
    # `dev` gives its simulator a fixed port (picked free, bound by the child, bound again by
    # each restart): another test's process can take it in between. The scenario then starts
    # over on a new port, with the simulator's log printed; three takes in a row fail.
    for attempt in range(3):
        try:
            return scenario(tmp_path / f"take-{attempt}")
        except PortTaken as exc:
            print(f"take {attempt}: {exc}")
    pytest.fail("the simulator's port was taken three times in a row")


def scenario(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state_file = tmp_path / "simulator-state.jsonl"
    clear_of_midnight()  # the tasks' charges and the statement of `today` fall on one day
    today = datetime.now(UTC).date().isoformat()
    with Supervisor(tmp_path / "logs", grace_s=5) as sup:
        sup.start("simulator", simulator_argv(port, state_file), restart=POLICY)
        wait_until_answers(sup, url, None)
        fields = platform_fields(url, "deepseek")
        task_ids = []
        for i in range(6):
            resp = httpx.post(
                f"{url}/v1/deepseek/tasks",
                json={"question": f"best coffee {i}?", **fields},
                headers={"Idempotency-Key": f"s{i}:1"},
                timeout=10,
            )
            assert resp.status_code == 202, resp.text
            task_ids.append(resp.json()["task_id"])
        cancelled = httpx.post(f"{url}/v1/deepseek/tasks/{task_ids[0]}/cancel", timeout=10)
        assert cancelled.status_code == 200
        chat = httpx.post(
            f"{url}/openai/v1/chat/completions",
            json={"model": "deepseek", "messages": [{"role": "user", "content": "coffee?"}]},
            headers={"Idempotency-Key": "chat-1"},
            timeout=30,
        )
        assert chat.status_code == 200, chat.text

        def observed() -> dict[str, Any]:
            return {
                "statement": httpx.get(f"{url}/v1/deepseek/statements/{today}", timeout=10).json(),
                "polls": [
                    httpx.get(f"{url}/v1/deepseek/tasks/{t}", timeout=10).json()["status"]
                    for t in task_ids
                ],
                "tasks": httpx.get(f"{url}/_control/stats?tasks=1", timeout=10).json()["tasks"],
                "costs": httpx.get(
                    f"{url}/openai/v1/organization/costs", params={"start_time": 0}, timeout=10
                ).json()["data"],
            }

        before = observed()
        assert before["statement"]["lines"], before  # something was charged today
        assert before["costs"], before

        old = sup.child("simulator")
        os.kill(old.pid, signal.SIGKILL)
        wait_until_answers(sup, url, old.pid)

        after = observed()
        assert after == before
        log = (tmp_path / "logs" / "supervisor.log").read_text(encoding="utf-8")
        assert f"simulator (pid {old.pid}) exited with code -9" in log, log
        # A new task after the restart gets an id no earlier simulator gave.
        resp = httpx.post(
            f"{url}/v1/deepseek/tasks",
            json={"question": "after the restart?", **fields},
            headers={"Idempotency-Key": "s-new:1"},
            timeout=10,
        )
        assert resp.status_code == 202 and resp.json()["task_id"] not in task_ids
        # The same key as before the crash is the same task, as on a real platform.
        again = httpx.post(
            f"{url}/v1/deepseek/tasks",
            json={"question": "best coffee 1?", **fields},
            headers={"Idempotency-Key": "s1:1"},
            timeout=10,
        )
        assert again.json()["task_id"] == task_ids[1]
