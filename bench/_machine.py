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
