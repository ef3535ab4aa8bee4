"""``geo-pipeline dev`` for the browser tests of the Dagster UI: started with one worker on the
test's PostgreSQL, Redis and an evidence directory, waited for until the webserver answers, and
stopped (its Dagster database dropped) afterwards; plus the UI's GraphQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from geo_pipeline.ops.demo import free_port
from geo_pipeline.ops.dev import dagster_database


@dataclass
class DevUi:
    port: int
    env: dict[str, str]  # the test's environment plus what the `export` line names
    proc: subprocess.Popen[bytes]
    out: Path  # its stdout and stderr, together
    state: Path  # its --state-dir

    def wait_for(self, predicate: Any, timeout_s: float, what: str) -> Any:
        """Poll ``predicate`` every 2 s until it is truthy; fail if dev exits, or when its
        process tree used no CPU for ``timeout_s`` (hung: a loaded machine only slows it down),
        or after ``4 * timeout_s`` in all (a safety net for one that moves for ever)."""
        started = time.monotonic()
        moved, cpu = started, tree_cpu_seconds(self.proc.pid)
        while True:
            assert self.proc.poll() is None, (
                f"geo-pipeline dev exited ({self.proc.returncode}) while waiting for {what}; "
                f"its output (stdout and stderr):\n{self.out.read_text(errors='replace')[-3000:]}"
            )
            value = predicate()
            if value:
                return value
            now, used = time.monotonic(), tree_cpu_seconds(self.proc.pid)
            if used > cpu:
                moved, cpu = now, used
            if now - moved > timeout_s or now - started > 4 * timeout_s:
                break
            time.sleep(2)
        pytest.fail(
            f"gave up after {time.monotonic() - started:.0f}s waiting for {what} (CPU of dev's "
            f"processes last moved {time.monotonic() - moved:.0f}s ago); geo-pipeline dev's "
            f"output (stdout and stderr):\n{self.out.read_text(errors='replace')[-3000:]}"
        )


def tree_pids(pid: int) -> set[int]:
    """``pid`` and its live descendants (Linux /proc)."""
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return seen


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its live descendants (Linux /proc)."""
    from geo_pipeline_tests.processes import cpu_seconds

    return sum(cpu_seconds(p) or 0.0 for p in tree_pids(pid))


def listens_in_tree(port: int, pid: int) -> bool:
    """Whether the TCP socket listening on ``port`` belongs to ``pid`` or a descendant (Linux
    /proc): the port is picked free and bound later by dev's webserver, so another test's
    process can hold it, and its server would answer in dev's place."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{f[9]}]")
    for p in tree_pids(pid):
        try:
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{p}/fd").iterdir()):
                return True
        except OSError:
            continue
    return False


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


class PortTaken(Exception):
    """dev's webserver port was taken by another process after it was picked."""


def graphql(port: int, query: str) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read())["data"])


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextmanager
def running_dev(
    db_url: str, redis_url: str, redis_ns: str, tmp_path: Path, workers: int = 1
) -> Iterator[DevUi]:
    # The webserver's port is picked free and bound later by dev: another test's process can
    # take it in between. Then dev starts over on a new port (its output printed), at most
    # three times.
    for attempt in range(3):
        try:
            here = tmp_path / f"take-{attempt}" if attempt else tmp_path
            ui = _start_dev(db_url, redis_url, redis_ns, here, workers)
            break
        except PortTaken as exc:
            print(f"take {attempt}: {exc}")
    else:
        pytest.fail("the Dagster webserver's port was taken three times in a row")
    try:
        yield ui
    finally:
        _stop_dev(ui.proc, db_url)


def _start_dev(db_url: str, redis_url: str, redis_ns: str, tmp_path: Path, workers: int) -> DevUi:
    tmp_path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEO_", "DAGSTER_"))}
    env.update(
        GEO_DATABASE_URL=db_url,
        GEO_REDIS_URL=redis_url,
        GEO_REDIS_PREFIX=redis_ns,
        GEO_EVIDENCE_URL=(tmp_path / "evidence").as_uri(),
    )
    out = tmp_path / "dev.out"
    cmd = [sys.executable, "-m", "geo_pipeline.cli.main", "dev"]
    cmd += ["--state-dir", str(tmp_path / "state"), "--port", str(port), "--workers", str(workers)]
    with out.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    ui = DevUi(port, env, proc, out, tmp_path / "state")
    try:
        export = ui.wait_for(
            lambda: next(
                (ln for ln in out.read_text().splitlines() if ln.startswith("export ")), None
            ),
            240,
            "the Dagster UI",
        )
        for part in export.removeprefix("export ").split(" "):
            key, _, value = part.partition("=")
            env[key] = value.strip("'")
        webserver_log = ui.state / "logs" / "dagster-webserver.log"

        def listening() -> bool:
            # dev's supervisor restarts a webserver that could not bind, for ever: its log
            # says why ("[Errno 98] ... address already in use").
            if "address already in use" in _text(webserver_log).lower():
                raise PortTaken(f"port {port}: {webserver_log}:\n{_text(webserver_log)[-2000:]}")
            return answers(port)

        # The export line can come before the webserver listens on a loaded machine.
        ui.wait_for(listening, 120, "the Dagster webserver to listen")
        if not listens_in_tree(port, proc.pid):
            raise PortTaken(f"port {port} answers, not from dev's processes")
    except BaseException as exc:
        _stop_dev(proc, db_url)
        text = out.read_text(errors="replace")
        if not isinstance(exc, PortTaken) and "address already in use" in text.lower():
            raise PortTaken(f"port {port}: dev's output:\n{text[-3000:]}") from exc
        raise
    return ui


def _stop_dev(proc: subprocess.Popen[bytes], db_url: str) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    admin = db_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        name = dagster_database(db_url)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
