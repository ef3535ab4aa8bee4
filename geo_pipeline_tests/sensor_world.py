"""Many runs at once for the completion sensor's growth test and bench/_scale_sensor.py: one run
created the way the product creates one (``create_run``: snapshot, quote, batches, samples,
reservation), then copied in bulk under new run ids with ``INSERT ... SELECT`` over
``generate_series`` (its batches, platforms, fee rules, ledger entries and samples, each sample
id recomputed by ``geo.sample_id_for``), every sample moved to ``failed`` by one guarded UPDATE
(its transitions logged), and the runs' dynamic partitions added to the Dagster instance in two
calls, as ``register_run_partitions`` adds them (run|channel keys, then run keys). 2,000 runs take
seconds instead of the minutes 2,000 ``create_run`` calls took.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dagster as dg
from sqlalchemy import event
from sqlalchemy.engine import Engine

from geo_pipeline.defs.names import RUN_CHANNEL_PARTITIONS, RUNS_PARTITIONS
from geo_pipeline.defs.partitions import run_partition_keys

# The run-keyed tables create_run fills, parents first. run_accounts is maintained by the ledger
# trigger from the copied ledger entries; state_transitions by the UPDATE that ends the samples.
CLONED = ("runs", "batches", "run_platforms", "run_fee_rules", "ledger_entries", "samples")
# Columns filled by the database (identity, generated) or recomputed for the new run.
_SKIP = {"ledger_entries": {"entry_id"}}
_EXPR = {
    "run_id": "g.new_id",
    "sample_id": "geo.sample_id_for(g.new_id, t.question_revision, t.platform, t.device,"
    " t.region, t.mode, t.repeat_index)",
    "idempotency_key": "replace(t.idempotency_key, %(template)s, g.new_id)",
    "created_at": "now()",
}
# (ledger entries made by create_run name no sample: estimate and reservation are per run)


def _columns(conn: Any, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'geo'"
        " AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [r["column_name"] for r in rows if r["column_name"] not in _SKIP.get(table, set())]


def clone_runs(conn: Any, template: str, run_ids: Sequence[str]) -> None:
    """Copy run ``template`` (as create_run left it, samples not yet moved) under each of
    ``run_ids``, in one statement per table."""
    if not run_ids:
        return
    for table in CLONED:
        cols = _columns(conn, table)
        exprs = ", ".join(
            _EXPR.get(c, f"t.{c}") if c != "sample_id" or table == "samples" else "NULL"
            for c in cols
        )
        conn.execute(
            f"INSERT INTO geo.{table} ({', '.join(cols)})"  # our own table names
            f" SELECT {exprs} FROM geo.{table} t"
            " CROSS JOIN unnest(%(ids)s::text[]) AS g(new_id) WHERE t.run_id = %(template)s",
            {"ids": list(run_ids), "template": template},
        )


def end_samples(conn: Any, run_ids: Sequence[str]) -> None:
    """queued -> failed (an allowed move, each one logged) for every sample of the runs."""
    conn.execute(
        "UPDATE geo.samples SET collection_state = 'failed', collection_reason = 'X'"
        " WHERE run_id = ANY(%s)",
        (list(run_ids),),
    )


def register_all(instance: dg.DagsterInstance, runs: dict[str, Sequence[str]]) -> None:
    """The runs' dynamic partitions, added in two calls (run|channel keys, then run keys)."""
    run_keys, pair_keys = run_partition_keys(runs)
    instance.add_dynamic_partitions(RUN_CHANNEL_PARTITIONS, pair_keys)
    instance.add_dynamic_partitions(RUNS_PARTITIONS, run_keys)


# The instance calls a tick may make whose answers grow with the partitions.
INSTANCE_CALLS = (
    "get_dynamic_partitions",
    "get_existing_dynamic_partitions",
    "has_dynamic_partition",
    "get_run_records",
    "get_runs",
    "get_materialized_partitions",
    "get_latest_materialization_event",
    "fetch_materializations",
)


@contextlib.contextmanager
def dagster_metered(instance: dg.DagsterInstance) -> Iterator[dict[str, int]]:
    """Count the SQL statements the instance's storages run and the rows its calls return."""
    counts = {"statements": 0, "rows": 0, "calls": 0}

    def on_execute(*_: Any) -> None:
        counts["statements"] += 1

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            got = fn(*args, **kwargs)
            counts["calls"] += 1
            with contextlib.suppress(TypeError):
                counts["rows"] += len(got)
            return got

        return call

    event.listen(Engine, "before_cursor_execute", on_execute)
    for name in INSTANCE_CALLS:
        setattr(instance, name, wrap(getattr(instance, name)))
    try:
        yield counts
    finally:
        for name in INSTANCE_CALLS:
            delattr(instance, name)
        event.remove(Engine, "before_cursor_execute", on_execute)
