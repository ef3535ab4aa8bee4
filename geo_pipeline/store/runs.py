"""Persisting a plan: config snapshot, quote snapshot, run, batches and samples (R2, R3, R5,
R23), and reading runs back. Re-planning the same config for the same run id is a no-op; the
same run id with a different config is refused. The whole creation -- these rows, the ledger's
estimate and reservation, the first dispatch -- is one transaction in
``geo_pipeline.flows.create_run``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date
from operator import attrgetter
from typing import Any

from psycopg.types.json import Jsonb

from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.plan import Plan, PlannedSample, PlanSamples
from geo_pipeline.domain.streams import STREAM_PARAMS
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


class RunConflict(ValueError):
    """The run id exists with a different config snapshot."""


class RunNotFound(LookupError):
    pass


def _monitor_of_run(
    conn: Conn, plan: Plan, monitor_id: str, config: dict[str, Any], actor: str
) -> None:
    """The monitor of a run created with ``monitor:`` (`runs create`, the launchpad), in the
    run's transaction: created with its 'created' event when new; left as it is when it saved
    this config; else a new revision with an 'updated' event naming who and the run (a run never
    changes a monitor silently, issue 37). A retired monitor or another tenant's is refused."""
    c = plan.config
    why = f"config of run {plan.run_id} (a run created with `monitor: {monitor_id}`)"
    with conn.cursor() as cur:
        cur.execute(
            Q("runs.monitor_for_run"),
            {"monitor_id": monitor_id, "config": Jsonb(config), "canonical": Jsonb(c.canonical())},
        )
        row = cur.fetchone()
        event: dict[str, Any] = {
            "monitor_id": monitor_id, "tenant_id": c.tenant, "config": Jsonb(config),
            "actor": actor[:200], "reason": why,
        }  # fmt: skip
        if row is None:
            cur.execute(
                Q("monitors.insert_monitor"),
                {**event, "cron": None, "timezone": None},
            )
            cur.execute(
                Q("monitors.insert_event"),
                {**event, "event": "created", "revision": 1, "cron": None, "timezone": None},
            )
            return
        if row["tenant_id"] != c.tenant:
            raise RunConflict(f"monitor {monitor_id!r} belongs to another tenant")
        if row["retired"]:
            raise RunConflict(
                f"monitor {monitor_id!r} is retired: it takes no run (a retired id is never "
                "reused); remove `monitor:` for a one-off run, or name a new monitor"
            )
        if row["same_config"]:
            return
        cadence = {"cron": row["cron"], "timezone": row["timezone"]}
        cur.execute(Q("monitors.update_config"), {**event, **cadence})
        updated = cur.fetchone()
        assert updated is not None  # locked above, not retired
        cur.execute(
            Q("monitors.insert_event"),
            {**event, **cadence, "event": "updated", "revision": int(updated["revision"])},
        )


def insert_run(
    conn: Conn,
    plan: Plan,
    *,
    monitor_id: str | None,
    scheduled_for: date | None = None,
    monitor_config: Mapping[str, Any] | None = None,
    keep_monitor_config: bool = False,
    actor: str | None = None,
) -> bool:
    """Write the plan's rows under the run's lock; False when the run already exists with this
    config (nothing written). Runs in the caller's transaction.

    ``monitor_config``: the raw, editable config to save as the monitor's config (when the run
    belongs to a monitor); the run itself executes the frozen snapshot only (R2).
    ``keep_monitor_config``: the monitor's own re-sample: leave its saved config as it is.
    ``actor``: who, for the monitor's history when the run creates or changes its monitor."""
    c = plan.config
    with conn.cursor() as cur:
        cur.execute(Q("runs.lock_run"), {"run_id": plan.run_id})
        cur.execute(Q("runs.get_run"), {"run_id": plan.run_id})
        existing = cur.fetchone()
        if existing is not None:
            row = dict(existing) if isinstance(existing, Mapping) else None
            if row is None or row["snapshot_id"] != c.snapshot_id:
                raise RunConflict(
                    f"run {plan.run_id} already exists with another config snapshot; "
                    "a changed config needs a new run id"
                )
            return False
        cur.execute(
            Q("runs.upsert_tenant"), {"tenant_id": c.tenant, "currency": plan.quote.currency}
        )
        if monitor_id is not None and keep_monitor_config:
            cur.execute(Q("runs.keep_monitor"), {"monitor_id": monitor_id, "tenant_id": c.tenant})
            if cur.fetchone() is None:
                raise RunConflict(f"monitor {monitor_id!r} belongs to another tenant")
        elif monitor_id is not None:
            _monitor_of_run(
                conn, plan, monitor_id, dict(monitor_config or c.canonical()),
                actor or f"run {plan.run_id}",
            )  # fmt: skip
        cur.execute(
            Q("runs.insert_snapshot"),
            {"snapshot_id": c.snapshot_id, "tenant_id": c.tenant, "config": Jsonb(c.canonical())},
        )
        cur.execute(
            Q("runs.insert_question_revisions"),
            {
                "revisions": [q.revision for q in c.questions],
                "texts": [q.text for q in c.questions],
            },
        )
        q = plan.quote
        cur.execute(
            Q("runs.insert_quote"),
            {
                "quote_id": q.quote_id,
                "tenant_id": c.tenant,
                "currency": q.currency,
                "estimated_max_minor": q.estimated_max.amount_minor,
                "price_versions": Jsonb(q.price_versions),
            },
        )
        if cur.fetchone() is not None:
            cur.executemany(
                Q("runs.insert_quote_line"),
                [
                    {
                        "quote_id": q.quote_id,
                        "line_no": i,
                        **line.__dict__,
                        "amount_minor": line.amount_minor,
                    }
                    for i, line in enumerate(q.lines)
                ],
            )
        cur.execute(
            Q("runs.insert_run"),
            {
                "run_id": plan.run_id,
                "tenant_id": c.tenant,
                "monitor_id": monitor_id,
                "snapshot_id": c.snapshot_id,
                "quote_id": q.quote_id,
                "scheduled_for": scheduled_for,
                "priority": c.priority,
                "sample_count": len(plan.samples),
            },
        )
        cur.execute(
            Q("runs.insert_batches"),
            {
                "run_id": plan.run_id,
                "batch_nos": [b.batch_no for b in plan.batches],
                "sizes": [b.size for b in plan.batches],
                "platform_counts": [Jsonb(b.platform_counts) for b in plan.batches],
            },
        )
        # COPY: a 100k-sample run is one statement, not 100k; sent in pieces, so the server
        # inserts one while this process formats the next.
        with cur.copy(Q("runs.copy_samples")) as copy:  # type: ignore[arg-type]
            for piece in copy_chunks(plan):
                copy.write(piece)
    return True


# What COPY's text format must escape in a value (backslash, tab, newline, carriage return).
_COPY_SPECIAL = re.compile(r"[\\\t\n\r]")


def copy_text(plan: Plan) -> bytes:
    """The plan's samples as COPY text rows (:func:`copy_chunks`, joined)."""
    return b"".join(copy_chunks(plan))


# Rows per piece of the COPY: the server inserts a piece while the next one is formatted.
COPY_CHUNK = 10_000


def copy_chunks(plan: Plan, rows: int = COPY_CHUNK) -> Iterator[bytes]:
    """The plan's samples as COPY text rows, in copy_samples' column order, at most ``rows`` rows
    a piece (psycopg's write_row costs ~7 us a row: 0.7 s of a 100,000-sample run, issue 39).
    Rows go channel by channel, each channel's in primary-key (sample_id) order
    (:func:`in_copy_order`).

    A plan from ``build_plan`` (its samples a :class:`PlanSamples`) is formatted channel by
    channel from its ids as the COPY consumes the pieces (:func:`_lazy_copy_chunks`): the
    database inserts the first channel while the next one is hashed. Any other plan's samples
    (a test's edited list) are formatted from the tuples: no value of a plan needs escaping
    (ids, run ids and the registry's names never do), which each piece proves by its counts --
    12 tabs and one newline a row, no backslash or carriage return -- else every value of the
    piece is escaped."""
    if isinstance(plan.samples, PlanSamples):
        yield from _lazy_copy_chunks(plan.samples, plan.config.tenant, plan.config.priority, rows)
        return
    c = plan.config
    tenant, priority = c.tenant, c.priority
    ordered = in_copy_order(plan)
    for i in range(0, len(ordered), rows):
        piece = ordered[i : i + rows]
        text = "".join(
            [
                f"{s.sample_id}\t{s.run_id}\t{tenant}\t{s.batch_no}\t{s.question_revision}\t"
                f"{s.question_index}\t{s.platform}\t{s.device}\t{s.region}\t{s.mode}\t"
                f"{s.repeat_index}\t{s.screenshot_policy}\t{priority}\n"
                for s in piece
            ]
        )
        n = len(piece)
        if text.count("\t") != 12 * n or text.count("\n") != n or "\\" in text or "\r" in text:
            text = _escaped_copy_text(plan, piece)
        yield text.encode()


def _lazy_copy_chunks(
    samples: PlanSamples, tenant: str, priority: int, rows: int
) -> Iterator[bytes]:
    """:func:`copy_chunks` of a ``PlanSamples``, in the same bytes, without building a tuple
    per sample. A row is its id, then text fixed per run, per question of a target and per
    repeat of a target, with its batch number between; the id (25 characters, unique) leads
    the row, so sorting a channel's rows sorts them by id. Only the plan's names (run id,
    tenant, question revisions, the targets' names) can hold a character COPY escapes, so they
    are escaped once each, when one of them needs it (no value of a real plan does). Pieces end
    at each channel's end: the first is sent after one channel is hashed, not the whole plan."""
    c = samples.config
    names = [samples.run_id, tenant, *(q.revision for q in c.questions)]
    names += [v for t in c.targets for v in (t.platform, t.device, t.region, t.mode, t.screenshot)]
    esc = _copy_escape if _COPY_SPECIAL.search("".join(names)) else str
    run = f"\t{esc(samples.run_id)}\t{esc(tenant)}\t"
    revisions = [esc(q.revision) for q in c.questions]
    channels: dict[tuple[str, str], list[int]] = {}
    for ti, t in enumerate(c.targets):
        channels.setdefault((t.platform, t.device), []).append(ti)
    for ch in sorted(channels):
        lines: list[str] = []
        for ti in channels[ch]:
            t = c.targets[ti]
            ids, nos = samples.target_ids(ti), list(map(str, samples.batch_nos(ti)))
            names_t = f"\t{esc(t.platform)}\t{esc(t.device)}\t{esc(t.region)}\t{esc(t.mode)}\t"
            tails = [f"{r}\t{esc(t.screenshot)}\t{priority}\n" for r in range(c.repeats)]
            k = 0
            for qi, rev in enumerate(revisions):
                mid = f"\t{rev}\t{qi}{names_t}"
                j = k + c.repeats
                lines += [
                    f"{i}{run}{b}{mid}{tail}"
                    for i, b, tail in zip(ids[k:j], nos[k:j], tails, strict=True)
                ]
                k = j
        lines.sort()
        for i in range(0, len(lines), rows):
            yield "".join(lines[i : i + rows]).encode()


def in_copy_order(plan: Plan) -> list[PlannedSample]:
    """The plan's samples in the order create_run COPYs them (issue 39): channel by channel (as
    the plan has them), within a channel by primary key. A sample id is a hash: in plan order
    each insert into the key's index descended to a random page of the whole index; in key
    order the descents walk it left to right (~0.15-0.25 s less backend CPU per 100,000, the
    key's buffer requests of a first run 278k -> 134k). Keeping channels together keeps the
    (run, channel) and (tenant, platform, ...) indexes' inserts on few pages (pure key order
    cost those ~50 % more buffer requests once the tables held a few runs) and a claim's
    samples of one platform on few heap pages (claim buffers within 1-2 % of plan order; pure
    key order +3 %). A claim's ties (same priority and due time) are taken in this order, so
    no longer batch by batch within a channel."""
    by_channel: dict[tuple[str, str], list[PlannedSample]] = {}
    for s in plan.samples:  # one pass, then a sort of plain ids per channel: 3x cheaper than
        by_channel.setdefault((s.platform, s.device), []).append(s)  # one tuple-keyed sort
    by_id = attrgetter("sample_id")
    return [s for ch in sorted(by_channel) for s in sorted(by_channel[ch], key=by_id)]


def _copy_escape(v: object) -> str:
    return _COPY_SPECIAL.sub(lambda m: _COPY_ESCAPES[m.group()], str(v))


def _escaped_copy_text(plan: Plan, samples: list[PlannedSample]) -> str:
    esc = _copy_escape
    c = plan.config
    rows = (
        (s.sample_id, s.run_id, c.tenant, s.batch_no, s.question_revision, s.question_index,
         s.platform, s.device, s.region, s.mode, s.repeat_index, s.screenshot_policy, c.priority)
        for s in samples
    )  # fmt: skip
    return "".join("\t".join(map(esc, row)) + "\n" for row in rows)


_COPY_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


# The memory a run's creation may sort and hash in (issue 39). A 100,000-sample COPY keeps its
# rows for the statement-level insert guard (its transition table, ~25 MB) and the plan checks
# and the first dispatch group them: at the default 4 MB both spilled to temporary files
# (~0.1 s of a 100k run's backend time writing and re-reading 21 MB). Larger runs still spill.
CREATE_WORK_MEM = "64MB"


@contextmanager
def work_mem(conn: Conn, value: str = CREATE_WORK_MEM) -> Iterator[None]:
    """Raise work_mem for the block, inside the caller's transaction (SET LOCAL: an error that
    rolls the block back restores it); the value it replaced is set again when the block ends."""
    row = conn.execute(Q("runs.set_work_mem"), {"value": value}).fetchone()
    previous = row["previous"] if isinstance(row, Mapping) else row[0]  # type: ignore[index]
    yield
    conn.execute(Q("runs.set_work_mem"), {"value": previous})


def dispatch_new_run(
    conn: Conn, run_id: str, tenant_id: str, groups: Sequence[Mapping[str, Any]]
) -> None:
    """Queue the first collect hints of a run just inserted (in the caller's transaction), one
    per (batch, channel) of ``groups``: the run's samples grouped per (channel, platform,
    batch_no) with their count ``n`` and highest ``priority``, as dagster.run_plan_facts read
    them in this same transaction."""
    conn.execute(
        Q("runs.dispatch_new_run"),
        {
            **STREAM_PARAMS,
            "run_id": run_id,
            "tenant_id": tenant_id,
            "batch_nos": [g["batch_no"] for g in groups],
            "channels": [g["channel"] for g in groups],
            "platforms": [g["platform"] for g in groups],
            "priorities": [g["priority"] for g in groups],
            "counts": [g["n"] for g in groups],
        },
    )


def dispatch(conn: Conn, run_id: str, channel: str | None = None) -> int:
    """Queue collect hints for never-dispatched samples of a run (or one channel), one per
    (batch, channel); returns how many samples the new hints cover. Idempotent."""
    with conn.transaction(), conn.cursor() as cur:
        params = {"run_id": run_id, "channel": channel}
        cur.execute(Q("runs.mark_dispatched"), params)  # workers may claim it from now on
        cur.execute(Q("runs.dispatch_collect"), {**STREAM_PARAMS, **params})
        row = cur.fetchone()
    if row is None:
        return 0
    return int(row["n"] if isinstance(row, dict) else row[0])


def get_run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.get_run"), {"run_id": run_id})
        row = cur.fetchone()
    if row is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    return dict(row)


def run_config(conn: Conn, run_id: str) -> NormalisedConfig:
    """The frozen config snapshot the run executes (R2)."""
    run = get_run(conn, run_id)
    with conn.cursor() as cur:
        cur.execute(Q("runs.get_snapshot"), {"snapshot_id": run["snapshot_id"]})
        row = cur.fetchone()
    assert row is not None
    return NormalisedConfig.from_canonical(dict(row)["config"])


def list_runs(conn: Conn, tenant_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.list_runs"), {"tenant_id": tenant_id, "limit": limit})
        return [dict(r) for r in cur.fetchall()]


def quote_lines(conn: Conn, quote_id: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.quote_lines"), {"quote_id": quote_id})
        return [dict(r) for r in cur.fetchall()]


def batches(conn: Conn, run_id: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.batches"), {"run_id": run_id})
        return [dict(r) for r in cur.fetchall()]
