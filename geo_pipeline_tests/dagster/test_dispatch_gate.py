"""THE dispatch gate (issue 38): one function decides whether a run's work (or one channel's) is
queued — the sampling_plan asset, `runs create` (through ``create_run`` and ``dispatch_checked``)
and `billing confirm` all go through ``flows.create_run.dispatch_gate``. Its preconditions: the
run is confirmed (its reservation held, R23), not cancelled, and its plan passes every plan check
(R3, R5); otherwise nothing is queued and the gate says why."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from geo_pipeline.defs import names
from geo_pipeline.defs.collection.assets import sampling_plan
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline_tests.dagster.conftest import CHANNELS, create_run

WEB, APP = CHANNELS


def _hints(conn: Any, run_id: str, channel: str | None = None) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM geo.outbox WHERE kind = 'collect' AND run_id = %s "
        "AND (%s::text IS NULL OR channel = %s)",
        (run_id, channel, channel),
    ).fetchone()
    return int(row["n"])


def test_the_sampling_plan_asset_does_not_dispatch_an_unconfirmed_run(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    """A run created without a reservation (`runs create --no-confirm`, the launchpad's
    ``confirm: false``) waits for `billing confirm`; its sampling_plan partition, requested by
    the sensor like any other, must not queue work nobody has reserved money for."""
    run_id = create_run(conn, dg_instance, confirm=False)
    result = dg.materialize(
        [sampling_plan],
        partition_key=partition_key(run_id, WEB),
        instance=dg_instance,
        resources=resources,
        raise_on_error=False,
    )
    assert result.success
    assert _hints(conn, run_id) == 0
    [mat] = [e for e in result.get_asset_materialization_events()]
    meta = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert meta["dispatched_now"] == 0
    assert "not confirmed" in meta["dispatch_refused"]


@pytest.mark.parametrize("channel", [None, WEB])
def test_the_gate_queues_only_a_confirmed_uncancelled_run_whose_plan_passes(
    conn: Any, channel: str | None
) -> None:
    from geo_pipeline.billing import ledger
    from geo_pipeline.flows.create_run import dispatch_gate

    unconfirmed = create_run(conn, confirm=False)
    gate = dispatch_gate(conn, unconfirmed, channel)
    assert (gate.queued, gate.refused) == (0, "not confirmed: no reservation is held")
    assert _hints(conn, unconfirmed) == 0

    cancelled = create_run(conn)
    conn.execute("UPDATE geo.runs SET cancel_requested_at = now() WHERE run_id = %s", (cancelled,))
    gate = dispatch_gate(conn, cancelled, channel)
    assert (gate.queued, gate.refused) == (0, "cancelled")
    assert _hints(conn, cancelled) == 0

    broken = create_run(conn)
    conn.execute("UPDATE geo.batches SET size = size + 500 WHERE run_id = %s", (broken,))
    gate = dispatch_gate(conn, broken, channel)
    assert gate.queued == 0 and gate.refused is not None and "plan check" in gate.refused
    assert {c.name for c in gate.failed} == {names.CHECK_PLAN_BATCHES}
    assert _hints(conn, broken) == 0

    good = create_run(conn)
    gate = dispatch_gate(conn, good, channel)
    assert gate.refused is None and all(c.passed for c in gate.checks)
    assert gate.queued == (4 if channel else 8)  # 4 samples per channel
    assert {c.channel for c in gate.checks} == ({channel} if channel else set(CHANNELS))
    assert _hints(conn, good, channel) > 0
    again = dispatch_gate(conn, good, channel)  # idempotent: nothing queued twice
    assert (again.queued, again.refused) == (0, None)

    # Confirming the unconfirmed run later (`billing confirm`) opens the gate.
    ledger.confirm_run(conn, unconfirmed)
    assert dispatch_gate(conn, unconfirmed, channel).queued == (4 if channel else 8)


def test_dispatch_checked_raises_on_a_failed_check_and_returns_0_when_refused(conn: Any) -> None:
    """`runs create` and `billing confirm` call dispatch_checked: the gate, with a failed plan
    check raised as PlanChecksFailed (the CLI exits 1 naming it)."""
    from geo_pipeline.flows.create_run import PlanChecksFailed, dispatch_checked

    assert dispatch_checked(conn, create_run(conn, confirm=False)) == 0
    broken = create_run(conn)
    conn.execute("UPDATE geo.batches SET size = size + 500 WHERE run_id = %s", (broken,))
    with pytest.raises(PlanChecksFailed):
        dispatch_checked(conn, broken)
    assert dispatch_checked(conn, create_run(conn)) == 8
