"""Benchmark of the analysis layer.

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

from _machine import cpu_model  # bench/ is on sys.path when a bench runs

from geo_pipeline.domain.config_model import Brand
from geo_pipeline.domain.mentions import BrandSet, CitationRef, detect, matcher_for

LATIN = ["Acme", "Nimbus", "Vertex", "Kestrel", "Quanta", "Lumen", "Orbit", "Zephyr", "Cobalt",
         "Harbor", "Summit", "Pioneer", "Falcon", "Cascade", "Aurora", "Beacon", "Crescent",
         "Dynamo", "Ember", "Fjord", "Glacier", "Helix", "Ion", "Jade", "Krypton"]  # fmt: skip
CJK = (
    "瑞幸星巴克库迪咖啡华为小米苹果联想海尔格力美的长虹奥克斯"
    "海信创维比亚迪吉利长城奇瑞蔚来理想小鹏零跑哪吒极氪"
)


def machine() -> str:
    cpu = cpu_model()
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
        if rng.random() < (0.12 if chinese else 0.05):
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
        # CPU time of this process: "on one core", whatever else the machine is doing.
        t0 = time.process_time()
        for i in range(n):
            detect(answers[i % len(answers)], bs, cites)
        dt = time.process_time() - t0
        rows.append((f"detect: {label}, 50 brands x 5 names", f"{n / dt:,.0f} answers/s"))
    return rows


def _emit(rows: list[tuple[str, str]], row: tuple[str, str]) -> None:
    """Print a result as soon as it is measured (the 100k run takes minutes)."""
    rows.append(row)
    print(f"{row[0]:<62}  {row[1]}", flush=True)


def _admin_url() -> str:
    from geo_pipeline.store.db import to_psycopg_url

    url = os.environ.get("GEO_BENCH_DATABASE_URL") or os.environ.get("GEO_DATABASE_URL")
    return to_psycopg_url(url or "postgresql://postgres@127.0.0.1:5432/postgres")


def _bench_config(samples: int) -> dict:
    """A config whose plan has ``samples`` samples: 10 targets x 20 repeats x Q questions."""
    questions = max(1, samples // 200)
    return {
        "tenant": "bench",
        "brand": {"name": "瑞幸咖啡", "aliases": ["Luckin Coffee", "luckin", "瑞幸"],
                  "domains": ["luckincoffee.com"]},
        "competitors": [
            {"name": n, "aliases": [a], "domains": [f"{a.lower().replace(' ', '')}.com"]}
            for n, a in [("星巴克", "Starbucks"), ("库迪咖啡", "Cotti Coffee"),
                         ("Manner Coffee", "Manner"), ("Tims咖啡", "Tim Hortons"),
                         ("Costa咖啡", "Costa Coffee"), ("幸运咖", "Lucky Cup"),
                         ("挪瓦咖啡", "NOWWA"), ("Peet's Coffee", "皮爷咖啡"),
                         ("M Stand", "M Stand Coffee")]
        ],
        "questions": [f"第{i}个问题：哪个咖啡品牌性价比最高？" for i in range(questions)],
        "channels": [
            {"platform": "deepseek", "device": "web", "regions": ["cn", "global"],
             "modes": ["standard", "deep_thinking", "web_search"]},
            {"platform": "doubao", "device": "web", "modes": ["standard", "deep_thinking"]},
            {"platform": "kimi", "device": "web", "modes": ["standard", "web_search"]},
        ],
        "repeats": 20,
    }  # fmt: skip


def bench_db(samples: int, keep: bool = False) -> list[tuple[str, str]]:
    import hashlib
    import uuid

    import psycopg
    from psycopg.rows import dict_row

    from geo_pipeline.analysis import analyse_run, refresh_analytics
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.config import normalise_and_validate
    from geo_pipeline.domain.plan import build_plan, quote
    from geo_pipeline.flows.create_run import create_run
    from geo_pipeline.store import migrate

    admin = _admin_url()
    name = f"geo_bench_analysis_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    url = admin.rsplit("/", 1)[0] + "/" + name
    rows: list[tuple[str, str]] = []
    try:
        with psycopg.connect(url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
            migrate.upgrade(conn)
            caps = load_registry().capabilities()
            config = normalise_and_validate(_bench_config(samples), caps)
            plan = build_plan(
                config, quote(config, {p: c.prices for p, c in caps.items()}), "bench-run"
            )
            create_run(conn, plan, confirm=False, dispatch=False)  # type: ignore[arg-type]
            n = len(plan.samples)
            t0 = time.perf_counter()
            # Completed with stored evidence, through the allowed transitions, as workers would.
            conn.execute("UPDATE geo.samples SET submission_state = 'submitting'")
            conn.execute(
                "UPDATE geo.samples SET submission_state = 'accepted', upstream_id = 'u' ||"
                " sample_id, collection_state = 'running', lease_until = now() + interval '1h'"
            )
            conn.execute(
                "UPDATE geo.samples SET collection_state = 'completed', lease_until = NULL,"
                " evidence_state = 'stored', completed_at = now()"
            )
            rng = random.Random(11)
            brands = [config.brand, *config.competitors]
            filler = "这家咖啡的价格、口味和门店数量都各有特点，适合不同人群。" * 6
            with conn.cursor() as cur:
                with cur.copy(
                    "COPY geo.answers (sample_id, revision, attempt_no, raw_text, sanitized_html,"
                    " raw_sha256, captured_at, validity, validity_reason, validity_rule_version)"
                    " FROM STDIN"
                ) as copy:
                    for i, s in enumerate(plan.samples):
                        picks = rng.sample(brands, rng.randint(0, 4))
                        text = filler + "".join(f"\n- {rng.choice(b.names)}：推荐。" for b in picks)
                        invalid = i % 25 == 0
                        copy.write_row((
                            s.sample_id, 1, 1, text, text,
                            hashlib.sha256(text.encode()).hexdigest(), "2026-11-29T00:00:00Z",
                            "invalid" if invalid else "valid",
                            "error_page" if invalid else None, "bench",
                        ))  # fmt: skip
                with cur.copy(
                    "COPY geo.citations (sample_id, revision, ordinal, relation, raw_url,"
                    " normalized_url, registrable_domain) FROM STDIN"
                ) as copy:
                    for s in plan.samples:
                        for k in range(2):
                            b = rng.choice(brands)
                            dom = b.domains[0] if b.domains else "zhihu.com"
                            rel = "cited" if k == 0 else "retrieved"
                            u = f"https://{dom}/a"
                            copy.write_row((s.sample_id, 1, k, rel, u, u, dom))
            conn.commit()
            _emit(rows, (f"setup: {n:,} samples completed + answers/citations COPY",
                         f"{time.perf_counter() - t0:,.1f} s"))  # fmt: skip
            t0 = time.perf_counter()
            summary = analyse_run(conn, "bench-run", refresh=False)  # type: ignore[arg-type]
            dt = time.perf_counter() - t0
            _emit(rows, (f"analyse_run: {summary.analysed:,} samples x {len(brands)} brands",
                         f"{dt:,.1f} s ({summary.analysed / dt:,.0f} samples/s)"))  # fmt: skip
            t0 = time.perf_counter()
            counts = refresh_analytics(conn, "bench-run")  # type: ignore[arg-type]
            dt = time.perf_counter() - t0
            _emit(rows, (f"refresh_analytics: {sum(counts.values()):,} rows in 4 tables",
                         f"{dt:,.1f} s"))  # fmt: skip
            t0 = time.perf_counter()
            again = analyse_run(conn, "bench-run")  # type: ignore[arg-type]
            dt = time.perf_counter() - t0
            _emit(rows, (f"analyse_run again (idempotent: {again.analysed} analysed) + refresh",
                         f"{dt:,.1f} s"))  # fmt: skip
    finally:
        if keep:
            print(f"kept database {url}")
        else:
            with psycopg.connect(admin, autocommit=True) as a:
                a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--skip-db", action="store_true")
    ap.add_argument("--keep", action="store_true", help="Keep the scratch database.")
    args = ap.parse_args()
    print(f"machine: {machine()}", flush=True)
    for name, value in bench_detection(args.answers):
        print(f"{name:<62}  {value}", flush=True)
    if not args.skip_db:
        bench_db(args.samples, args.keep)


if __name__ == "__main__":
    main()
