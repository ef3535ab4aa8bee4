"""Shared by the benchmarks: what machine this is, and a plain table printer."""

from __future__ import annotations

import os
import platform
import sys


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
