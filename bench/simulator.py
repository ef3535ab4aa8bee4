"""How many requests per second the platform simulator serves on this machine.

Starts ``python -m geo_pipeline.simulator`` (the same command as ``geo-pipeline simulator``) as its
own process on a free port, then drives it for ``--seconds`` with ``--concurrency`` aiohttp client
coroutines in ``--clients`` processes. Each coroutine repeats what a worker does per sample:
submit (with a fresh idempotency key), poll, fetch the result. Prints requests/s per endpoint kind
and overall, plus the machine. Goal: >= 3,000 requests/s, so that end-to-end throughput
benchmarks of the execution core know the simulator is not their bottleneck.

    python bench/simulator.py [--seconds 10] [--concurrency 64] [--clients 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from collections import Counter

from _machine import cpu_model  # bench/ is on sys.path when a bench runs

QUESTIONS = (
    "国内性价比最高的连锁咖啡品牌有哪些？",
    "Which coffee chain in China has the best value?",
)


def machine() -> str:
    cpu = cpu_model()
    return f"nproc={os.cpu_count()} cpu={cpu} python={platform.python_version()}"


async def _drive(url: str, seconds: float, concurrency: int, tag: str) -> dict[str, int]:
    import aiohttp

    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(url, connector=connector) as session:

        async def worker(w: int) -> None:
            n = 0
            platforms = ("deepseek", "doubao", "kimi", "qwen")
            while time.monotonic() < deadline:
                n += 1
                plat = platforms[(w + n) % len(platforms)]
                body = {
                    "question": QUESTIONS[n % 2],
                    "device": "web",
                    "region": "cn",
                    "mode": "standard",
                    "screenshot": False,
                    "tenant": "bench",
                }
                key = f"{tag}-{w}-{n}:1"
                async with session.post(
                    f"/v1/{plat}/tasks", json=body, headers={"Idempotency-Key": key}
                ) as r:
                    data = await r.json()
                    counts[f"submit_{r.status}"] += 1
                task_id = data["task_id"]
                async with session.get(f"/v1/{plat}/tasks/{task_id}") as r:
                    await r.read()
                    counts[f"poll_{r.status}"] += 1
                async with session.get(f"/v1/{plat}/tasks/{task_id}/result") as r:
                    await r.read()
                    counts[f"result_{r.status}"] += 1

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return dict(counts)


async def _drive_connectors(url: str, seconds: float, concurrency: int, tag: str) -> dict[str, int]:
    """The same loop through the project's SimulatorConnector (one pooled httpx client), i.e.
    what a worker pays per request on top of the simulator."""
    os.environ["GEO_SIMULATOR_URL"] = url
    from geo_pipeline.connectors.base import SubmitRequest
    from geo_pipeline.connectors.factory import ConnectorSet

    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    async with ConnectorSet() as cs:

        async def worker(w: int) -> None:
            n = 0
            platforms = ("deepseek", "doubao", "kimi", "qwen")
            while time.monotonic() < deadline:
                n += 1
                plat = platforms[(w + n) % len(platforms)]
                conn = cs[plat]
                req = SubmitRequest(
                    f"{tag}-{w}-{n}",
                    1,
                    "bench",
                    QUESTIONS[n % 2],
                    plat,
                    "web",
                    "cn",
                    "standard",
                    False,
                )
                acc = await conn.submit(req)
                counts["submit_202"] += 1
                await conn.poll(acc.upstream_id)
                counts["poll_200"] += 1
                await conn.fetch_evidence(acc.upstream_id, req)
                counts["result_200"] += 1

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return dict(counts)


def _client(
    url: str, seconds: float, concurrency: int, tag: str, out: mp.Queue, via: str = "aiohttp"
) -> None:
    import aiohttp  # noqa: F401  - imports are not part of the per-request cost

    if via == "connector":
        import geo_pipeline.connectors.factory
        import geo_pipeline.connectors.transport  # noqa: F401
    cpu0 = time.process_time()
    drive = _drive if via == "aiohttp" else _drive_connectors
    try:
        import uvloop

        counts = uvloop.run(drive(url, seconds, concurrency, tag))
    except ImportError:
        counts = asyncio.run(drive(url, seconds, concurrency, tag))
    counts["_client_cpu_us"] = int((time.process_time() - cpu0) * 1e6)
    out.put(counts)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=64, help="coroutines per client process")
    ap.add_argument("--clients", type=int, default=1, help="client processes")
    ap.add_argument(
        "--via",
        choices=("aiohttp", "connector"),
        default="aiohttp",
        help="raw aiohttp requests, or the project's SimulatorConnector (httpx)",
    )
    args = ap.parse_args()

    proc = subprocess.Popen(
        [sys.executable, "-m", "geo_pipeline.simulator", "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        queue: mp.Queue = mp.Queue()
        clients = [
            mp.Process(
                target=_client,
                args=(url, args.seconds, args.concurrency, f"c{i}", queue, args.via),
            )
            for i in range(args.clients)
        ]
        started = time.monotonic()
        cpu0 = _cpu_seconds(proc.pid)
        for c in clients:
            c.start()
        totals: Counter[str] = Counter()
        for _ in clients:
            totals.update(queue.get(timeout=args.seconds + 60))
        for c in clients:
            c.join()
        elapsed = time.monotonic() - started
        server_cpu = _cpu_seconds(proc.pid) - cpu0
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    print(f"# simulator throughput — {machine()}")
    print(
        f"# {args.clients} client process(es) x {args.concurrency} coroutines, "
        f"{args.seconds:g}s, client via {args.via}, server = 1 process (aiohttp)"
    )
    print(f"{'kind':<10}{'requests':>12}{'req/s':>12}")
    overall = 0
    for kind in ("submit", "poll", "result"):
        n = sum(v for k, v in totals.items() if k.startswith(kind + "_"))
        overall += n
        print(f"{kind:<10}{n:>12}{n / elapsed:>12.0f}")
    print(f"{'overall':<10}{overall:>12}{overall / elapsed:>12.0f}")
    print(
        f"# server CPU {server_cpu:.2f}s = {server_cpu / elapsed:.0%} of one core; "
        f"{server_cpu / max(overall, 1) * 1e6:.0f} us/request -> "
        f"{overall / max(server_cpu, 1e-9):.0f} requests/s per fully used core"
    )
    print(f"# load average now: {open('/proc/loadavg').read().split()[:3]} (shared machine?)")
    client_cpu = totals.pop("_client_cpu_us", 0) / 1e6
    server_us = server_cpu / max(overall, 1) * 1e6
    client_us = client_cpu / max(overall, 1) * 1e6
    cores = os.cpu_count() or 1
    print(
        f"# client CPU {client_us:.0f} us/request; if this machine were otherwise idle, "
        f"server + client would saturate {cores} cores at about "
        f"{cores * 1e6 / max(server_us + client_us, 1e-9):.0f} requests/s "
        f"(server alone: {1e6 / max(server_us, 1e-9):.0f}/s on one core)"
    )
    bad = {k: v for k, v in totals.items() if not k.endswith(("_200", "_202"))}
    if bad:
        print(f"# unexpected statuses: {bad}")
    print(f"# samples/s (submit+poll+result each): {totals['result_200'] / elapsed:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
