"""What the long-running processes say when they start (D6, D10): a start-up line with what
they connected to (passwords redacted, D2), their streams and their metrics port, written at
once; and a pre-flight that refuses to run against a service that is down or a database that
was never migrated, instead of running silently."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from geo_pipeline_tests.processes import closed_port, cpu_seconds, streams, wait_progressing

SECRET = "s3cret-pw"


def _env(db_url: str, redis_url: str, ns: str, tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GEO_DATABASE_URL=db_url.replace("postgres@", f"postgres:{SECRET}@", 1),
        GEO_REDIS_URL=redis_url,
        GEO_REDIS_PREFIX=ns,
        GEO_EVIDENCE_URL=(tmp_path / "evidence").as_uri(),
        GEO_SIMULATOR_URL="http://127.0.0.1:9",
    )
    return env


# A process is waited for while it moves (uses CPU or writes a line), however slow the box: a
# relay's imports alone were seen taking over 30 s beside other work, and flat bounds (20 s to
# start, 5 s to its loop, 30 s to refuse) were speeds. STALL_S without either is a hang; CAP_S
# only guards against one that moves for ever without saying the line.
STALL_S = 60.0
CAP_S = 600.0


class Proc:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "geo_pipeline.cli.main", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.stdout: list[str] = []  # read too: an unread pipe could block the process
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stdout, daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.lines.put(line)

    def _read_stdout(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.stdout.append(line)

    def wait_line(self, needle: str) -> str | None:
        """The first stderr line holding ``needle``, waited for while the process moves; None
        when it exits without it (or stalls: see STALL_S)."""
        started = last_move = time.monotonic()
        cpu = cpu_seconds(self.p.pid)
        while True:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.p.poll() is not None and self.lines.empty():
                    return None
                now, used = time.monotonic(), cpu_seconds(self.p.pid)
                if used != cpu:
                    cpu, last_move = used, now
                elif now - last_move > STALL_S or now - started > CAP_S:
                    return None
                continue
            self.seen.append(line)
            last_move = time.monotonic()
            if needle in line:
                return line

    def wait_exit(self) -> int:
        """The exit code, waited for while the process moves (uses CPU or writes a line)."""
        wait_progressing(
            lambda: self.p.poll() is not None, self.p, what="the process did not exit",
            stall_s=STALL_S, cap_s=CAP_S, describe=self.streams,
        )  # fmt: skip
        return int(self.p.returncode)

    def output(self) -> str:
        """Everything the process wrote to stderr (after it exited): its readers end at EOF."""
        for t in self._readers:
            t.join(STALL_S)
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return "".join(self.seen)

    def streams(self) -> str:
        """Both streams so far, for a failure message."""
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return streams("".join(self.stdout), "".join(self.seen))

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                return self.wait_exit()
            except AssertionError:
                self.p.kill()
        return self.p.wait()


@pytest.mark.parametrize("process", ["relay", "sweeper", "worker"])
def test_a_process_says_where_it_is_connected_when_it_starts(
    process, db_url, redis_url, redis_ns, tmp_path
):
    env = _env(db_url, redis_url, redis_ns, tmp_path)
    # Port 0: the process binds a free port and names it. A port picked free here and bound by
    # the child later was taken in between by a parallel test ("error: Address already in use",
    # exit 2, when another socket held it).
    proc = Proc([process, "--metrics-port", "0"], env)
    try:
        line = proc.wait_line(f'"{process}.starting"')
        assert line is not None, proc.streams()
        body = json.loads(line)
        assert SECRET not in line and "***" in body["database"]
        assert body["redis"].startswith("redis://") and body["namespace"] == redis_ns
        assert body["streams"] and all(s.startswith(f"{redis_ns}:") for s in body["streams"])
        named = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/metrics", body["metrics"])
        assert named and int(named[1]) > 0, body["metrics"]
        with urllib.request.urlopen(body["metrics"], timeout=30) as resp:  # it serves there
            assert resp.status == 200 and b"# TYPE" in resp.read(), proc.streams()
        # The loop's own start event follows within the log's time bound, not 64 lines later.
        # A line held in the log's buffer until 64 more came is still caught, later: it never
        # comes, and the wait fails once the idle loop stalls (STALL_S) or at CAP_S.
        assert proc.wait_line(f'"{process}.started"') is not None, proc.streams()
    finally:
        assert proc.stop() == 0, proc.streams()


@pytest.mark.parametrize("process", ["relay", "sweeper", "worker"])
def test_a_process_refuses_to_start_without_redis(process, db_url, redis_ns, tmp_path):
    with closed_port() as dead:
        env = _env(db_url, f"redis://127.0.0.1:{dead.getsockname()[1]}/0", redis_ns, tmp_path)
        proc = Proc([process], env)
        try:
            code = proc.wait_exit()
        finally:
            proc.stop()
    err = proc.output()
    assert code == 3 and "Redis" in err and "unreachable" in err, proc.streams()


def test_a_process_refuses_an_unmigrated_database(empty_db_url, redis_url, redis_ns, tmp_path):
    proc = Proc(["relay"], _env(empty_db_url, redis_url, redis_ns, tmp_path))
    try:
        code = proc.wait_exit()
    finally:
        proc.stop()
    err = proc.output()
    assert code == 3 and "geo-pipeline db upgrade" in err and SECRET not in err, proc.streams()


def test_the_sweeper_says_so_when_redis_goes_away(db, caplog):
    """Redis lost after start: the sweeper keeps re-deriving work from PostgreSQL (principle
    1) but warns that trimming and stream gauges are paused, and says when Redis is back."""
    import redis as redis_lib

    from geo_pipeline.worker.sweeper import SweepSettings, run_sweeper

    held = closed_port()  # refused until the sweeper has stopped
    dead = redis_lib.Redis.from_url(
        f"redis://127.0.0.1:{held.__enter__().getsockname()[1]}/0",
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
    )
    stop = threading.Event()

    class StopAtThirdPass:
        """The dead Redis, pinged once a pass: the sweeper is stopped at its third pass, not
        after a second of wall clock (a loaded box's first pass, gauges and all, may take
        longer than that, leaving one pass where two are asked for)."""

        pings = 0

        def ping(self) -> object:
            self.pings += 1
            if self.pings >= 3:
                stop.set()
            return dead.ping()

    guard = threading.Timer(STALL_S, stop.set)  # a hang guard only
    guard.start()
    with caplog.at_level("INFO", logger="geo_pipeline.sweeper"):
        totals = run_sweeper(
            db,
            actor="sweeper:test",
            settings=SweepSettings(interval_s=0.2, gauge_every_s=3600),
            lookup_platforms=[],
            stop=stop,
            redis=StopAtThirdPass(),
            stream_keys=["x:collect:deepseek"],
        )
    guard.cancel()
    held.__exit__(None, None, None)
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "Redis" in r.message]
    assert warnings and "unreachable" in warnings[0].message
    assert len(warnings) == 1  # said once, not every pass
    assert totals["passes"] >= 2 and totals["redis_unreachable_passes"] == totals["passes"]


def test_a_worker_waits_for_its_platform_and_names_its_url(db_url, redis_url, redis_ns, tmp_path):
    """Started before the simulator listens (the README's recipe starts both at once), a worker
    says which URL it waits for and why, and says when the platform answers; it claims only
    then (issue 30: 24 of 50 first attempts failed as a bare 'transient', no line named the
    URL)."""
    # The platform's port is held from the start (refused while not listening), so no parallel
    # test can take it before the platform comes up; coming up is then listen() on it: the gate
    # calls a platform reachable once a TCP connection opens (worker/platform_wait.py).
    with closed_port() as platform:
        url = f"http://127.0.0.1:{platform.getsockname()[1]}"
        env = _env(db_url, redis_url, redis_ns, tmp_path)
        env["GEO_SIMULATOR_URL"] = url
        proc = Proc(["worker", "--platform", "deepseek"], env)
        try:
            line = proc.wait_line('"worker.platform_waiting"')
            assert line is not None, proc.streams()
            body = json.loads(line)
            assert body["url"] == url and body["platforms"] == ["deepseek"] and body["error"], line
            platform.listen()
            line = proc.wait_line('"worker.platform_reachable"')
            assert line is not None, proc.streams()
            assert json.loads(line)["url"] == url
        finally:
            code = proc.stop()
    proc.output()
    assert code == 0, proc.streams()
