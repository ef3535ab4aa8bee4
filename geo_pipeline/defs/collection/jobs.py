"""The launchpad's jobs: ``create_collection_run`` validates a config, creates and dispatches
the run in one transaction (snapshot, quote, samples, collect hints, through the dispatch gate),
adds the run's dynamic partitions and records their ``sampling_plan`` materialisations and plan
check evaluations in the same Dagster run (defs/collection/dispatch.py), so the workers start one
queued run after the click (issue 36). The ``sampling_plan_sensor`` still asks PostgreSQL which
partitions of recent runs were never dispatched and requests their ``sampling_plan``: a run
created by the CLI with ``--no-dispatch`` or by the daily re-sample job is picked up that way.
A crash after the commit leaves a dispatched run whose partitions the completion sensor adopts;
only its sampling_plan records are missing (materialise them from the UI to see them).

The launchpad's form is typed (geo_pipeline.defs.launchpad), so Dagster lists a config's
mistakes with their paths before a run starts, and comes pre-filled with a valid example.
``plan_collection_run`` takes the same form plus a target precision and shows the repeats
planner's answer (expected half-width per channel, repeats needed and their cost) without
creating or reserving anything. Every job runs its steps in the run's own process.
"""

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg
from pydantic import Field

from geo_pipeline.analysis.precision import (
    channel_precision,
    planning_priors,
    precision_display,
    precision_row,
)
from geo_pipeline.billing.errors import BillingError, InsufficientFunds
from geo_pipeline.defs import names
from geo_pipeline.defs.collection.dispatch import dispatch_new_partitions
from geo_pipeline.defs.jobs import MAX_RETRIES_TAG, ONE_PROCESS
from geo_pipeline.defs.launchpad import (
    CollectionFields,
    collection_dict,
    example_fields,
    markdown_table,
    refuse_environment_references,
)
from geo_pipeline.defs.partitions import register_run_partitions
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.domain.config_model import DEFAULT_PUBLISH_DEADLINE_SECONDS, CollectionConfig
from geo_pipeline.domain.config_problems import ConfigError
from geo_pipeline.domain.plan import Plan, QuoteError
from geo_pipeline.flows.create_run import PlanChecksFailed, create_run, quoted_plan
from geo_pipeline.jsonable import json_default
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn


class CreateCollectionRunConfig(dg.Config):
    """Launchpad config: ``collection`` is the collection config, typed field by field
    (geo_pipeline.defs.launchpad mirrors geo_pipeline.domain.config.CollectionConfig), so the
    launchpad checks it as it is typed; the op then validates it with the domain model, so the
    problems Dagster cannot see come back with their field paths too."""

    collection: CollectionFields = Field(
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
        collection = collection_dict(self.collection)
        if self.publish_deadline_seconds is None:
            return collection
        return {**collection, "publish_deadline_seconds": self.publish_deadline_seconds}


def plan_from_config(
    raw: dict[str, Any] | CollectionConfig,
    registry: ConnectorRegistryResource,
    run_id: str | None,
    conn: Conn,
) -> Plan:
    """Validate (R1, R16), quote (R4) and expand (R3) a collection config through the one quote
    path (``quoted_plan``: the price versions in effect now); raises ConfigError."""
    return quoted_plan(conn, raw, registry.load().capabilities(), run_id)


def checked_plan(
    collection: dict[str, Any], registry: ConnectorRegistryResource, run_id: str | None, conn: Conn
) -> Plan:
    """plan_from_config, its refusals as the run's failure: every problem with its field path
    (R1), or why the config cannot be quoted."""
    try:
        return plan_from_config(collection, registry, run_id, conn)
    except ConfigError as exc:
        raise dg.Failure(
            description=str(exc),
            metadata={"problems": [str(p) for p in exc.problems]},
            allow_retries=False,
        ) from None
    except QuoteError as exc:
        raise dg.Failure(description=f"cannot quote this config: {exc}") from None


def refusal(exc: Exception) -> dg.Failure:
    """Our refusal as the run's failure: the message as its description and, for a short
    balance, the numbers and the command that fixes it as metadata (the UI shows both above
    the stack). Never retried: the same config is refused the same way."""
    metadata: dict[str, Any] = {"reason": type(exc).__name__}
    if isinstance(exc, InsufficientFunds):
        short = exc.needed.amount_minor - exc.available.amount_minor
        metadata.update(
            tenant=exc.tenant_id,
            available_minor=exc.available.amount_minor,
            needed_minor=exc.needed.amount_minor,
            shortfall_minor=short,
            currency=exc.needed.currency,
            deposit=f"geo-pipeline billing deposit --tenant {exc.tenant_id} --amount {short} "
            f"--currency {exc.needed.currency}",
        )
    return dg.Failure(description=str(exc), metadata=metadata, allow_retries=False)


# The ops' results are their output metadata (the run id, the planner's table); the output is
# Nothing, so the I/O manager stores nothing in DAGSTER_HOME/storage (issue 36).
NOTHING = dg.Out(dg.Nothing)


@dg.op(
    description="Validate the config, create the run, add its partitions and materialise their "
    "sampling_plan (dispatch through the gate, with the plan checks).",
    out=NOTHING,
    # The sampling plans' pool (dagster.yaml): this step dispatches as sampling_plan's does.
    pool=names.POOL_PLAN,
)
def create_run_op(
    context: dg.OpExecutionContext,
    config: CreateCollectionRunConfig,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
) -> Iterator[Any]:
    refuse_environment_references(context.run.run_config, context.op.name)
    collection = config.collection_config()
    with db.connect() as conn:
        plan = checked_plan(collection, registry, config.run_id, conn)
        try:
            # Dispatched in the transaction that creates the run (through the dispatch gate):
            # the sampling_plan sensor, which ticks meanwhile, never sees it undispatched and
            # never asks a sampling_plan_job for it.
            run_id, created = create_run(
                conn,
                plan,
                monitor_id=plan.config.monitor,
                confirm=config.confirm,
                dispatch=True,
                monitor_config=collection,
                actor=f"dagster:{context.run_id}",
            )
        except PlanChecksFailed as exc:
            # Created, not dispatched: the partitions' plan check evaluations below say which
            # check failed, and fail this run.
            run_id, created = exc.run_id, True
        except (runstore.RunConflict, BillingError) as exc:
            raise refusal(exc) from None
    # After the commit: a partition never names a run PostgreSQL does not have.
    register_run_partitions(context.instance, run_id, plan.config.channels)
    # Dispatched here, not by a sampling_plan_job the sensor asks for: one queued run less
    # between the click and the workers (issue 36; defs/collection/dispatch.py).
    yield from dispatch_new_partitions(
        context, db, run_id, plan.config.channels, dispatched_at_creation=created
    )
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
        "created run %s (%s) and dispatched its partitions' sampling plans",
        run_id,
        summary["formula"],
    )
    yield dg.Output(None)


@dg.job(
    description="Create a collection run from a collection config (the launchpad's form, "
    "pre-filled with an example) and dispatch it: the run's sampling_plan partitions are "
    "materialised in this run. To see precision and cost first, launch plan_collection_run.",
    # Never re-executed by the daemon: without a run_id in the config a retry would plan under
    # a new id and reserve the quote a second time. A person relaunches it.
    tags={"geo/kind": "create_run", MAX_RETRIES_TAG: "0"},
    executor_def=ONE_PROCESS,
    config=dg.RunConfig(
        ops={"create_run_op": CreateCollectionRunConfig(collection=example_fields())}
    ),
)
def create_collection_run() -> None:
    create_run_op()


# --------------------------------------------------------------------------- repeats planner
class PlanCollectionRunConfig(CreateCollectionRunConfig):
    """The launchpad's form, plus the repeats planner's goal. Nothing is created or reserved."""

    target_half_width: float = Field(
        default=0.1,
        description="the 95 % half-width wanted for a brand's mention rate per channel "
        "(0.1 = plus or minus 10 points; allowed 0 < x < 0.5)",
    )
    priors_from_monitor: str | None = Field(
        default=None,
        description="estimate each channel's rate and question-to-question spread from this "
        "monitor's last runs (reads the database); without it a stated prior is used",
    )


def precision_table(rows: list[dict[str, Any]]) -> dg.TableMetadataValue:
    """The planner's rows as Dagster's structured table (every cell as text: a needed quantity
    is a number or "unreachable")."""
    columns = list(rows[0]) if rows else ["channel"]
    return dg.MetadataValue.table(
        records=[dg.TableRecord({c: str(row[c]) for c in columns}) for row in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(c, "string") for c in columns]),
    )


@dg.op(
    description="Validate and quote the config and show what its sample buys: the expected 95 % "
    "half-width of the brand's mention rate per channel, and the repeats (and their cost) a "
    "target needs. Writes nothing: no run, no reservation, no partition.",
    out=NOTHING,
)
def plan_collection_op(
    context: dg.OpExecutionContext,
    config: PlanCollectionRunConfig,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
) -> None:
    refuse_environment_references(context.run.run_config, context.op.name)
    if not 0 < config.target_half_width < 0.5:
        raise dg.Failure(
            description=f"target_half_width={config.target_half_width}: allowed 0 < x < 0.5",
            allow_retries=False,
        )
    with db.connect() as conn:
        # Reads only: the price versions in effect, and the monitor's earlier runs.
        plan = checked_plan(config.collection_config(), registry, config.run_id, conn)
        priors = (
            planning_priors(conn, config.priors_from_monitor) if config.priors_from_monitor else {}
        )
        conn.rollback()
    precision = [
        precision_row(p) for p in channel_precision(plan, config.target_half_width, priors)
    ]
    shown = [precision_display(row) for row in precision]
    summary = plan.summary()
    if config.run_id is None:
        summary["run_id"] = None  # the plan's placeholder id is nobody's run
    quote = summary["quote"]
    context.add_output_metadata(
        {
            "samples": summary["samples"],
            "formula": summary["formula"],
            "estimated_max_minor": quote["estimated_max_minor"],
            "currency": quote["currency"],
            "target_half_width": config.target_half_width,
            "precision": dg.MetadataValue.md(markdown_table(shown)),
            "precision table": precision_table(shown),
            **{f"{row['channel']} expected ±95%": row["expected ±95%"] for row in precision},
            "duplicates_removed": [str(d) for d in summary["duplicates_removed"]],
            # For a machine (what `runs plan --json` gives): null where a target is unreachable.
            "plan": dg.MetadataValue.json(
                json.loads(
                    json.dumps({"summary": summary, "precision": precision}, default=json_default)
                )
            ),
        }
    )
    context.log.info(
        "planned %s (%s), nothing created; launch create_collection_run to create it",
        summary["formula"],
        ", ".join(f"{r['channel']} ±{r['expected ±95%']}" for r in precision),
    )


@dg.job(
    description="The repeats planner on the launchpad: the same form as create_collection_run "
    "plus a target half-width; validates, quotes and reports each channel's expected precision "
    "and the repeats a target needs, with their cost. Creates nothing and reserves nothing.",
    tags={"geo/kind": "plan_run", MAX_RETRIES_TAG: "0"},
    executor_def=ONE_PROCESS,
    config=dg.RunConfig(
        ops={"plan_collection_op": PlanCollectionRunConfig(collection=example_fields())}
    ),
)
def plan_collection_run() -> None:
    plan_collection_op()
