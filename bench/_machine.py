"""Shared by the benchmarks: what machine this is, a plain table printer, and a scratch database
and Redis namespace of their own."""

from __future__ import annotations

import os
import platform
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine_info() -> str:
    cpu = cpu_model()
    return (
        f"{platform.node() and 'host'}: {os.cpu_count()} cores, {cpu}, "
        f"Python {sys.version.split()[0]}, {platform.system()} {platform.release()}"
    )


def print_table(rows: list[dict[str, object]], title: str) -> None:
    cols = list(rows[0]) if rows else []
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print(f"\n{title}\nmachine: {machine_info()}")
    print("  ".join(c.ljust(widths[c]) for c in cols))
    print("  ".join("-" * widths[c] for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))


# Benchmarks run beside the suite's services: a server to create databases on, and a Redis.
ADMIN_URL = os.environ.get("GEO_BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("GEO_REDIS_URL", "redis://127.0.0.1:6379/0")


def with_db(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@contextmanager
def scratch(prefix: str) -> Iterator[tuple[str, str]]:
    """(database URL, Redis key prefix) of a fresh, empty database and namespace, dropped and
    deleted afterwards whatever happens."""
    import psycopg
    import redis

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    ns = f"geobench:{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield with_db(ADMIN_URL, name), ns
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"{ns}:*"):
            client.delete(key)
        client.close()
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


# --------------------------------------------------------------------------- CPU accounting
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(stat_path: str) -> tuple[str, float] | None:
    """(command name, user+system CPU seconds) of one /proc/<pid>/stat; None if it is gone."""
    try:
        with open(stat_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    name = text[text.find("(") + 1 : text.rfind(")")]
    fields = text[text.rfind(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def cpu_snapshot(pids: dict[str, list[int]]) -> dict[str, float]:
    """Cumulative CPU seconds now: of the named groups of pids (the bench's own children), of
    every postgres / redis-server / weed process on the machine by command name, and of the
    whole machine (busy = all but idle and iowait, /proc/stat). Differences of two snapshots
    give where a run's CPU went; a process that exits in between loses what it used."""
    out: dict[str, float] = {}
    for group, group_pids in pids.items():
        total = 0.0
        for pid in group_pids:
            got = _proc_cpu(f"/proc/{pid}/stat")
            total += got[1] if got else 0.0
        out[group] = total
    by_name = {"postgres": "postgres", "redis-server": "redis", "weed": "s3 (weed)"}
    for group in by_name.values():
        out.setdefault(group, 0.0)
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    for entry in entries:
        if entry.isdigit():
            got = _proc_cpu(f"/proc/{entry}/stat")
            if got and got[0] in by_name:
                out[by_name[got[0]]] += got[1]
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        out["machine"] = (sum(cpu) - cpu[3] - cpu[4]) / _TICK  # minus idle, iowait
    except (OSError, IndexError, ValueError):
        out["machine"] = float("nan")
    return out


def cpu_breakdown(before: dict[str, float], after: dict[str, float], per: int) -> dict[str, float]:
    """Milliseconds of CPU per unit (e.g. per sample) by group, with 'other' = the machine's
    busy time not accounted for by a group (other processes, the kernel's own threads)."""
    ms = {k: 1000 * (after[k] - before.get(k, 0.0)) / max(1, per) for k in after}
    known = sum(v for k, v in ms.items() if k != "machine")
    ms["other"] = ms["machine"] - known
    return {k: round(v, 2) for k, v in ms.items()}
