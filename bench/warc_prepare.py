"""Microbench of the worker's CPU per archived answer on the WARC evidence path (issue 33): what
the throughput bench's S3 row spends on top of the evidence-off row inside a worker, stage by
stage, on simulator answers (geo_pipeline_tests/unit/evidence/test_warc_stored_fields.py makes
them; every answer's citation URLs are new, as in a run, so URL normalisation is never a cache
hit):

* prepare -- ``prepare_warc_evidence`` on the event loop (citations, validity, records, gzip);
* store   -- ``plan_batch`` and placing the records (one object per 25 answers; no I/O);
* rows    -- the Python side of ``record_evidence_batch`` in a database thread: the rows of
  ``geo.answers``, ``geo.citations``, ``geo.warc_records`` and ``geo.evidence_objects`` and
  their COPY data (evidence.rows write_rows: the object rows numbered, each table's rows
  formatted as its COPY sends them; no server, so not the sending). A checkout from before
  ``rows.copy_data`` is measured as it wrote them: dict rows picked into tuples, psycopg's
  ``Copy.write_row`` a row.

Process CPU, best of ``--rounds``, in microseconds per answer. ``--compare DIR`` runs the same
measurement on another checkout's ``geo_pipeline`` (e.g. ``git archive main geo_pipeline``
unpacked in DIR) in alternation with this one, in fresh processes, and prints both.

Run: python bench/warc_prepare.py [--answers 500] [--rounds 7] [--exchange] [--compare DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measure(answers: int, rounds: int, exchange: bool) -> dict[str, float]:
    sys.path.append(str(ROOT))  # the tests' input maker; geo_pipeline from PYTHONPATH first
    from geo_pipeline.evidence import recording, warc_store
    from geo_pipeline_tests.unit.evidence.test_warc_stored_fields import (
        fixed_thumbnails,
        simulator_evidence,
    )

    recording.screenshot_derivatives = fixed_thumbnails  # type: ignore[assignment]
    everything = simulator_evidence(answers * rounds)
    if not exchange:  # the throughput bench: the poll carries the result, no exchange kept
        everything = [(r, n, replace(e, exchange=None), p) for r, n, e, p in everything]
    from geo_pipeline.worker.runner import quiet_collector

    quiet_collector()  # as the worker runs: its inputs (start-up, here) out of the collector's way
    fresh = {"revision": 0, "validity": None, "content_sha256": None, "has_screenshot": False,
             "tenant_id": "acme"}  # fmt: skip

    class NoStore:
        def put(self, key: str, data: bytes, *, mime_type: str) -> None:
            pass

    best = {"prepare": 1e9, "store": 1e9, "rows": 1e9}
    for k in range(rounds):
        inputs = everything[k * answers : (k + 1) * answers]
        samples = {ref.sample_id: {"objects": {}} for ref, *_ in inputs}  # read_for_record's
        t0 = time.process_time()
        items = [recording.prepare_warc_evidence(*a, max_record_bytes=1 << 24) for a in inputs]
        t1 = time.process_time()
        placed = []
        for i in range(0, len(items), 25):
            placed += warc_store.store_batch(NoStore(), items[i : i + 25])  # type: ignore[arg-type]
        t2 = time.process_time()
        answers_, citations, objects, warc_rows = [], [], [], []  # type: ignore[var-annotated]
        for item in placed:  # as recording._record_round
            at = item.captured_at.isoformat()
            recording._decide(fresh, item, answers_, citations, at)
            objects += recording._object_rows(
                item.ref, item.objects, item.attempt_no, item.captured_at, at
            )
            warc_rows += recording._warc_rows(item, at)
        copy_data(samples, answers_, citations, warc_rows, objects)
        t3 = time.process_time()
        for name, dt in (("prepare", t1 - t0), ("store", t2 - t1), ("rows", t3 - t2)):
            best[name] = min(best[name], dt / answers * 1e6)
    best["total"] = best["prepare"] + best["store"] + best["rows"]
    best["code"] = recording.__file__  # type: ignore[assignment]
    return best


def copy_data(samples: dict[str, Any], *tables: list[Any]) -> int:
    """What evidence.rows write_rows makes of a round's rows before the server sees them: the
    object rows numbered, every table's COPY data. Bytes made."""
    from psycopg._copy_base import TextFormatter
    from psycopg.adapt import Transformer

    from geo_pipeline.evidence import rows as evidence_rows

    answers, citations, warc_rows, objects = tables
    if hasattr(evidence_rows, "copy_data"):  # one C call a row, one write a table
        out = [
            evidence_rows.copy_data(Transformer(), rows)
            for rows in (
                map(evidence_rows.answer_copy_row, answers),
                citations,
                warc_rows,
                evidence_rows._new_objects(samples, objects, {}),
            )
        ]
        return sum(map(len, out))
    # Before: dict rows picked into tuples, Copy.write_row a row (its formatter's 32 kB
    # buffers; the LibpqWriter's sends not counted).
    old: Any = evidence_rows
    n = 0
    for rows in (
        map(old._ANSWER_ROW, answers),
        map(old._CITATION_ROW, citations),
        map(old._WARC_ROW, warc_rows),
        old._new_objects(samples, objects, {}),
    ):
        fmt = TextFormatter(Transformer())

        def write_row(row: Any, fmt: Any = fmt) -> None:  # Copy.write_row
            nonlocal n
            if data := fmt.write_row(row):
                n += len(data)

        for row in rows:
            write_row(row)
        n += len(fmt.end())
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--exchange",
        action="store_true",
        help="keep the HTTP exchange (request and response records), as a connector does "
        "without poll-with-result",
    )
    ap.add_argument("--compare", metavar="DIR", default="")
    ap.add_argument("--alternations", type=int, default=3)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.compare:
        res = measure(args.answers, args.rounds, args.exchange)
        if args.json:
            print(json.dumps(res))
        else:
            print(f"load {os.getloadavg()[0]:.2f}; us per answer: "
                  + ", ".join(f"{k} {v}" for k, v in res.items()))  # fmt: skip
        return
    trees = {"old": str(Path(args.compare).resolve()), "new": str(ROOT)}
    results: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for _ in range(args.alternations):
        for name, tree in trees.items():
            cmd = [sys.executable, __file__, "--answers", str(args.answers), "--rounds",
                   str(args.rounds), "--json"]  # fmt: skip
            cmd += ["--exchange"] if args.exchange else []
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
    print(f"load {open('/proc/loadavg').read().split()[:3]}; process CPU, us per answer, "
          f"best of {args.rounds} rounds of {args.answers} answers, best of "
          f"{args.alternations} alternated processes")  # fmt: skip
    for name, runs in results.items():
        best = {k: min(r[k] for r in runs) for k in runs[0] if k != "code"}
        print(f"  {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in best.items())
              + f"  ({runs[0]['code']})")  # fmt: skip


if __name__ == "__main__":
    main()
