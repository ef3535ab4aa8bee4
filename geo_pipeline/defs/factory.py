"""What every pipeline asset shares, written once: the ``@dg.asset(...)`` arguments (group,
retry policy, pool, kinds, partitioned check specs) through :func:`pipeline_asset`, the check
results' shape (:func:`check_result`), and the few steps each asset body starts with (load the
run, tag the Dagster run, flatten the aggregate status into metadata).

The domain modules (collection, evidence, analysis, billing) hold the assets and their checks;
this module holds no definition itself, so the defs folder deploys nothing from it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dagster as dg

# Not exported at dagster's top level in 1.13; the type AssetCheckEvaluation takes for the
# materialisation an evaluation judged (what AssetCheckResult fills in for a single partition).
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData as TargetMaterialization,
)

from geo_pipeline.defs.partitions import parse_partition_key
from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.states import AggregateStatus
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import fetch_all

# Every asset of the project says whose it is and what it is part of, the same way (issue 36):
# its group is its domain (the stage of the pipeline it belongs to, as the defs folder is split),
# its owner the team, its tags the domain again (filterable across groups in a shared instance).
# ``code_version``: bump an asset's when its computation changes what it writes, so Dagster
# marks its materialisations stale.
OWNERS = ["team:geo-pipeline"]
CODE_VERSION = "1"
COLLECTION = "collection"
EVIDENCE = "evidence"
ANALYSIS = "analysis"
BILLING = "billing"
OPERATIONS = "operations"
DOMAIN_TAG = "geo/domain"


def domain_tags(domain: str) -> dict[str, str]:
    return {DOMAIN_TAG: domain}


# Every pipeline asset talks to services (PostgreSQL; validated_evidence also object storage,
# billing_reconciliation the platforms' statement endpoints). A transient failure of one (a
# restart, a full pool, a timeout) is retried inside the run: 3 more tries, about 2, 4 and 8 s
# apart (jittered so partitions failing together do not retry together). Every write is
# idempotent, so a retried step changes nothing twice. Business failures (a run PostgreSQL
# does not have, a partition still collecting) raise ``dg.Failure(allow_retries=False)``;
# failed blocking checks are never retried by a policy. What fails the run anyway is left to
# run retries and the completion sensor (docs/dagster.md, "When a downstream run fails").
SERVICE_RETRY = dg.RetryPolicy(
    max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)

# A check as declared on its asset: (name, description, blocking).
CheckDecl = tuple[str, str, bool]

EXAMPLES = 20  # ids a failing check lists, so an operator can look at the rows
WARN = dg.AssetCheckSeverity.WARN
ERROR = dg.AssetCheckSeverity.ERROR


def check_spec(
    asset: dg.AssetKey,
    name: str,
    description: str,
    blocking: bool,
    partitions_def: dg.PartitionsDefinition | None = None,
) -> dg.AssetCheckSpec:
    """A check partitioned like its asset: each evaluation is recorded for the partition being
    materialised, so a partition whose check failed stays failed (in the UI and for the
    alerts) after another partition passes."""
    with warnings.catch_warnings():
        # Partitioned checks are a preview feature in Dagster 1.13, used deliberately (issue
        # #23); the warning would repeat for every spec each time the definitions load.
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name,
            asset=asset,
            description=description,
            blocking=blocking,
            partitions_def=partitions_def,
        )


def pipeline_asset(
    key: dg.AssetKey,
    *,
    domain: str,
    partitions_def: dg.PartitionsDefinition,
    pool: str,
    kinds: set[str],
    checks: Sequence[CheckDecl],
    deps: Sequence[dg.AssetKey | dg.AssetDep] = (),
    code_version: str = CODE_VERSION,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """``@dg.asset`` with the arguments every pipeline asset shares: its domain as group and
    tag, the owner, a code version, the service retry policy, a concurrency pool
    (defs/pools.py), and its checks partitioned like it."""
    return dg.asset(
        key=key,
        partitions_def=partitions_def,
        deps=list(deps) or None,
        group_name=domain,
        owners=OWNERS,
        tags=domain_tags(domain),
        code_version=code_version,
        retry_policy=SERVICE_RETRY,
        pool=pool,
        kinds=kinds,
        check_specs=[
            check_spec(key, name, description, blocking, partitions_def)
            for name, description, blocking in checks
        ],
    )


def check_result(
    check: str,
    asset: dg.AssetKey,
    passed: bool,
    severity: dg.AssetCheckSeverity = ERROR,
    **metadata: Any,
) -> dg.AssetCheckResult:
    """A check's result; a result names no partition itself, Dagster records it for the step's
    partition."""
    return dg.AssetCheckResult(
        check_name=check, asset_key=asset, passed=passed, severity=severity, metadata=metadata
    )


def for_partition(
    context: dg.AssetExecutionContext, results: Sequence[dg.AssetCheckResult]
) -> list[dg.AssetCheckResult]:
    """The results with the partition they judged in their metadata: the UI's check list shows
    a check's latest evaluation of any partition, and a failure must say which one failed."""
    return [
        dg.AssetCheckResult(
            check_name=r.check_name,
            asset_key=r.asset_key,
            passed=r.passed,
            severity=r.severity,
            description=r.description,
            metadata={**r.metadata, "partition": context.partition_key},
        )
        for r in results
    ]


def query_rows(conn: Conn, query: str, **params: Any) -> list[dict[str, Any]]:
    """The rows of the named query ``dagster.<query>`` (sql/queries/dagster.sql)."""
    return fetch_all(conn, f"dagster.{query}", params)


def status_metadata(status: AggregateStatus) -> dict[str, Any]:
    """Flattened aggregate status (from the aggregation service) for asset metadata."""
    d = status.as_dict()
    col = status.counts.collection
    total = status.counts.total
    meta: dict[str, Any] = {
        "overall": d["overall"],
        "samples": total,
        "uncertain": d["uncertain"],
        "analysing": d["analysing"],
        "completed_rate": round(col.get("completed", 0) / total, 4) if total else 0.0,
    }
    for layer in ("submission", "collection", "evidence", "analysis"):
        meta[f"{layer}_states"] = d[layer]
    if d["failure_reasons"]:
        meta["failure_reasons"] = d["failure_reasons"]
    if d["evidence_reasons"]:
        meta["evidence_reasons"] = d["evidence_reasons"]
    return meta


def load_run(conn: Conn, run_id: str, channel: str) -> tuple[dict[str, Any], NormalisedConfig]:
    """The run and its frozen config; a partition naming a run or channel PostgreSQL does not
    have fails its step with what to do instead (never retried)."""
    try:
        run = runstore.get_run(conn, run_id)
    except runstore.RunNotFound:
        raise dg.Failure(
            description=f"collection run {run_id!r} is not in PostgreSQL; its partition should "
            "not exist (create runs with the create_collection_run job or `geo-pipeline runs "
            "create`)",
            allow_retries=False,
        ) from None
    config = runstore.run_config(conn, run_id)
    if channel not in config.channels:
        raise dg.Failure(
            description=f"channel {channel} is not part of run {run_id}; its channels are "
            f"{', '.join(config.channels)}. Materialise only those partitions.",
            allow_retries=False,
        )
    return run, config


# Tags that find every Dagster run of a collection run (`dagster run list`, the UI's run
# filter). Sensors and schedules set them on their requests; a run launched any other way —
# "Materialize" in the UI runs the implicit asset job, which has no geo tags — gets them here.
RUN_ID_TAG = "geo/run_id"
CHANNEL_TAG = "geo/channel"


def tag_run(context: dg.AssetExecutionContext, run_id: str, channel: str | None = None) -> None:
    """Add the geo tags the Dagster run lacks; a tag its launcher set is kept as it is."""
    wanted = {RUN_ID_TAG: run_id, **({CHANNEL_TAG: channel} if channel else {})}
    missing = {k: v for k, v in wanted.items() if k not in context.run.tags}
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)


# --------------------------------------------------------------------------- ranged runs
def each_partition(
    context: dg.AssetExecutionContext, materialise: Callable[[str], dg.MaterializeResult]
) -> Iterator[Any]:
    """Materialise every partition of the step, one after the other: a Dagster run may cover a
    range of run|channel partitions (the sensors request one run per collection run and stage,
    not one per channel: issue 36), and a single partition is a range of one.

    ``materialise(key)`` returns one partition's result as an asset body would: its metadata
    becomes that partition's materialisation (``add_asset_metadata`` per partition), and each
    check result is recorded as an evaluation OF THAT PARTITION (Dagster 1.13's
    ``AssetCheckResult`` has no partition and takes the step's single partition key, which a
    ranged step does not have; an ``AssetCheckEvaluation`` names its partition). A failed
    blocking check of any partition fails the step after every partition was judged, so the
    run's downstream steps (every partition of the range) do not run."""
    keys = list(context.partition_keys)
    pairs = [parse_partition_key(k) for k in keys]
    run_ids = {rid for rid, _ in pairs}
    if len(run_ids) == 1:
        tag_run(context, *(pairs[0] if len(keys) == 1 else (pairs[0][0], None)))
    checks: list[tuple[str, dg.AssetCheckResult]] = []
    for key in keys:
        result = materialise(key)
        context.add_asset_metadata(dict(result.metadata or {}), partition_key=key)
        checks += [(key, r) for r in result.check_results or ()]
    yield dg.MaterializeResult(metadata={"partitions": len(keys)})
    selected = context.selected_asset_check_keys
    for check_key in sorted(selected, key=str):
        # The check's output (nothing flows through it); its evaluations follow, per partition.
        yield dg.Output(
            None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key)
        )
    # The materialisation each evaluation judged (recorded by now: the events of the result
    # above were stored before this generator resumed), as Dagster links an AssetCheckResult:
    # the UI's per-partition check status counts an evaluation only for its partition's
    # current materialisation.
    target = {key: judged_materialisation(context, key) for key in keys}
    for key, r in checks:
        check_key = dg.AssetCheckKey(r.asset_key or context.asset_key, r.check_name or "")
        if check_key not in selected:
            continue
        yield dg.AssetCheckEvaluation(
            asset_key=check_key.asset_key,
            check_name=check_key.name,
            passed=r.passed,
            metadata={**r.metadata, "partition": dg.MetadataValue.text(key)},
            severity=r.severity,
            description=r.description,
            blocking=context.assets_def.get_spec_for_check_key(check_key).blocking,
            partition=key,
            target_materialization_data=target[key],
        )


def judged_materialisation(
    context: dg.AssetExecutionContext, key: str
) -> TargetMaterialization | None:
    """The latest materialisation of the step's asset for partition ``key``."""
    [*records] = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return None
    return TargetMaterialization(
        run_id=records[0].run_id, storage_id=records[0].storage_id, timestamp=records[0].timestamp
    )
