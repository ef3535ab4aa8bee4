"""Creating a run: validate the config (R1, R16), quote (R4) and expand (R3) it, then persist
snapshot, quote, run, batches, samples, the ledger's estimate and -- when confirmed -- the
reservation and the first dispatch, in ONE transaction (R2, R23): a short balance writes
nothing at all. The CLI, the launchpad job and the daily schedule all create runs here.

Every dispatch goes through ONE gate, :func:`dispatch_gate`: the ``sampling_plan`` asset (one
channel, its results are the asset's blocking checks), ``create_run`` (a run dispatched at
creation: ``geo-pipeline runs create``, the demo) and :func:`dispatch_checked` (`runs create`
again, `billing confirm`). Its preconditions: the run is confirmed (its reservation held, R23),
not cancelled, and its plan passes every plan check (R3, R5). A run whose plan fails a check is
kept, undispatched, and :class:`PlanChecksFailed` says which check failed and how to dispatch
it once fixed; no engine is asked and nothing is charged.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from operator import itemgetter
from typing import Any

from geo_pipeline.billing import ledger, prices
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.plan import Plan, plan_for, sample_id_for
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.store import run_platforms, runs
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import fetch_all

# The names of the plan checks, as the sampling_plan asset's checks are named (defs/names.py).
CHECK_PLAN_VOLUME = "plan_volume_matches_snapshot"
CHECK_PLAN_IDENTITIES = "sample_identities_unique"
CHECK_PLAN_BATCHES = "batches_within_cap"
EXAMPLES = 20  # a failing check lists at most this many ids or problems
# A sample row's identity after its run (R5), in sample_id_for's order.
IDENTITY = itemgetter("question_revision", "platform", "device", "region", "mode", "repeat_index")

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class PlanCheck:
    """The outcome of one plan check of one channel: every plan check is blocking."""

    name: str
    channel: str
    passed: bool
    message: str
    metadata: dict[str, Any] = field(default_factory=dict)


class PlanChecksFailed(Exception):
    """A blocking plan check failed: the run was created (and reserved, when confirmed) but not
    dispatched. Raised after ``create_run``'s transaction block; when the caller holds an outer
    transaction, committing it keeps the run (rolling it back writes nothing at all)."""

    def __init__(self, run_id: str, failed: list[PlanCheck]) -> None:
        self.run_id = run_id
        self.failed = failed
        lines = "; ".join(f"{c.name} on {c.channel}: {c.message}" for c in failed)
        super().__init__(
            f"run {run_id} was created but NOT dispatched: a blocking plan check failed: "
            f"{lines}. No work was queued and nothing is charged. Fix the plan's rows, then "
            f"dispatch with `geo-pipeline runs create CONFIG --run-id {run_id}` (re-runs the "
            "checks, dispatches when they pass) or by materialising its sampling_plan "
            f"partitions in Dagster; or cancel it with `geo-pipeline runs cancel {run_id}`."
        )


@dataclass
class Facts:
    """What the plan checks of one channel know of its samples, from one grouped read
    (dagster.run_plan_facts): how many, in which batches, and how many ids are not their
    identity's hash (counted only when the database's own check of that is not in force)."""

    samples: int = 0
    batch_nos: set[int] = field(default_factory=set)
    wrong_ids: int = 0


def _facts(rows: Rows, channels: Collection[str]) -> dict[str, Facts]:
    facts = {ch: Facts() for ch in channels}
    for r in rows:
        f = facts.setdefault(r["channel"], Facts())
        f.samples += r["n"]
        f.batch_nos.add(r["batch_no"])
        f.wrong_ids += r["wrong_ids"]
    return facts


def partition_samples(conn: Conn, run_id: str, channel: str) -> Rows:
    """The partition's samples with their identity (what a failing identity check examines)."""
    return fetch_all(conn, "dagster.partition_samples", {"run_id": run_id, "channel": channel})


def plan_volume(config: NormalisedConfig, channel: str, facts: Facts) -> PlanCheck:
    """R3: the partition holds exactly Q x T_channel x R samples of the frozen snapshot."""
    targets = [t for t in config.targets if t.channel == channel]
    expected = len(config.questions) * len(targets) * config.repeats
    formula = f"{len(config.questions)} x {len(targets)} x {config.repeats} = {expected}"
    return PlanCheck(
        CHECK_PLAN_VOLUME,
        channel,
        facts.samples == expected and expected > 0,
        f"expected {formula} samples, found {facts.samples}",
        {"expected": expected, "actual": facts.samples, "formula": formula},
    )


def plan_identities(conn: Conn, run_id: str, channel: str, facts: Facts) -> PlanCheck:
    """R5: identities are unique and every sample id is the hash of its identity (so a retry
    or a re-plan can never create a second sample for the same identity).

    While the database checks every written row's id (sample_id_is_identity_hash) and the
    primary key keeps ids unique, no id can be wrong and no identity twice: the grouped read
    says so (``wrong_ids`` 0) without hashing again. Only when some id is wrong are the
    partition's rows read to name the duplicates and the wrong ids."""
    duplicated: list[tuple[Any, ...]] = []
    wrong_ids: list[str] = []
    if facts.wrong_ids:
        rows = partition_samples(conn, run_id, channel)
        identities = list(map(IDENTITY, rows))
        duplicated = [k for k, n in Counter(identities).items() if n > 1]
        wrong_ids = [
            r["sample_id"]
            for r, key in zip(rows, identities, strict=True)
            if r["sample_id"] != sample_id_for(run_id, *key)
        ]
    examples = [*map(str, duplicated), *wrong_ids][:EXAMPLES]
    return PlanCheck(
        CHECK_PLAN_IDENTITIES,
        channel,
        not duplicated and not wrong_ids and not facts.wrong_ids,
        f"{len(duplicated)} duplicated identities, {len(wrong_ids)} sample ids not derived "
        f"from their identity" + (f" (e.g. {', '.join(examples[:3])})" if examples else ""),
        {
            "samples": facts.samples,
            "duplicated_identities": len(duplicated),
            "ids_not_matching_identity": len(wrong_ids),
            "examples": examples,
        },
    )


def batches_with_counts(conn: Conn, run_id: str, batch_nos: Collection[int]) -> Rows:
    """The given batches of the run with the samples that really carry each (per platform),
    counted in one grouped pass over those batches' samples."""
    return fetch_all(
        conn,
        "dagster.batches_with_counts",
        {"run_id": run_id, "batch_nos": sorted(batch_nos)},
    )


def _run_batches(conn: Conn, run_id: str, rows: Rows) -> Rows:
    """batches_with_counts of every batch of the run, its actual counts summed from the run's
    grouped facts (no second pass over the samples)."""
    actual: dict[int, Counter[str]] = {}
    for r in rows:
        actual.setdefault(r["batch_no"], Counter())[r["platform"]] += r["n"]
    return [
        {**b, "actual_counts": dict(actual.get(b["batch_no"], {}))}
        for b in fetch_all(conn, "dagster.run_batches", {"run_id": run_id})
    ]


def plan_batches(
    conn: Conn,
    config: NormalisedConfig,
    run_id: str,
    channel: str,
    facts: Facts,
    batches: Rows | None = None,
) -> PlanCheck:
    """R3: every batch holding this partition's samples is within the submit cap and each
    platform's cap, and its recorded counts are the samples that really carry it.

    ``batches``: :func:`batches_with_counts` of (at least) the partition's batches, when the
    caller read them already for the whole run; else they are read here."""
    platform = channel.split("__", 1)[0]
    batch_nos = facts.batch_nos
    if batches is None:
        batches = batches_with_counts(conn, run_id, batch_nos)
    problems: list[str] = []
    for b in batches:
        if b["batch_no"] not in batch_nos:
            continue
        counts: dict[str, int] = dict(b["platform_counts"])
        if b["size"] > config.submit_cap:
            problems.append(f"batch {b['batch_no']}: size {b['size']} > cap {config.submit_cap}")
        cap = config.platform_caps.get(platform)
        if cap is not None and counts.get(platform, 0) > cap:
            problems.append(f"batch {b['batch_no']}: {platform} {counts[platform]} > cap {cap}")
        if sum(counts.values()) != b["size"]:
            problems.append(
                f"batch {b['batch_no']}: counts sum {sum(counts.values())} != size {b['size']}"
            )
        if {k: int(v) for k, v in b["actual_counts"].items()} != counts:
            problems.append(
                f"batch {b['batch_no']}: recorded {counts} != samples {dict(b['actual_counts'])}"
            )
    return PlanCheck(
        CHECK_PLAN_BATCHES,
        channel,
        not problems,
        "; ".join(problems[:3]) if problems else f"{len(batch_nos)} batches within the caps",
        {
            "batches": len(batch_nos),
            "submit_cap": config.submit_cap,
            "platform_cap": config.platform_caps.get(platform, config.submit_cap),
            "problems": problems[:EXAMPLES],
        },
    )


def _checks(
    conn: Conn,
    config: NormalisedConfig,
    run_id: str,
    channel: str,
    facts: Facts,
    batches: Rows | None = None,
) -> list[PlanCheck]:
    return [
        plan_volume(config, channel, facts),
        plan_identities(conn, run_id, channel, facts),
        plan_batches(conn, config, run_id, channel, facts, batches),
    ]


def check_partition(
    conn: Conn, config: NormalisedConfig, run_id: str, channel: str
) -> list[PlanCheck]:
    """The three plan checks of one (run, channel) partition, on one grouped read of its
    samples (and one of its batches' counts)."""
    rows = fetch_all(conn, "dagster.partition_plan_facts", {"run_id": run_id, "channel": channel})
    return _checks(conn, config, run_id, channel, _facts(rows, [channel])[channel])


def check_plan(conn: Conn, config: NormalisedConfig, run_id: str) -> list[PlanCheck]:
    """The plan checks of every channel of a run (what gates its dispatch): the same checks as
    :func:`check_partition`'s, on ONE grouped read of the run's samples (a row per channel and
    batch, not per sample) and one read of its batches, so their cost is proportional to the
    run, whatever its number of channels and batches."""
    return checks_of_run(conn, config, run_id, run_plan_facts(conn, run_id))


def run_plan_facts(conn: Conn, run_id: str) -> Rows:
    """The run's samples grouped per (channel, platform, batch): what the plan checks need, and
    what the first dispatch of a new run queues its hints from."""
    return fetch_all(conn, "dagster.run_plan_facts", {"run_id": run_id})


def checks_of_run(conn: Conn, config: NormalisedConfig, run_id: str, rows: Rows) -> list[PlanCheck]:
    """:func:`check_plan` on the run's :func:`run_plan_facts` read already."""
    facts = _facts(rows, config.channels)
    batches = _run_batches(conn, run_id, rows)
    return [
        c for ch in config.channels for c in _checks(conn, config, run_id, ch, facts[ch], batches)
    ]


@dataclass(frozen=True)
class Gate:
    """What :func:`dispatch_gate` decided: the plan checks it ran, how many samples it queued
    now, and why it queued nothing (None: the gate was open)."""

    checks: list[PlanCheck]
    queued: int
    refused: str | None

    @property
    def failed(self) -> list[PlanCheck]:
        return [c for c in self.checks if not c.passed]


NOT_CONFIRMED = "not confirmed: no reservation is held"
CANCELLED = "cancelled"


def dispatch_gate(
    conn: Conn, run_id: str, channel: str | None = None, *, new_run: bool = False
) -> Gate:
    """THE dispatch gate: queue the run's (or one channel's) never-dispatched work when the run
    is confirmed, not cancelled, and its plan passes every plan check (:func:`check_plan`, or
    :func:`check_partition` for one channel) -- in one transaction (a savepoint inside the
    caller's). Idempotent: work already queued is not queued again. ``new_run``: the run was
    inserted in the caller's transaction, so its first dispatch needs no look at the outbox.
    Raises ``runs.RunNotFound`` for an unknown run."""
    with conn.transaction():
        run = runs.get_run(conn, run_id)
        config = runs.run_config(conn, run_id)
        groups = run_plan_facts(conn, run_id) if channel is None else []
        checks = (
            check_partition(conn, config, run_id, channel)
            if channel is not None
            else checks_of_run(conn, config, run_id, groups)
        )
        refused = None
        if run["confirmed_at"] is None:
            refused = NOT_CONFIRMED
        elif run["cancel_requested_at"] is not None:
            refused = CANCELLED
        elif any(not c.passed for c in checks):
            names = sorted({c.name for c in checks if not c.passed})
            refused = f"a blocking plan check failed: {', '.join(names)}"
        if refused is not None:
            return Gate(checks, 0, refused)
        if new_run and channel is None:
            runs.dispatch_new_run(conn, run_id, run["tenant_id"], groups)
            queued = int(run["sample_count"])  # a new run: every sample queued now
        else:
            queued = runs.dispatch(conn, run_id, channel)
    return Gate(checks, queued, None)


def dispatch_checked(conn: Conn, run_id: str) -> int:
    """:func:`dispatch_gate` for a whole run (`runs create`, `billing confirm`): how many samples
    were queued now (0 for a run already dispatched, unconfirmed or cancelled). Raises
    :class:`PlanChecksFailed` (nothing dispatched) when a check fails."""
    gate = dispatch_gate(conn, run_id)
    if gate.failed:
        raise PlanChecksFailed(run_id, gate.failed)
    return gate.queued


def new_run_id(today: date | None = None) -> str:
    day = (today or datetime.now(UTC).date()).strftime("%Y%m%d")
    return f"r{day}-{secrets.token_hex(4)}"


def plan_run(raw: Any, caps: Mapping[str, Capabilities], run_id: str | None = None) -> Plan:
    """Validate, quote and expand a collection config (a mapping or the launchpad's model) for
    ``run_id`` (default: a new one); raises ConfigError with every problem, or QuoteError."""
    config = normalise_and_validate(raw, caps)
    return plan_for(config, caps, run_id or new_run_id())


def quoted_plan(
    conn: Conn, raw: Any, caps: Mapping[str, Capabilities], run_id: str | None = None
) -> Plan:
    """THE quote path (issue #34): validate, quote and expand a config at the price versions in
    effect now in the database (imported with `prices import`, else the registry's), for
    ``run_id`` (default: a new one). `runs plan`, `runs create`, the launchpad's planner and
    create jobs, the monitor schedule and the demo all quote here, so what a plan shows is what
    the quote snapshot of ``create_run`` freezes. Reads only, in a transaction of its own when
    none is open, so a caller's next ``create_run`` on the same connection commits as before
    (not as a savepoint of an implicit read transaction nobody commits)."""
    with conn.transaction():
        effective = prices.effective_capabilities(conn, caps)
    return quoted_plan_for(conn, normalise_and_validate(raw, effective), effective, run_id)


def quoted_plan_for(
    conn: Conn, config: NormalisedConfig, caps: Mapping[str, Capabilities], run_id: str | None
) -> Plan:
    """``quoted_plan`` of a config already normalised (the monitor schedule's)."""
    with conn.transaction():
        effective = prices.effective_capabilities(conn, caps)
    return plan_for(config, effective, run_id or new_run_id())


def create_run(
    conn: Conn,
    plan: Plan,
    *,
    monitor_id: str | None = None,
    scheduled_for: date | None = None,
    confirm: bool = True,
    dispatch: bool = True,
    monitor_config: Mapping[str, Any] | None = None,
    keep_monitor_config: bool = False,
    actor: str | None = None,
) -> tuple[str, bool]:
    """Persist the plan in one transaction. Returns (run_id, created_now); re-creating the same
    run with the same config is a no-op, with another config a ``runs.RunConflict``.

    ``monitor_id``: default the config's monitor. ``monitor_config``: the raw, editable config
    saved as the monitor's (the run itself executes the frozen snapshot only, R2); a config other
    than the monitor's saved one is a new revision in its history, by ``actor`` (issue 37).
    ``confirm``: reserve the quote's estimated_max now (``ledger.InsufficientFunds`` when the
    balance is short, and then nothing is written). Work is dispatched only for a confirmed
    run whose plan passes every plan check (:func:`check_plan`, in the same transaction); when
    one fails the run is committed undispatched and :class:`PlanChecksFailed` is raised."""
    failed: list[PlanCheck] = []
    with conn.transaction(), runs.work_mem(conn):
        created = runs.insert_run(
            conn,
            plan,
            monitor_id=monitor_id if monitor_id is not None else plan.config.monitor,
            scheduled_for=scheduled_for,
            monitor_config=monitor_config,
            keep_monitor_config=keep_monitor_config,
            actor=actor,
        )
        if not created:
            return plan.run_id, False
        # How each platform is collected (access, engine), frozen with the run (issue 31).
        run_platforms.freeze(
            conn, plan.run_id, plan.config.tenant, [t.platform for t in plan.config.targets]
        )
        ledger.record_run_created(conn, plan, confirm)
        if dispatch and confirm:
            failed = dispatch_gate(conn, plan.run_id, new_run=True).failed
    if failed:
        raise PlanChecksFailed(plan.run_id, failed)
    return plan.run_id, True
