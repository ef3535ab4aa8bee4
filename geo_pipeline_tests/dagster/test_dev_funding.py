"""``geo-pipeline dev`` opens with a working launchpad (issue 36 item 2): the pre-filled
``create_collection_run`` failed on a fresh dev with "insufficient funds: tenant acme has 0 CNY"
because ``demo`` deposits and ``dev`` did not. Dev now tops the example's tenant up, idempotently;
and a refusal from our code reaches the UI as a ``dg.Failure`` with its numbers as metadata."""

from __future__ import annotations

from typing import Any

import dagster as dg

from geo_pipeline.billing import ledger
from geo_pipeline.defs.collection.jobs import create_collection_run
from geo_pipeline.defs.launchpad import EXAMPLE, fund_launchpad_example
from geo_pipeline_tests.dagster.conftest import collection_config
from geo_pipeline_tests.dagster.test_schedule_and_job import failure_text, launch


def launch_example(dg_instance: dg.DagsterInstance, resources: dict[str, Any]) -> Any:
    return create_collection_run.execute_in_process(
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )


def test_dev_funding_makes_the_prefilled_example_launch_and_is_idempotent(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    tenant = EXAMPLE["tenant"]
    first = fund_launchpad_example(conn, runs=2)
    assert first.tenant == tenant and first.deposited_minor > 0
    assert first.available_minor == 2 * first.run_needs_minor
    assert tenant in first.line() and "deposited" in first.line()
    # A second start of dev (or two at once) with the money still there deposits nothing.
    again = fund_launchpad_example(conn, runs=2)
    assert again.deposited_minor == 0
    assert ledger.balances(conn, tenant).deposited.amount_minor == first.deposited_minor
    # The pre-filled form, launched unchanged, creates its run.
    result = launch_example(dg_instance, resources)
    assert result.success, failure_text(result)
    # Spent down, the next start tops up again to the same level.
    topped = fund_launchpad_example(conn, runs=2)
    assert topped.deposited_minor == topped.run_needs_minor
    assert topped.available_minor == 2 * topped.run_needs_minor


def test_insufficient_funds_is_a_failure_with_its_numbers_not_a_stack_trace(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    result = launch(collection_config(tenant="poor"), dg_instance, resources)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    data = failure.step_failure_data.user_failure_data
    assert data is not None, failure.step_failure_data.error
    assert "insufficient funds: tenant poor" in str(data.description)
    meta = {k: v.value for k, v in data.metadata.items()}
    assert meta["tenant"] == "poor"
    assert meta["available_minor"] == 0
    assert meta["needed_minor"] > 0 and meta["shortfall_minor"] == meta["needed_minor"]
    assert meta["currency"] == "CNY"
    assert meta["deposit"].startswith("geo-pipeline billing deposit --tenant poor --amount ")
