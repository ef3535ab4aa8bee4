"""Retention soak: many finished runs' worth of rows and stream entries, then one retention pass
and one stream trim; prints the hot tables' row counts and Redis memory before and after.

    python bench/retention_soak.py                    # 20 runs x 5,000 samples
    python bench/retention_soak.py --runs 4 --samples 1000

What it builds, in a scratch database created from the migrations (server found as the tests
find it) and under a scratch Redis prefix on the local Redis (127.0.0.1:6379 unless
GEO_REDIS_URL): per run, the samples moved to completed through the guarded transitions (the
triggers write the transition log), one attempt and one answer (2 KB of raw text) per sample,
the outbox rows a real run leaves (published), a few settled dead letters, and the stream traffic
(one collect hint per 100 samples read and acknowledged by the ``workers`` group, one completion
entry per sample). No workers run: the soak measures what retention leaves, not throughput.

Then the runs are dated back past the tenant's window (30 days), published outbox rows and dead
letters two days, and the pass runs as production runs it (geo_pipeline.flows.retention, then
geo_pipeline.streams.trim). The completion stream's window is 1 s here instead of 24 h, since
its entries were written seconds ago. The bound stated: after the pass no run past its window
keeps raw text, attempts or transitions, no published outbox row older than a day and no settled
dead letter survive, and every stream holds only what a consumer group still needs (here: none).
Exit code 1 when the bound is not met. The scratch database and keys are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis as redis_lib
from psycopg.rows import dict_row

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.evidence.archive import LocalArchive
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.flows.retention import TableWindows, apply_retention, database_now
from geo_pipeline.runtime import services
from geo_pipeline.store import migrate
from geo_pipeline.streams.trim import trim_streams

TABLES = {
    "samples": "SELECT count(*) AS n FROM geo.samples",
    "answers (raw text kept)": "SELECT count(*) AS n FROM geo.answers WHERE raw_text IS NOT NULL",
    "answers (rows)": "SELECT count(*) AS n FROM geo.answers",
    "attempts": "SELECT count(*) AS n FROM geo.attempts",
    "state_transitions": "SELECT count(*) AS n FROM geo.state_transitions",
    "outbox": "SELECT count(*) AS n FROM geo.outbox",
    "dead_letters": "SELECT count(*) AS n FROM geo.dead_letters",
}
SIZE = (  # live tuple bytes of the hot tables (the files keep their size; the space is reused)
    "SELECT (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM geo.answers t) "
    "+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM geo.attempts t) "
    "+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM geo.state_transitions t) "
    "+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM geo.outbox t) "
    "+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM geo.dead_letters t) AS bytes"
)
RAW = "x" * 2048


def _config(samples: int) -> dict[str, Any]:
    questions = max(1, samples // (2 * 20))
    return {
        "tenant": "soak",
        "brand": {"name": "Acme", "aliases": ["ACME"]},
        "competitors": [{"name": "Globex"}],
        "questions": [f"question number {i} about project tools?" for i in range(questions)],
        "channels": [
            {"platform": "deepseek", "device": "web", "screenshot": "off"},
            {"platform": "kimi", "device": "web"},
        ],
        "repeats": 20,
    }


def _finish_run(conn: psycopg.Connection[Any], run_id: str) -> int:
    """Every sample completed through the guarded transitions, with an attempt and an answer."""
    p = {"run_id": run_id, "raw": RAW}
    steps = [
        "UPDATE geo.samples SET submission_state='submitting', collection_state='running', "
        "lease_until=now()+interval '1 min', fencing_token=fencing_token+1, attempt_no=1 "
        "WHERE run_id=%(run_id)s",
        "UPDATE geo.samples SET submission_state='accepted', upstream_id='u-'||sample_id "
        "WHERE run_id=%(run_id)s",
        "UPDATE geo.samples SET collection_state='completed', evidence_state='stored', "
        "completed_at=now() WHERE run_id=%(run_id)s",
        "UPDATE geo.samples SET analysis_state='accepted' WHERE run_id=%(run_id)s",
        "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id, outcome, "
        "finished_at) SELECT sample_id, 1, fencing_token, 'soak', 'completed', now() "
        "FROM geo.samples WHERE run_id=%(run_id)s",
        "INSERT INTO geo.answers (sample_id, revision, attempt_no, raw_text, sanitized_html, "
        "raw_sha256, captured_at, validity, validity_rule_version) SELECT sample_id, 1, 1, "
        "%(raw)s, '<p>answer</p>', md5(sample_id) || md5(sample_id), now(), 'valid', 'v1' "
        "FROM geo.samples WHERE run_id=%(run_id)s",
        "INSERT INTO geo.outbox (stream, kind, sample_id, run_id, tenant_id, published_at) "
        "SELECT 'completions', 'completion', sample_id, run_id, tenant_id, "
        "now() - interval '2 days' FROM geo.samples WHERE run_id=%(run_id)s",
        "UPDATE geo.outbox SET published_at = now() - interval '2 days' "
        "WHERE run_id=%(run_id)s AND published_at IS NULL",
        "INSERT INTO geo.dead_letters (stream, message_id, sample_id, deliveries, reason, at) "
        "SELECT 'collect:deepseek', 'soak-' || sample_id, sample_id, 5, 'soak', "
        "now() - interval '2 days' FROM (SELECT sample_id FROM geo.samples "
        "WHERE run_id=%(run_id)s LIMIT 5) s",
    ]
    for sql in steps:
        conn.execute(sql, p)  # type: ignore[arg-type]
    conn.commit()
    row = conn.execute("SELECT count(*) AS n FROM geo.samples WHERE run_id=%s", (run_id,))
    return int(row.fetchone()["n"])  # type: ignore[index]


def _streams(r: redis_lib.Redis, ns: str, samples: int) -> None:
    for platform in ("deepseek", "kimi"):
        key = f"{ns}:collect:{platform}"
        try:
            r.xgroup_create(key, "workers", id="0", mkstream=True)
        except redis_lib.ResponseError:
            pass
        pipe = r.pipeline(transaction=False)
        for i in range(max(1, samples // 200)):
            pipe.xadd(key, {"event_id": f"h{i}", "kind": "collect", "samples": "100"})
        pipe.execute()
        while True:
            got = r.xreadgroup("workers", "soak", {key: ">"}, count=1000)
            if not got:
                break
            r.xack(key, "workers", *[mid for mid, _ in got[0][1]])
    pipe = r.pipeline(transaction=False)
    for i in range(samples):
        pipe.xadd(f"{ns}:completions", {"event_id": f"c{i}", "sample_id": f"s{i}"})
    pipe.execute()


def _measure(conn: psycopg.Connection[Any], r: redis_lib.Redis, ns: str) -> dict[str, Any]:
    out: dict[str, Any] = {k: conn.execute(q).fetchone()["n"] for k, q in TABLES.items()}  # type: ignore[index]
    out["hot tables live bytes"] = conn.execute(SIZE).fetchone()["bytes"]  # type: ignore[index]
    keys = sorted(k for k in r.scan_iter(match=f"{ns}:*"))
    out["stream entries"] = sum(int(r.xlen(k)) for k in keys)
    out["stream memory bytes"] = sum(int(r.memory_usage(k) or 0) for k in keys)
    out["redis used_memory"] = int(r.info("memory")["used_memory"])
    conn.commit()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--samples", type=int, default=5000, help="per run")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="geo-soak-"))
    pg = services.postgres(tmp / "pg", admin=True)
    dbname = f"geo_soak_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')  # type: ignore[arg-type]
    db_url = urlunsplit(urlsplit(pg.url)._replace(path="/" + dbname))
    ns = f"geosoak:{uuid.uuid4().hex[:8]}"
    r = redis_lib.Redis.from_url(
        os.environ.get("GEO_REDIS_URL", services.LOCAL_REDIS), decode_responses=True
    )
    caps = load_registry().capabilities()
    prices = {p: c.prices for p, c in caps.items()}
    try:
        with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
            migrate.upgrade(conn)
            conn.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES ('soak', 'soak')")
            conn.commit()
            n = normalise_and_validate(_config(args.samples), caps)
            t0 = time.monotonic()
            total = 0
            for i in range(args.runs):
                plan = build_plan(n, quote(n, prices), f"soak-{i:03d}")
                run_id, _ = create_run(conn, plan, confirm=False, dispatch=False)
                conn.commit()
                total += _finish_run(conn, run_id)
                _streams(r, ns, len(plan.samples))
            built_s = time.monotonic() - t0
            before = _measure(conn, r, ns)
            conn.execute("UPDATE geo.runs SET created_at = now() - interval '40 days'")
            conn.commit()
            time.sleep(1.5)
            t1 = time.monotonic()
            report = apply_retention(
                conn,
                LocalArchive(tmp / "evidence"),
                database_now(conn),
                dry_run=False,
                limit=10_000,
                windows=TableWindows(),
            )
            streams = [f"{ns}:collect:deepseek", f"{ns}:collect:kimi"]
            trimmed = trim_streams(r, streams, [(f"{ns}:completions", 1.0)])
            pass_s = time.monotonic() - t1
            # Autovacuum would do this within minutes; done here so the sizes below show the
            # space the pass freed for reuse (plain VACUUM does not shrink the files).
            with psycopg.connect(db_url, autocommit=True) as vac:
                vac.execute(
                    "VACUUM geo.answers, geo.attempts, geo.state_transitions, geo.outbox, "
                    "geo.dead_letters"
                )
            after = _measure(conn, r, ns)
        result = {
            "runs": args.runs,
            "samples": total,
            "build_s": round(built_s, 1),
            "retention_s": round(pass_s, 1),
            "removed": {k: v for k, v in report.as_dict().items() if k not in ("runs", "now")},
            "trimmed": sum(t.removed for t in trimmed),
            "before": before,
            "after": after,
        }
        width = max(len(k) for k in before)
        print(
            f"{total} samples in {args.runs} runs (built in {built_s:.0f} s); "
            f"retention + trim {pass_s:.1f} s"
        )
        print(f"{'':<{width}}  {'before':>14}  {'after':>14}")
        for k in before:
            print(f"{k:<{width}}  {before[k]:>14,}  {after[k]:>14,}")
        if args.json_out:
            args.json_out.write_text(json.dumps(result, indent=2, default=str))
        bounded = (
            after["answers (raw text kept)"] == 0
            and after["attempts"] == 0
            and after["state_transitions"] == 0
            and after["outbox"] == 0
            and after["dead_letters"] == 0
            and after["stream entries"] <= 2  # the last-delivered hint of each group may remain
        )
        print("bound met" if bounded else "BOUND NOT MET", file=sys.stderr)
        return 0 if bounded else 1
    finally:
        keys = list(r.scan_iter(match=f"{ns}:*"))
        if keys:
            r.delete(*keys)
        r.close()
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')  # type: ignore[arg-type]
        pg.stop()


if __name__ == "__main__":
    raise SystemExit(main())
