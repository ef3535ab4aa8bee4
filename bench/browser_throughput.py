"""Answers per minute of the browser lane (issue #32) and how long the event loop is ever blocked:
the real ``BrowserConnector`` (Debian's chromium through Playwright, CDP stream capture, full-page
screenshot, page HTML) answering questions against the simulator's DeepSeek web app with 1, 4
and 8 live contexts (one logged-in account each), all in one asyncio process as in a worker.

- answers/min: completed captures over the wall time of the batch (accounts' pacing off: this is
  the machine's capacity, not what a real account may ask -- a real account waits 5 s + jitter
  between questions and has a daily budget);
- CPU cores used: CPU seconds of this process's whole tree (Python, the Playwright driver, every
  chromium process, the simulator) over the wall time; answers/min per core = the two divided;
- loop blocked: a 10 ms ticker's worst and 99th-percentile lateness over the batch (the goal:
  never > 100 ms), beside the same ticker's lateness over 3 s with nothing else running in the
  process ("idle"): on a loaded box the scheduler alone delays the loop, and that part is not
  the lane's doing.

    .venv/bin/python bench/browser_throughput.py --contexts 1 4 8 --answers-per-context 4

Needs Debian's chromium (GEO_CHROMIUM or /usr/bin/chromium). On a shared, loaded box every figure
is an upper bound on time (a lower bound on throughput): note the load average printed."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _machine import print_table  # bench/ is on sys.path when a bench runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geo_pipeline.connectors.base import SubmitRequest
from geo_pipeline.connectors.browser.accounts import LocalAccounts, Pacing
from geo_pipeline.connectors.browser.connector import (
    BrowserConnector,
    chromium_path,
    import_storage_state,
)
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline_tests.fixtures.simulator import start_simulator

QUESTION = "国内最好喝的咖啡品牌？"


def tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of ``root`` and its descendants (alive ones)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            stats[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    tick = os.sysconf("SC_CLK_TCK")
    total, stack, seen = 0.0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        f = stats[pid]
        total += (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / tick
        stack.extend(children.get(pid, []))
    return total


def _max_p99(sorted_s: list[float]) -> str | None:
    if not sorted_s:
        return None
    return f"{sorted_s[-1] * 1000:.1f}/{sorted_s[int(0.99 * (len(sorted_s) - 1))] * 1000:.1f}"


async def ticker(stop: asyncio.Event, lateness: list[float], every_s: float = 0.01) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(every_s)
        lateness.append(time.perf_counter() - t0 - every_s)


async def log_in(sim_url: str, conn: BrowserConnector, account: str, root: Path) -> None:
    async with httpx.AsyncClient(base_url=sim_url) as client:
        resp = await client.post("/ui/deepseek/login", data={"account": account})
        token = client.cookies["sim_session"]
    assert resp.status_code == 302
    cookie = {
        "name": "sim_session",
        "value": token,
        "domain": "127.0.0.1",
        "path": "/ui/deepseek/",
        "expires": time.time() + 86400,
        "httpOnly": True,
        "secure": False,
        "sameSite": "Lax",
    }
    await import_storage_state(conn.chromium, root / conn.platform / account, [cookie])


async def batch(sim_url: str, contexts: int, per: int) -> dict[str, Any]:
    os.environ["GEO_SIMULATOR_URL"] = sim_url
    root = Path(tempfile.mkdtemp(prefix="geo-browser-tp-"))
    os.environ["GEO_BROWSER_PROFILES"] = str(root)
    entry = load_registry().entry("deepseek_web")
    accounts = [f"a{i}" for i in range(contexts)]
    conn = BrowserConnector(
        entry,
        LocalAccounts({entry.platform: accounts}, root, Pacing(0.0, 0.0), daily_budget=10**6),
    )
    conn.max_contexts = contexts
    for a in accounts:
        await log_in(sim_url, conn, a, root)
    stop = asyncio.Event()
    lateness: list[float] = []
    tick = asyncio.create_task(ticker(stop, lateness))
    done = 0

    async def one_account(n: int, count: int) -> None:
        nonlocal done
        for i in range(count):
            while True:  # the connector picks a free account; all are busy for a moment
                try:
                    req = SubmitRequest(
                        f"s{n}-{i}", 1, "bench", f"{QUESTION}{n}-{i}", entry.platform,
                        "desktop", "cn", "web_search", True,
                    )  # fmt: skip
                    acc = await conn.submit(req)
                    await conn.fetch_evidence(acc.upstream_id, req)
                    done += 1
                    break
                except Exception as exc:
                    if getattr(exc, "cause", "") != "no_account":
                        raise
                    await asyncio.sleep(0.05)

    try:
        # The same ticker with nothing else to do: what the box's load alone costs the loop.
        await asyncio.sleep(3.0)
        idle = sorted(lateness)
        lateness.clear()
        # Warm-up: each context launched and one answer asked (not counted).
        await asyncio.gather(*(one_account(-1 - n, 1) for n in range(contexts)))
        done = 0
        lateness.clear()
        cpu0, t0 = tree_cpu_s(os.getpid()), time.monotonic()
        await asyncio.gather(*(one_account(n, per) for n in range(contexts)))
        wall, cpu = time.monotonic() - t0, tree_cpu_s(os.getpid()) - cpu0
    finally:
        stop.set()
        await tick
        await conn.aclose()
    lateness.sort()
    cores = cpu / wall
    per_min = done / wall * 60
    return {
        "contexts": contexts,
        "answers": done,
        "wall s": round(wall, 1),
        "answers/min": round(per_min, 1),
        "CPU cores used": round(cores, 2),
        "answers/min per core": round(per_min / cores, 1) if cores else None,
        "loop blocked max ms": round(lateness[-1] * 1000, 1) if lateness else None,
        "loop blocked p99 ms": round(lateness[int(0.99 * (len(lateness) - 1))] * 1000, 1)
        if lateness
        else None,
        "idle loop max/p99 ms": _max_p99(idle),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--answers-per-context", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("GEO_CHROMIUM", chromium_path())
    sim = start_simulator()
    rows = []
    try:
        for n in args.contexts:
            rows.append(asyncio.run(batch(sim.url, n, args.answers_per_context)))
    finally:
        sim.stop()
    load = os.getloadavg()
    print_table(
        rows,
        "browser lane, deepseek_web against the simulator (stable_poll_s 2, type_delay_ms 40, "
        f"pacing off); load average after: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}",
    )


if __name__ == "__main__":
    main()
