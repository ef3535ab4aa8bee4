"""What each per-row cost of geo.samples costs a 100,000-sample COPY (issue 39's levers, priced).

python bench/sample_insert_costs.py              # 3 repeats of every variant, both collations
python bench/sample_insert_costs.py --reps 5

create_run's COPY of a 100k run is most of its database CPU (bench/plan.py's cpu_pg_s). This
prices, on the same stored history, what each of the candidate levers would save: the same
COPY text (one 100k run, in create_run's order) is COPYed into geo.samples inside a transaction
that first drops one thing (a CHECK, the generated column, an index) and is then rolled back;
a VACUUM between repeats removes the rolled-back index entries so no repeat inherits another's.
The figure is the CPU seconds of the server backend during the COPY (from /proc: a shared
machine's load inflates it far less than the wall clock); variants are interleaved repeat by
repeat so a change of load hits them alike, and the median is shown with the spread.

The collation lever is priced on a second database created with LC_COLLATE "C" (memcmp
comparisons, abbreviated keys), the same schema and history otherwise: what giving every key
column COLLATE "C" would save, at most.

Nothing here is kept: the variants are priced in rolled-back transactions on scratch
databases that are dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import ADMIN_URL, _proc_cpu, print_table
from plan import config

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import migrate
from geo_pipeline.store.queries import Q

# The views reading geo.samples depend on its generated column; priced without them (the
# COPY does not read a view), in the rolled-back transaction only.
DROP_VIEWS = """DO $$ DECLARE v record; BEGIN
  FOR v IN SELECT DISTINCT c.oid::regclass::text AS r
           FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
           JOIN pg_class c ON c.oid = w.ev_class
           WHERE d.refobjid = 'geo.samples'::regclass AND c.relkind = 'v'
  LOOP EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', v.r); END LOOP; END $$"""
NO_HASH = "ALTER TABLE geo.samples DROP CONSTRAINT sample_id_is_identity_hash"
NO_OTHER_CHECKS = """DO $$ DECLARE c record; BEGIN
  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'geo.samples'::regclass
             AND contype = 'c' AND conname <> 'sample_id_is_identity_hash'
  LOOP EXECUTE format('ALTER TABLE geo.samples DROP CONSTRAINT %I', c.conname); END LOOP; END $$"""
NO_GENERATED = [DROP_VIEWS, "ALTER TABLE geo.samples DROP COLUMN channel CASCADE"]  # + its index
NO_QUEUE_INDEX = "DROP INDEX geo.samples_queued_tenant_priority"
# The identity rule before migration 0087 (hex of the whole digest, then its first 24 digits).
OLD_RULE = """CREATE OR REPLACE FUNCTION geo.sample_id_for(run_id text, question_revision text,
  platform text, device text, region text, mode text, repeat_index integer)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT 's' || left(encode(sha256(convert_to(concat_ws(chr(31), run_id, question_revision,
    platform, device, region, mode, repeat_index::text), 'UTF8')), 'hex'), 24)
$$"""

VARIANTS: dict[str, list[str]] = {
    "as is": [],
    "identity rule before 0087": [OLD_RULE],
    "- identity-hash CHECK": [NO_HASH],
    "- the 16 other CHECKs": [NO_OTHER_CHECKS],
    "- insert guard trigger": ["DROP TRIGGER samples_guard_insert ON geo.samples"],
    "- channel (generated) + its index": NO_GENERATED,
    "- samples_run_channel index": ["DROP INDEX geo.samples_run_channel"],
    "- queued index": [NO_QUEUE_INDEX],
    "- queued index, samples_run_channel index": [
        NO_QUEUE_INDEX,
        "DROP INDEX geo.samples_run_channel",
    ],
    "- hash CHECK, channel, queued index": [NO_HASH, *NO_GENERATED, NO_QUEUE_INDEX],
    # B-tree deduplication off (a new run's entries of these two indexes share few keys).
    # Priced 2026-12-07 (median of 5, load 5-6): no saving, the queued index's +0.05 s.
    "samples_run_channel, no deduplication": [
        "ALTER INDEX geo.samples_run_channel SET (deduplicate_items = off)"
    ],
    "queued index, no deduplication": [
        "ALTER INDEX geo.samples_queued_tenant_priority SET (deduplicate_items = off)"
    ],
}


def backend_cpu(pid: int) -> float:
    """CPU seconds of the process ``pid`` (schedstat's nanoseconds; else /proc/stat's ticks)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        got = _proc_cpu(f"/proc/{pid}/stat")
        return got[1] if got else float("nan")


def price(url: str, reps: int, history: int, only: list[str]) -> dict[str, list[float]]:
    """Backend CPU seconds of the COPY per variant, ``reps`` each, over ``history`` runs."""
    with psycopg.connect(url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        migrate.upgrade(conn)
        ledger.deposit(conn, "bench", 10**12, "CNY", "bench-deposit")
        caps = load_registry().capabilities()
        for i in range(history + 1):
            n = normalise_and_validate(config(), caps)
            create_run(
                conn, build_plan(n, quote(n, {p: c.prices for p, c in caps.items()}), f"b{i}")
            )
        # The last run's rows, as create_run COPYed them; then that run's samples are removed so
        # each repeat inserts them again next to ``history`` runs.
        copy_sql = Q("runs.copy_samples")
        cols = copy_sql[copy_sql.index("(") + 1 : copy_sql.index(")")]
        last = f"b{history}"
        text = bytearray()
        with conn.cursor().copy(
            f"COPY (SELECT {cols} FROM geo.samples WHERE run_id = '{last}' ORDER BY ctid) TO STDOUT"  # type: ignore[arg-type]
        ) as cp:
            for piece in cp:
                text += piece
        conn.execute("DELETE FROM geo.samples WHERE run_id = %s", [last])
        conn.commit()
        pid = conn.info.backend_pid
        chosen = {v: d for v, d in VARIANTS.items() if not only or v == "as is" or v in only}
        got: dict[str, list[float]] = {v: [] for v in chosen}
        for _ in range(reps):
            for name, ddl in chosen.items():
                conn.autocommit = True
                conn.execute("VACUUM geo.samples")
                conn.autocommit = False
                for stmt in ddl:
                    conn.execute(stmt)  # type: ignore[arg-type]
                before = backend_cpu(pid)
                with conn.cursor().copy(copy_sql) as cp:  # type: ignore[arg-type]
                    cp.write(bytes(text))
                got[name].append(backend_cpu(pid) - before)
                conn.rollback()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="repeats of each variant (default 3)")
    ap.add_argument("--history", type=int, default=1, help="100k runs stored before (default 1)")
    ap.add_argument("--variant", action="append", default=[], help="price only these (and 'as is')")
    ap.add_argument("--only-utf8", action="store_true", help='skip the COLLATE "C" database')
    args = ap.parse_args()
    rows = []
    base: float | None = None
    for collation in ("C.UTF-8",) if args.only_utf8 else ("C.UTF-8", "C"):
        name = f"geo_bench_costs_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            c.execute(
                f"CREATE DATABASE \"{name}\" TEMPLATE template0 LC_COLLATE '{collation}' "  # type: ignore[arg-type]
                "LC_CTYPE 'C.UTF-8' ENCODING 'UTF8'"
            )
        url = urlunsplit(urlsplit(ADMIN_URL)._replace(path="/" + name))
        try:
            got = price(url, args.reps, args.history, args.variant)
        finally:
            with psycopg.connect(ADMIN_URL, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
        for variant, cpu in got.items():
            med = statistics.median(cpu)
            base = med if base is None else base
            rows.append(
                {
                    "collation": collation,
                    "variant": variant,
                    "cpu_pg_s": f"{med:.2f}",
                    "spread": f"{min(cpu):.2f}-{max(cpu):.2f}",
                    "saves_s": f"{base - med:+.2f}",
                }
            )
    print_table(
        rows,
        "bench/sample_insert_costs.py — backend CPU of COPYing one 100,000-sample run into "
        f"geo.samples next to {args.history} stored, per variant (median of {args.reps}, "
        "rolled back); saves_s: against C.UTF-8 'as is'",
    )
    print(f"load: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
