"""What recording a completion batch's evidence rows costs PostgreSQL, statement by statement and
lever by lever (issue 33: the S3 row's database share over the evidence-off row's).

    python bench/evidence_rows_cost.py                 # 2,000 samples, batches of 50, 3 repeats
    python bench/evidence_rows_cost.py --samples 2000 --batch 500 --reps 5

Realistic rows: one real S3 row of bench/throughput.py (workers, simulator over HTTP, WARC
evidence to SeaweedFS) runs on a scratch database that is kept; a second run of ``--table``
samples is then planned there (queued, never executed; geo.samples then holds 22,000 rows by
default, so a plan that scans it shows) and the first run's evidence rows -- answers,
citations, WARC index rows, evidence object rows -- are recorded again for its samples with the
recording's own code (evidence.lock_samples, evidence.rows read_for_record and write_rows: COPY),
in batches of
``--batch`` samples (the S3 row's own batches: median 45), each batch in a transaction that is
rolled back, after the fence check's FOR UPDATE of its samples, as in finish_batch. The figure
is the server backend's CPU during each statement (/proc/<pid>/schedstat, ns), per sample, and
this process's CPU over them (the worker's database thread's share: encoding and sending).
Variants drop one thing inside the same rolled-back transaction first (an index, a statement
trigger), replace one (0071's citation guard) or skip a statement, so each lever is priced on
the same rows; variants are interleaved repeat by repeat, and a VACUUM between repeats removes
the rolled-back entries. Nothing is kept: the database is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput
from _machine import print_table

from geo_pipeline.evidence import rows as evidence_rows
from geo_pipeline.store.queries import Q

STATEMENTS = [
    "lock_samples",
    "samples_for_record",
    "answers",
    "citations",
    "warc_records",
    "objects",
]
# The statements as they were before COPY (issue 33: INSERT ... SELECT FROM jsonb_to_recordset,
# object revisions numbered and digests deduplicated by the INSERT), priced in the same sitting
# as the variant "jsonb INSERT (before)".
BEFORE_COPY = {
    "samples_for_record": """SELECT s.sample_id, s.tenant_id, s.run_id, s.screenshot_policy,
       s.evidence_state, s.evidence_reason, a.revision, a.content_sha256, a.validity,
       EXISTS (SELECT 1 FROM geo.evidence_objects o
                WHERE o.sample_id = s.sample_id AND o.kind = 'screenshot') AS has_screenshot
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.content_sha256, a1.validity FROM geo.answers a1
                      WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
 WHERE s.sample_id = ANY(%(sample_ids)s::text[]);""",
    "insert_answers": """INSERT INTO geo.answers
  (sample_id, tenant_id, revision, attempt_no, upstream_id, raw_text, sanitized_html,
   raw_sha256, content_sha256, captured_at, provider_truncated, validity, validity_reason,
   validity_rule_version, warnings, search_queries, web_search_used)
SELECT k.sample_id, k.tenant_id, k.revision, k.attempt_no, k.upstream_id, k.raw_text,
       k.sanitized_html, k.raw_sha256, k.content_sha256, k.captured_at, k.provider_truncated,
       k.validity, k.validity_reason, k.validity_rule_version,
       ARRAY(SELECT jsonb_array_elements_text(k.warnings)),
       ARRAY(SELECT jsonb_array_elements_text(coalesce(k.search_queries, '[]'::jsonb))),
       k.web_search_used
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS k(
       sample_id text, tenant_id text, revision integer, attempt_no integer, upstream_id text,
       raw_text text,
       sanitized_html text, raw_sha256 text, content_sha256 text, captured_at timestamptz,
       provider_truncated boolean, validity text, validity_reason text,
       validity_rule_version text, warnings jsonb, search_queries jsonb,
       web_search_used boolean);""",
    "insert_citations": """INSERT INTO geo.citations
  (sample_id, tenant_id, revision, ordinal, citation_key, relation, raw_url, normalized_url,
   registrable_domain, title, span_start, span_end, cited_text)
SELECT k.sample_id, k.tenant_id, k.revision, k.ordinal, k.citation_key, k.relation, k.raw_url,
       k.normalized_url, k.registrable_domain, k.title, k.span_start, k.span_end, k.cited_text
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS k(
       sample_id text, tenant_id text, revision integer, ordinal integer, citation_key text,
       relation text,
       raw_url text, normalized_url text, registrable_domain text, title text,
       span_start integer, span_end integer, cited_text text);""",
    "insert_warc_records": """INSERT INTO geo.warc_records
  (object_key, record_offset, record_length, tenant_id, run_id, sample_id, record_type,
   record_id, target_uri, kind, mime_type, block_sha256, payload_sha256, payload_size,
   attempt_no, captured_at)
SELECT k.object_key, k.record_offset, k.record_length, k.tenant_id, k.run_id, k.sample_id,
       k.record_type, k.record_id, k.target_uri, k.kind, k.mime_type, k.block_sha256,
       k.payload_sha256, k.payload_size, k.attempt_no, k.captured_at
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS k(
       object_key text, record_offset bigint, record_length bigint, tenant_id text,
       run_id text, sample_id text, record_type text, record_id text, target_uri text,
       kind text, mime_type text, block_sha256 text, payload_sha256 text, payload_size bigint,
       attempt_no integer, captured_at timestamptz)
ON CONFLICT (object_key, record_offset) DO NOTHING;""",
    "insert_objects": """INSERT INTO geo.evidence_objects
  (sample_id, tenant_id, run_id, revision, kind, storage_key, sha256, size_bytes, mime_type,
   attempt_no, captured_at)
SELECT k.sample_id, k.tenant_id, k.run_id,
       coalesce((SELECT max(o.revision) FROM geo.evidence_objects o
                  WHERE o.sample_id = k.sample_id AND o.kind = k.kind), 0) + 1,
       k.kind, k.storage_key, k.sha256, k.size_bytes, k.mime_type, k.attempt_no, k.captured_at
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS k(
       sample_id text, tenant_id text, run_id text, kind text, storage_key text, sha256 text,
       size_bytes bigint, mime_type text, attempt_no integer, captured_at timestamptz)
ON CONFLICT (sample_id, kind, sha256) DO NOTHING
RETURNING sample_id, kind;""",
}
# Migration 0071's citation guard (replaced by 0089): its lock query is planned as a hash join
# over a sequential scan of geo.samples; priced here against 0089's in the same sitting.
GUARD_0071 = """CREATE OR REPLACE FUNCTION geo.guard_citation_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
  bad record;
BEGIN
  PERFORM 1 FROM geo.samples s
   WHERE s.sample_id IN (SELECT DISTINCT n.sample_id FROM new_citations n)
   ORDER BY s.sample_id
   FOR KEY SHARE OF s;
  SELECT k.sample_id, k.revision INTO bad
  FROM (SELECT DISTINCT n.sample_id, n.revision FROM new_citations n) k
  WHERE NOT EXISTS (SELECT 1 FROM geo.answers a
                     WHERE a.sample_id = k.sample_id AND a.revision = k.revision)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'geo: citation of sample % revision %: no such answer revision',
      bad.sample_id, bad.revision USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END $$"""
# name -> (DDL run first in the rolled-back transaction, statements skipped)
VARIANTS: dict[str, tuple[list[str], set[str]]] = {
    "as is": ([], set()),
    "no warc_records_run": (["DROP INDEX geo.warc_records_run"], set()),
    "no warc_records_sample": (["DROP INDEX geo.warc_records_sample"], set()),
    "no citations_domain": (["DROP INDEX geo.citations_domain"], set()),
    "no citation guard": (["DROP TRIGGER citations_guard_insert ON geo.citations"], set()),
    "no object guard": (
        ["DROP TRIGGER evidence_objects_guard_insert ON geo.evidence_objects"],
        set(),
    ),
    "no object rows": ([], {"objects"}),
    "jsonb INSERT (before)": ([], set()),
    "0071 citation guard": ([GUARD_0071], set()),
}

ANSWER_COLS = (
    "sample_id, tenant_id, revision, attempt_no, upstream_id, raw_text, sanitized_html, "
    "raw_sha256, content_sha256, captured_at, provider_truncated, validity, validity_reason, "
    "validity_rule_version, to_jsonb(warnings) AS warnings, to_jsonb(search_queries) AS "
    "search_queries, web_search_used"
)
CITATION_COLS = (
    "sample_id, tenant_id, revision, ordinal, citation_key, relation, raw_url, normalized_url, "
    "registrable_domain, title, span_start, span_end, cited_text"
)
WARC_COLS = (
    "object_key, record_offset, record_length, tenant_id, run_id, sample_id, record_type, "
    "record_id, target_uri, kind, mime_type, block_sha256, payload_sha256, payload_size, "
    "attempt_no, captured_at"
)
OBJECT_COLS = (
    "sample_id, tenant_id, run_id, kind, storage_key, sha256, size_bytes, mime_type, "
    "attempt_no, captured_at"
)


DIGESTS = ("raw_sha256", "content_sha256", "sha256", "block_sha256", "payload_sha256")


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        return int(f.read().split()[0])


def _rows(conn: psycopg.Connection[Any], table: str, cols: str, run_id: str) -> list[dict]:
    where = (
        f"sample_id IN (SELECT sample_id FROM geo.samples WHERE run_id = '{run_id}')"
        if table in ("answers", "citations")
        else f"run_id = '{run_id}'"
    )
    sql = f"SELECT {cols} FROM geo.{table} WHERE {where}"
    return [dict(r) for r in conn.execute(sql).fetchall()]  # type: ignore[arg-type]


def source_rows(url: str, src_run: str, dst_run: str) -> list[dict[str, list[dict]]]:
    """The source run's evidence rows moved to the target run's samples, one dict per target
    sample (answers, citations, warc, objects), in sample order."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        ids = {}
        for run in (src_run, dst_run):
            ids[run] = [r["sample_id"] for r in conn.execute(
                "SELECT sample_id FROM geo.samples WHERE run_id = %s ORDER BY sample_id", [run]
            ).fetchall()]  # fmt: skip
        to = dict(zip(ids[src_run], ids[dst_run], strict=False))
        per: dict[str, dict[str, list[dict]]] = {
            s: {"answers": [], "citations": [], "warc": [], "objects": []} for s in to.values()
        }
        for key, table, cols in (
            ("answers", "answers", ANSWER_COLS),
            ("citations", "citations", CITATION_COLS),
            ("warc", "warc_records", WARC_COLS),
            ("objects", "evidence_objects", OBJECT_COLS),
        ):
            for r in _rows(conn, table, cols, src_run):
                new = to.get(r["sample_id"])
                if new is None:
                    continue
                r["sample_id"] = new
                for k in ("run_id",):
                    if k in r:
                        r[k] = dst_run
                for k in ("object_key", "storage_key"):
                    if k in r:
                        r[k] = r[k].replace(src_run, dst_run)
                for k, v in list(r.items()):
                    if hasattr(v, "isoformat"):
                        r[k] = v.isoformat()
                    elif isinstance(v, str) and k in DIGESTS:
                        r[k] = v.strip()
                per[new][key].append(r)
    return [per[s] for s in ids[dst_run] if s in per and per[s]["answers"]]


def _step(
    conn: psycopg.Connection[Any],
    variant: str,
    name: str,
    ids: list[str],
    rows: dict[str, list[dict]],
    samples: dict[str, dict],
) -> None:
    """One statement of the recording: the recording's own code (evidence.rows
    read_for_record, write_rows table by table: COPY), or the INSERTs it replaced."""
    if name == "lock_samples":
        conn.execute(Q("evidence.lock_samples"), {"sample_ids": ids})
    elif variant == "jsonb INSERT (before)":
        sql = BEFORE_COPY[
            "samples_for_record" if name == "samples_for_record" else f"insert_{name}"
        ]
        cur = conn.execute(sql, {"sample_ids": ids} if name == "samples_for_record"  # type: ignore[arg-type]
                           else {"rows": Jsonb(rows[name])})  # fmt: skip
        if cur.description is not None:
            cur.fetchall()
    elif name == "samples_for_record":
        samples.update(evidence_rows.read_for_record(conn, ids))
    else:
        evidence_rows.write_rows(conn, samples, *[rows[t] if t == name else [] for t in TABLES])


TABLES = ("answers", "citations", "warc_records", "objects")  # write_rows' order


def _values(table: str, rows: list[dict]) -> list[Any]:
    """The rows as recording hands them to write_rows: tuples in the COPY's column order
    (evidence.rows ``*_COLUMNS``; dicts for a checkout from before them)."""
    name = {"answers": "ANSWER", "citations": "CITATION", "warc_records": "WARC",
            "objects": "OBJECT"}[table]  # fmt: skip
    columns = getattr(evidence_rows, f"{name}_COLUMNS", None)
    if columns is None:
        return rows
    return [tuple(r[c] for c in columns) for r in rows]


def one_pass(url: str, batches: list[list[dict[str, list[dict]]]], variant: str) -> dict[str, int]:
    """Record every batch once under ``variant`` (each batch rolled back): CPU ns by statement."""
    ddl, skip = VARIANTS[variant]
    out = dict.fromkeys([*STATEMENTS, "client"], 0)
    with psycopg.connect(url, row_factory=dict_row) as conn:
        pid = conn.info.backend_pid
        for batch in batches:
            ids = [b["answers"][0]["sample_id"] for b in batch]
            answers = [r for b in batch for r in b["answers"]]
            citations = [r for b in batch for r in b["citations"]]
            warc = [r for b in batch for r in b["warc"]]
            objects = [r for b in batch for r in b["objects"]]
            for stmt in ddl:
                conn.execute(stmt)  # type: ignore[arg-type]
            # As finish_batch: the batch's sample rows are locked FOR UPDATE by the fence check
            # before recording (the guards' FOR KEY SHARE then finds them locked already).
            conn.execute(
                "SELECT 1 FROM geo.samples WHERE sample_id = ANY(%s) ORDER BY sample_id "
                "FOR UPDATE", [ids]
            ).fetchall()  # fmt: skip
            rows = {"answers": answers, "citations": citations, "warc_records": warc,
                    "objects": objects}  # fmt: skip
            if variant != "jsonb INSERT (before)":  # recording's rows (not timed: recording
                rows = {t: _values(t, r) for t, r in rows.items()}  # builds them, not COPY)
            samples: dict[str, dict] = {}
            for name in STATEMENTS:
                if name in skip:
                    continue
                t0, c0 = _cpu_ns(pid), time.process_time_ns()
                _step(conn, variant, name, ids, rows, samples)
                out[name] += _cpu_ns(pid) - t0
                out["client"] += time.process_time_ns() - c0
            conn.rollback()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM geo.answers, geo.citations, geo.warc_records, geo.evidence_objects")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument(
        "--batch",
        type=int,
        default=50,
        help="samples per recorded batch (the S3 row's completion transactions: median 45)",
    )
    ap.add_argument(
        "--table",
        type=int,
        default=20000,
        help="samples of the second run (geo.samples holds both runs': a scan grows with it)",
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    kept: list[str] = []
    real_drop = throughput.drop_db
    throughput.drop_db = kept.append  # keep the S3 row's database: its rows are the source
    try:
        row = throughput.run_mode("http", args.samples, "s3", False, 2, 500)
    finally:
        throughput.drop_db = real_drop
    (name,) = kept
    url = throughput.db_url_for(name)
    try:
        with psycopg.connect(url) as c:
            # Each completion transaction stamps its answers with one now(): answers per
            # transaction is the batch size the workers really recorded in the S3 row.
            sizes = [r[0] for r in c.execute(
                "SELECT count(*) FROM geo.answers GROUP BY stored_at ORDER BY 1"
            ).fetchall()]  # fmt: skip
        real_batch = (
            f"batch sizes in the S3 row: {len(sizes)} transactions, median "
            f"{statistics.median(sizes):g}, mean {sum(sizes) / len(sizes):.1f}, max {max(sizes)}"
        )
        throughput.make_run(url, max(args.samples, args.table), "cost-target")
        per_sample = source_rows(url, "bench-http", "cost-target")
        n = len(per_sample)
        counts = {k: sum(len(p[k]) for p in per_sample) / n for k in per_sample[0]}
        batches = [per_sample[i : i + args.batch] for i in range(0, n, args.batch)]
        variants = args.variants.split(",")
        got: dict[str, list[dict[str, int]]] = {v: [] for v in variants}
        for rep in range(args.reps):
            for v in variants if rep % 2 == 0 else variants[::-1]:
                got[v].append(one_pass(url, batches, v))
        table = []
        base = None
        for v in variants:
            cells: dict[str, object] = {"variant": v}
            totals = []
            for name_ in STATEMENTS:
                vals = [g[name_] / n / 1e6 for g in got[v]]
                cells[name_] = f"{statistics.median(vals):.4f}"
            totals = [(sum(g.values()) - g["client"]) / n / 1e6 for g in got[v]]
            client = [g["client"] / n / 1e6 for g in got[v]]
            med = statistics.median(totals)
            base = med if base is None else base
            cells["total ms/sample (min-max)"] = f"{med:.4f} ({min(totals):.4f}-{max(totals):.4f})"
            cells["vs as is"] = f"{med - base:+.4f}"
            # This process's CPU over the same statements: what the worker's database thread
            # spends on them (the rows' values given; building them is not counted).
            cells["client ms/sample"] = f"{statistics.median(client):.4f}"
            table.append(cells)
        print_table(
            table,
            f"PostgreSQL backend CPU per sample recording {n} samples' evidence in batches of "
            f"{args.batch}, median of {args.reps} (ms; rows per sample "
            + ", ".join(f"{k} {v:.2f}" for k, v in counts.items())
            + f"; source S3 row {row.get('samples_per_s')}/s, load {row.get('load_before')})",
        )
        print(real_batch)
    finally:
        throughput.drop_db(name)


if __name__ == "__main__":
    main()
