"""Jobs: creating a collection run from the launchpad, and the asset jobs sensors and schedules
launch (one partition per Dagster run, principle 4).

How a run reaches execution: the ``create_collection_run`` job validates the config, creates the run
(snapshot, quote, samples; nothing dispatched yet) and adds the run's dynamic partition. It does
not launch anything itself: the ``sampling_plan_sensor`` asks PostgreSQL which partitions of
recent runs were never dispatched and requests their ``sampling_plan``, with one run key per
partition. So a run created by the CLI with ``--no-dispatch`` is picked up the same way, and a
crash between creating the run and adding its partition is repaired by the sensor.
"""

from typing import Any

import dagster as dg
from pydantic import Field

from geo_pipeline.billing import prices
from geo_pipeline.billing.ledger import InsufficientFunds
from geo_pipeline.defs import names
from geo_pipeline.defs.partitions import register_run_partitions
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.domain.config import (
    DEFAULT_PUBLISH_DEADLINE_SECONDS,
    CollectionConfig,
    ConfigError,
)
from geo_pipeline.domain.plan import Plan, QuoteError
from geo_pipeline.flows.create_run import create_run, plan_run
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn

# dagster.yaml limits concurrent runs per value of this tag (QueuedRunCoordinator).
QUEUE_TAG = "geo/queue"
# Run retries (dagster.yaml run_retries): a failed run of an asset job is re-executed at most
# this many times by the daemon. The assets are idempotent, so a re-execution is safe; with
# retry_on_asset_or_op_failure off in dagster.yaml only runs that failed outside a step (launch,
# start timeout, a crashed run worker) are retried — steps have their own retry policy.
MAX_RETRIES_TAG = "dagster/max_retries"
RUN_RETRIES = 2
_RETRIED = {MAX_RETRIES_TAG: str(RUN_RETRIES)}

sampling_plan_job = dg.define_asset_job(
    "sampling_plan_job",
    selection=dg.AssetSelection.assets(names.SAMPLING_PLAN),
    description="Check and dispatch the sampling plan of one (run, channel) partition.",
    tags={QUEUE_TAG: "plan", **_RETRIED},
)
partition_downstream_job = dg.define_asset_job(
    "partition_downstream_job",
    selection=dg.AssetSelection.assets(*names.PARTITION_DOWNSTREAM),
    description="Everything downstream of a finished (run, channel) partition, in one run.",
    tags={QUEUE_TAG: "downstream", **_RETRIED},
)
billing_job = dg.define_asset_job(
    "billing_job",
    selection=dg.AssetSelection.assets(*names.RUN_DOWNSTREAM),
    description="Reconcile the billing of one finished run.",
    tags={QUEUE_TAG: "billing", **_RETRIED},
)


class CreateCollectionRunConfig(dg.Config):
    """Launchpad config: ``collection`` is the collection config, the same model the CLI reads
    from YAML (geo_pipeline.domain.config.CollectionConfig); it is validated by that model, so
    problems come back with their field paths."""

    collection: dict[str, Any] = Field(
        description="the collection config (tenant, brand, competitors, questions, channels, "
        "repeats, screenshot, priority, submit_cap, max_attempts, publish_deadline_seconds, "
        "monitor)"
    )
    run_id: str | None = Field(default=None, description="use this run id (default: a new one)")
    confirm: bool = Field(default=True, description="reserve the quote's estimated maximum now")
    publish_deadline_seconds: int | None = Field(
        default=None,
        description="seconds after the run's creation when each partition publishes what is "
        "terminal and lists the rest as excluded (overrides collection.publish_deadline_seconds; "
        f"default {DEFAULT_PUBLISH_DEADLINE_SECONDS} = 6 hours; allowed 60..604800). Frozen "
        "into the config snapshot.",
    )

    def collection_config(self) -> dict[str, Any]:
        """The collection config with the launchpad's deadline, if one was given."""
        if self.publish_deadline_seconds is None:
            return dict(self.collection)
        return {**self.collection, "publish_deadline_seconds": self.publish_deadline_seconds}


def plan_from_config(
    raw: dict[str, Any] | CollectionConfig,
    registry: ConnectorRegistryResource,
    run_id: str | None,
    conn: Conn | None = None,
) -> Plan:
    """Validate (R1, R16), quote (R4) and expand (R3) a collection config; raises ConfigError.
    With a database the quote uses the price versions in effect now (frozen in its snapshot)."""
    caps = registry.load().capabilities()
    if conn is not None:
        caps = prices.effective_capabilities(conn, caps)
    return plan_run(raw, caps, run_id)


@dg.op(description="Validate the config, create the run and add its partition.")
def create_run_op(
    context: dg.OpExecutionContext,
    config: CreateCollectionRunConfig,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
) -> str:
    collection = config.collection_config()
    with db.connect() as conn:
        try:
            plan = plan_from_config(collection, registry, config.run_id, conn)
        except ConfigError as exc:
            # Every problem with its field path, in the run's failure message (R1).
            raise dg.Failure(
                description=str(exc),
                metadata={"problems": [str(p) for p in exc.problems]},
                allow_retries=False,
            ) from None
        except QuoteError as exc:
            raise dg.Failure(description=f"cannot quote this config: {exc}") from None
        try:
            run_id, created = create_run(
                conn,
                plan,
                monitor_id=plan.config.monitor,
                confirm=config.confirm,
                dispatch=False,
                monitor_config=collection,
            )
        except (runstore.RunConflict, InsufficientFunds) as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
    # After the commit: a partition never names a run PostgreSQL does not have.
    register_run_partitions(context.instance, run_id, plan.config.channels)
    summary = plan.summary()
    context.add_output_metadata(
        {
            "run_id": run_id,
            "created": created,
            "samples": summary["samples"],
            "formula": summary["formula"],
            "channels": summary["channels"],
            "batches": len(summary["batches"]),
            "estimated_max_minor": summary["quote"]["estimated_max_minor"],
            "currency": summary["quote"]["currency"],
        }
    )
    context.log.info(
        "created run %s (%s); the sampling_plan sensor requests its partitions",
        run_id,
        summary["formula"],
    )
    return run_id


@dg.job(
    description="Create a collection run from a collection config (the launchpad's form). The "
    "sampling_plan_sensor then requests the run's sampling_plan partitions.",
    # Never re-executed by the daemon: without a run_id in the config a retry would plan under
    # a new id and reserve the quote a second time. A person relaunches it.
    tags={"geo/kind": "create_run", MAX_RETRIES_TAG: "0"},
)
def create_collection_run() -> None:
    create_run_op()
