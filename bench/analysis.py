"""Benchmark of the analysis layer (issue 6).

1. Mention detection throughput: 50 brands x 5 aliases, 1 KB answers (English and Chinese
   mixes), one core -- goal >= 20,000 answers/s.
2. Analyse + refresh the analyst tables for a synthetic 100,000-sample run, answers inserted
   with COPY (needs PostgreSQL: GEO_BENCH_DATABASE_URL or GEO_DATABASE_URL or
   postgresql://postgres@127.0.0.1:5432/postgres as the admin URL; a scratch database is
   created and dropped).

Run: python bench/analysis.py [--samples 100000] [--skip-db]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from geo_pipeline.domain.config import Brand
from geo_pipeline.domain.mentions import BrandSet, CitationRef, detect, matcher_for

LATIN = ["Acme", "Nimbus", "Vertex", "Kestrel", "Quanta", "Lumen", "Orbit", "Zephyr", "Cobalt",
         "Harbor", "Summit", "Pioneer", "Falcon", "Cascade", "Aurora", "Beacon", "Crescent",
         "Dynamo", "Ember", "Fjord", "Glacier", "Helix", "Ion", "Jade", "Krypton"]  # fmt: skip
CJK = (
    "瑞幸星巴克库迪咖啡华为小米苹果联想海尔格力美的长虹奥克斯"
    "海信创维比亚迪吉利长城奇瑞蔚来理想小鹏零跑哪吒极氪"
)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"nproc={os.cpu_count()}, {cpu}, Python {platform.python_version()}"


def make_brands(rng: random.Random) -> BrandSet:
    brands = []
    for i in range(50):
        if i % 2 == 0:
            base = f"{LATIN[i // 2 % len(LATIN)]}{i}"
            names = [f"{base} Corp", base, f"{base}X", f"{base} Labs", f"{base}-Pro"]
        else:
            a, b = rng.sample(CJK, 2), rng.sample(CJK, 2)
            base = "".join(a) + "".join(b) + str(i)
            names = [base, base + "集团", base + "科技", f"{base}官方", f"{base}旗舰"]
        brands.append(Brand(names[0], tuple(names[1:5]), (f"brand{i}.com",)))
    return BrandSet(tuple(brands))


WORDS = (
    "the best value for money is often a matter of taste and price many users prefer "
    "strong coffee while others choose tea quality service location and app discounts "
    "all play a role when people compare options in large cities"
).split()


def make_answer(rng: random.Random, bs: BrandSet, chinese: bool) -> str:
    """About 1 KB (UTF-8) of answer: paragraphs and list items, ~8 brand mentions, some
    full-width punctuation in Chinese answers, the way engines write."""
    latin = [b for b in bs.brands if b.name.isascii()]
    cjk = [b for b in bs.brands if not b.name.isascii()]
    parts: list[str] = []
    size = 0
    item = 0
    while size < 1024:
        if rng.random() < 0.12:
            b = rng.choice(cjk if chinese and rng.random() < 0.8 else latin)
            piece = rng.choice(b.names) + (" " if not chinese else "")
        elif rng.random() < 0.04:
            item += 1
            piece = f"\n{item}. "
        elif chinese:
            piece = "".join(rng.choice(CJK) for _ in range(rng.randint(2, 8))) + rng.choice(
                "，。、："
            )
        else:
            piece = rng.choice(WORDS) + rng.choice(["", "", "", ",", "."]) + " "
        parts.append(piece)
        size += len(piece.encode("utf-8"))
    return "".join(parts)


def bench_detection(n: int) -> list[tuple[str, str]]:
    rng = random.Random(7)
    bs = make_brands(rng)
    matcher_for(bs)
    rows = []
    for label, chinese in (("English 1 KB", False), ("Chinese 1 KB", True)):
        answers = [make_answer(rng, bs, chinese) for _ in range(500)]
        cites = [CitationRef("cited", "brand3.com"), CitationRef("retrieved", "example.org")]
        detect(answers[0], bs, cites)  # warm the fold table and automaton
        t0 = time.perf_counter()
        for i in range(n):
            detect(answers[i % len(answers)], bs, cites)
        dt = time.perf_counter() - t0
        rows.append((f"detect: {label}, 50 brands x 5 names", f"{n / dt:,.0f} answers/s"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--skip-db", action="store_true")
    args = ap.parse_args()
    rows = bench_detection(args.answers)
    if not args.skip_db:
        from bench_analysis_db import bench_db  # type: ignore[import-not-found]

        rows += bench_db(args.samples)
    print(f"machine: {machine()}")
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
