"""Memory per live browser context of the browser lane (issue #32): N persistent Chromium
profiles (one per account, as the connector keeps them), each logged in to the simulator's
DeepSeek web app with one answered question on screen; PSS (proportional set size: shared pages
split between the processes sharing them) of this process's whole tree, minus the tree before
any browser (Python, the Playwright driver, the simulator).

    .venv/bin/python bench/browser_memory.py --contexts 1 4 8

Needs Debian's chromium (GEO_CHROMIUM or /usr/bin/chromium)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from _machine import machine_info  # bench/ is on sys.path when a bench runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geo_pipeline.connectors.browser.connector import CHROMIUM_ARGS, chromium_path
from geo_pipeline_tests.fixtures.simulator import start_simulator


def tree_pss_mb(root: int) -> tuple[float, int]:
    """PSS of ``root`` and all its descendants (MiB) and how many processes that is."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    seen: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    kib = 0
    for pid in seen:
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
                kib += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            continue
    return kib / 1024, len(seen)


async def measure(counts: list[int]) -> None:
    from playwright.async_api import async_playwright

    sim = start_simulator()
    try:
        async with async_playwright() as pw:
            base, _ = tree_pss_mb(os.getpid())
            print(f"{machine_info()}\nbaseline (python + driver + simulator): {base:.0f} MiB")
            for n in counts:
                root = tempfile.mkdtemp(prefix="geo-browser-bench-")
                contexts = []
                for i in range(n):
                    ctx = await pw.chromium.launch_persistent_context(
                        f"{root}/{i}",
                        executable_path=chromium_path(),
                        headless=True,
                        args=list(CHROMIUM_ARGS),
                        viewport={"width": 1366, "height": 768},
                    )
                    page = ctx.pages[0] if ctx.pages else await ctx.new_page()
                    await page.goto(f"{sim.url}/ui/deepseek/login")
                    await page.fill("input[name=account]", f"a{i}")
                    await page.click("button[type=submit]")
                    await page.click("button.toggle")
                    await page.fill("textarea#chat-input", "国内最好喝的咖啡品牌？")
                    await page.click(".send")
                    await page.wait_for_selector("a.conversation")
                    contexts.append(ctx)
                total, procs = tree_pss_mb(os.getpid())
                print(
                    f"contexts={n}: browsers {total - base:.0f} MiB PSS, "
                    f"{(total - base) / n:.0f} MiB per context, whole tree {total:.0f} MiB, "
                    f"{procs} processes"
                )
                for ctx in contexts:
                    await ctx.close()
    finally:
        sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1, 4, 8])
    asyncio.run(measure(parser.parse_args().contexts))


if __name__ == "__main__":
    main()
