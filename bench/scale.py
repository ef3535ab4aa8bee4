"""Scale sweep: how each path's cost grows with its data (issue #39). For every path, each size
is measured three times; the table shows the median time with its spread, the CPU seconds
(this process + the database backend), the rows, buffers and statements PostgreSQL handled, and
per path the fitted growth exponent (the slope of log cost over log size: 1.0 is linear).

    python bench/scale.py            # every path at its default sizes (a few minutes on 2 cores)
    python bench/scale.py --quick    # each path without its largest default size
    python bench/scale.py --big      # plus the slow sizes (settlement of 100k charges, ...)
    python bench/scale.py --only settle --repeats 5

Paths plug in: every module bench/_scale_*.py exposes ``PATHS``, a list of
``(name, sizes, measure)`` (optionally a fourth item: sizes run only with ``--big``), where
``measure(size: int) -> dict`` returns at least ``"seconds"`` and optionally ``"cpu_s"``,
``"rows"``, ``"buffers"``, ``"statements"``. Needs PostgreSQL (GEO_BENCH_ADMIN_URL, default
postgresql://postgres@127.0.0.1:5432/postgres); each module makes and drops its own databases.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _machine import print_table  # noqa: E402

GOAL_SLOPE = 1.1
WORK_KEYS = ("rows", "buffers", "statements")


def load_modules() -> list[ModuleType]:
    modules = []
    for path in sorted(HERE.glob("_scale_*.py")):
        spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(value) over log(size); NaN with fewer than two usable points."""
    pts = [(math.log(s), math.log(v)) for s, v in zip(sizes, values, strict=True) if s > 0 < v]
    if len(pts) < 2:
        return float("nan")
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else float("nan")


def sizes_for(entry: Sequence[Any], quick: bool, big: bool) -> list[int]:
    sizes = sorted(int(s) for s in entry[1])
    if quick and len(sizes) > 2:
        sizes = sizes[:-1]
    if big and len(entry) > 3:
        sizes += sorted(int(s) for s in entry[3])
    return sizes


def sweep(
    name: str, sizes: list[int], measure: Callable[[int], dict[str, Any]], repeats: int
) -> tuple[list[dict[str, object]], dict[str, float]]:
    rows: list[dict[str, object]] = []
    medians: dict[str, list[float]] = {"seconds": [], "cpu_s": [], **{k: [] for k in WORK_KEYS}}
    for size in sizes:
        runs = [measure(size) for _ in range(repeats)]
        secs = [float(r["seconds"]) for r in runs]
        row: dict[str, object] = {
            "path": name,
            "size": f"{size:,}",
            "median_s": f"{statistics.median(secs):.3f}",
            "spread_s": f"{min(secs):.3f}-{max(secs):.3f}",
        }
        medians["seconds"].append(statistics.median(secs))
        for key in ("cpu_s", *WORK_KEYS):
            got = [float(r[key]) for r in runs if key in r]
            medians[key].append(statistics.median(got) if got else float("nan"))
            if key == "cpu_s":
                row[key] = f"{medians[key][-1]:.3f}" if got else "-"
            else:
                row[key] = f"{int(medians[key][-1]):,}" if got else "-"
        rows.append(row)
        work = ", ".join(f"{k} {row[k]}" for k in ("cpu_s", *WORK_KEYS) if row[k] != "-")
        print(f"  {name} @ {size:,}: {row['median_s']} s ({row['spread_s']}); {work}", flush=True)
    slopes = {k: slope(sizes, v) for k, v in medians.items()}
    return rows, slopes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="leave out each path's largest size")
    ap.add_argument("--big", action="store_true", help="add the slow sizes (e.g. 1M samples)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per size (default 3)")
    ap.add_argument("--only", default="", help="only paths whose name contains this text")
    args = ap.parse_args()

    table: list[dict[str, object]] = []
    fits: list[dict[str, object]] = []
    for module in load_modules():
        for entry in module.PATHS:
            name, measure = str(entry[0]), entry[2]
            if args.only and args.only not in name:
                continue
            sizes = sizes_for(entry, args.quick, args.big)
            rows, slopes = sweep(name, sizes, measure, args.repeats)
            table += rows
            fit: dict[str, object] = {"path": name, "sizes": f"{sizes[0]:,}-{sizes[-1]:,}"}
            for key, value in slopes.items():
                fit[f"slope_{key}"] = "-" if math.isnan(value) else f"{value:.2f}"
            worst = max((v for k, v in slopes.items() if k != "cpu_s" and not math.isnan(v)),
                        default=float("nan"))  # fmt: skip
            fit["goal"] = f"<= {GOAL_SLOPE} " + ("met" if worst <= GOAL_SLOPE else "MISSED")
            fits.append(fit)
    print_table(
        table,
        f"bench/scale.py — {args.repeats} repeats per size: median and spread (min-max) of the "
        "wall time; cpu_s, rows (rows + index entries read), buffers and statements: medians",
    )
    print_table(
        fits,
        "growth exponents (least-squares slope of log cost over log size; 1.0 = linear). The "
        "goal is on the seconds and the work counted; cpu_s is shown for a shared machine",
    )


if __name__ == "__main__":
    main()
