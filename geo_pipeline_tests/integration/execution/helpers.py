"""Real runs, an in-test connector and the invariants of issue 4, shared by the execution
integration tests and the fault tests. The invariants are read from the DATABASE only."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.base import (
    Acceptance,
    Attachment,
    CancelResult,
    Evidence,
    FeeStatement,
    PollResult,
    RateLimited,
    SubmitRequest,
    TransientError,
)
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.flows.create_run import create_run

REGISTRY = load_registry()
CAPS = REGISTRY.capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}


def make_run(
    db_url: str,
    run_id: str,
    *,
    tenant: str = "acme",
    questions: int = 5,
    repeats: int = 1,
    channels: list[dict[str, Any]] | None = None,
    max_attempts: int = 3,
    screenshot: str = "off",
    priority: int = 5,
    dispatch: bool = True,
) -> list[str]:
    """Create a confirmed run, dispatched unless told otherwise (outbox rows written), and
    return its sample ids."""
    raw = {
        "tenant": tenant,
        "brand": {"name": "瑞幸", "aliases": ["Luckin"]},
        "questions": [f"问题 {run_id} {i}：哪家咖啡最好？" for i in range(questions)],
        "channels": channels or [{"platform": "deepseek", "device": "web"}],
        "repeats": repeats,
        "max_attempts": max_attempts,
        "screenshot": screenshot,
        "priority": priority,
    }
    config = normalise_and_validate(raw, CAPS)
    plan = build_plan(config, quote(config, PRICES), run_id)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        ledger.deposit(conn, tenant, 10**10, "CNY", f"dep-{run_id}")  # type: ignore[arg-type]
        conn.commit()
        create_run(conn, plan, confirm=True, dispatch=dispatch)  # type: ignore[arg-type]
        conn.commit()
    return [s.sample_id for s in plan.samples]


class FakeConnector:
    """An in-process connector for tests: the real protocol, configurable latency and faults,
    and a count of submits per idempotency key (the "never submitted twice" check)."""

    _ids = itertools.count(1)

    def __init__(
        self,
        platform: str,
        *,
        latency_s: float = 0.0,
        rate_limit_first: int = 0,
        transient_first: int = 0,
        lookup: bool = True,
    ) -> None:
        self.platform = platform
        self.latency_s = latency_s
        self.rate_limit_left = rate_limit_first
        self.transient_left = transient_first
        self.lookup_supported = lookup
        self.submits: Counter[str] = Counter()
        self.tasks: dict[str, tuple[str, float, str]] = {}  # upstream_id -> (key, done_at, sid)
        self.by_key: dict[str, str] = {}

    def capabilities(self) -> Capabilities:
        return CAPS[self.platform]

    async def submit(self, request: SubmitRequest) -> Acceptance:
        key = request.idempotency_key
        self.submits[key] += 1
        if self.rate_limit_left > 0:
            self.rate_limit_left -= 1
            raise RateLimited("429", status=429, retry_after_s=0.05)
        if self.transient_left > 0:
            self.transient_left -= 1
            raise TransientError("503", status=503)
        if key in self.by_key:
            return Acceptance(self.by_key[key])
        uid = f"{self.platform}-t{next(self._ids)}"
        loop = asyncio.get_running_loop()
        self.tasks[uid] = (key, loop.time() + self.latency_s, request.sample_id)
        self.by_key[key] = uid
        return Acceptance(uid, datetime.now(UTC))

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        if not self.lookup_supported:
            raise NotImplementedError
        uid = self.by_key.get(idempotency_key)
        return Acceptance(uid) if uid else None

    async def poll(self, upstream_id: str) -> PollResult:
        _, done_at, _ = self.tasks[upstream_id]
        done = asyncio.get_running_loop().time() >= done_at
        return PollResult("completed" if done else "running", upstream_id)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        text = f"瑞幸咖啡和星巴克都不错。answer for {request.sample_id}"
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=text,
            raw_body=text.encode(),
            raw_mime_type="text/plain",
            captured_at=datetime.now(UTC),
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "unavailable", reason="fake")

    async def cancel(self, upstream_id: str) -> CancelResult:
        return CancelResult(True, False, "fake")

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        return FeeStatement(self.platform, statement_date, "CNY")

    async def aclose(self) -> None:
        return None


def fetch(db_url: str, sql: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:  # type: ignore[arg-type]
        return [dict(r) for r in conn.execute(sql, params).fetchall()]  # type: ignore[arg-type]


def states(db_url: str, run_id: str | None = None) -> Counter[str]:
    rows = fetch(
        db_url,
        "SELECT collection_state, count(*) AS n FROM geo.samples "
        "WHERE %(r)s::text IS NULL OR run_id = %(r)s GROUP BY 1",
        {"r": run_id},
    )
    return Counter({r["collection_state"]: int(r["n"]) for r in rows})


def progress_mark(db_url: str) -> tuple[Any, ...]:
    """What changes while a run moves: the transition log (rows and last id) and the samples'
    states, read in one connection. A login that may not read the log (a tenant's service role)
    is judged by the states alone."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT collection_state, count(*) FROM geo.samples GROUP BY 1 ORDER BY 1"
        ).fetchall()
        try:
            log = conn.execute(
                "SELECT count(*), max(transition_id) FROM geo.state_transitions"
            ).fetchone()
        except psycopg.Error:
            log = None
    return (tuple(log or ()), tuple(rows))


class StallWatch:
    """Bounds a test loop that drives a worker by what the run does, not by the clock: it goes
    on while ``progress_mark`` changes (a loaded box only slows the run down) and stops once
    nothing moved for ``stall_s`` (a hung run); ``cap_s`` only guards against a run that
    moves forever. When it stops it prints what it saw, for the failing test's output."""

    def __init__(self, db_url: str, stall_s: float, cap_s: float = 1800.0) -> None:
        self.db_url, self.stall_s, self.cap_s = db_url, stall_s, cap_s
        self.started = self.last_move = time.monotonic()
        self.seen: tuple[Any, ...] | None = None
        self.moves = 0

    def moving(self) -> bool:
        now = time.monotonic()
        mark = progress_mark(self.db_url)
        if mark != self.seen:
            self.seen, self.last_move, self.moves = mark, now, self.moves + 1
            return True
        if now - self.last_move > self.stall_s or now - self.started > self.cap_s:
            print(
                f"StallWatch: stopped after {now - self.started:.1f} s, {self.moves} changes, "
                f"the last {now - self.last_move:.1f} s ago (stall bound {self.stall_s:g} s, "
                f"cap {self.cap_s:g} s); last seen (transitions, states): {mark}"
            )
            return False
        return True


def check_invariants(db_url: str, expected_samples: int | None = None) -> dict[str, Any]:
    """The invariants of issue 4, from the database. Raises AssertionError naming the breach."""
    out: dict[str, Any] = {}
    n = fetch(db_url, "SELECT count(*) AS n FROM geo.samples")[0]["n"]
    if expected_samples is not None:
        assert n == expected_samples, f"samples lost: {n} != {expected_samples}"
    # At most one accepted completion per sample: one 'running -> completed' in the log.
    dup = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.state_transitions "
        "WHERE layer = 'collection' AND to_state = 'completed' GROUP BY 1 HAVING count(*) > 1",
    )
    assert not dup, f"samples completed more than once: {dup[:5]}"
    # Fencing tokens never go back in the log, and each claim raised it.
    back = fetch(
        db_url,
        "SELECT sample_id FROM (SELECT sample_id, fencing_token, lag(fencing_token) OVER "
        "(PARTITION BY sample_id ORDER BY transition_id) AS prev FROM geo.state_transitions) t "
        "WHERE fencing_token < prev LIMIT 5",
    )
    assert not back, f"fencing token went back: {back}"
    claims = fetch(
        db_url,
        "SELECT sample_id FROM (SELECT sample_id, fencing_token, lag(fencing_token) OVER "
        "(PARTITION BY sample_id ORDER BY transition_id) AS prev FROM geo.state_transitions "
        "WHERE layer = 'collection' AND to_state = 'running') t "
        "WHERE fencing_token <= prev LIMIT 5",
    )
    assert not claims, f"two claims with the same token: {claims}"
    # No duplicate ledger charge: one charge per (sample, attempt), idempotency key unique.
    dupc = fetch(
        db_url,
        "SELECT sample_id, attempt_no, count(*) AS n FROM geo.ledger_entries "
        "WHERE kind = 'charge' GROUP BY 1, 2 HAVING count(*) > 1",
    )
    assert not dupc, f"duplicate charges: {dupc[:5]}"
    # Every completed sample is accepted and charged exactly for its completing attempt.
    uncharged = fetch(
        db_url,
        "SELECT s.sample_id FROM geo.samples s WHERE s.collection_state = 'completed' "
        "AND NOT EXISTS (SELECT 1 FROM geo.ledger_entries l WHERE l.kind = 'charge' "
        "AND l.sample_id = s.sample_id AND l.attempt_no = s.attempt_no) LIMIT 5",
    )
    assert not uncharged, f"completed without a charge: {uncharged}"
    # One completion event per sample that reached a terminal collection state.
    ev = fetch(
        db_url,
        "SELECT s.sample_id, count(o.outbox_id) AS n FROM geo.samples s "
        "LEFT JOIN geo.outbox o ON o.sample_id = s.sample_id AND o.kind = 'completion' "
        "WHERE s.collection_state IN ('completed', 'failed') GROUP BY 1 HAVING count(o.outbox_id) <> 1",
    )
    assert not ev, f"completion events not exactly one: {ev[:5]}"
    # Attempts and acceptance records agree: one acceptance record per attempt.
    orphan = fetch(
        db_url,
        "SELECT a.sample_id, a.attempt_no FROM geo.attempts a LEFT JOIN geo.upstream_requests u "
        "USING (sample_id, attempt_no) WHERE u.sample_id IS NULL LIMIT 5",
    )
    assert not orphan, f"attempts without acceptance record: {orphan}"
    out["samples"] = n
    out["states"] = dict(states(db_url))
    return out


# --------------------------------------------------------------------------- chaos invariants
# Unlike check_invariants (which stops at the first breach), these return every violation per
# invariant with examples, so a soak can print a table. The simulator-side ones compare what the
# PLATFORM saw (its own task list per idempotency key) with the database: invariants that read
# only the database cannot see a duplicate side effect.

DB_INVARIANTS: dict[str, str] = {
    # One accepted completion per sample: one 'running -> completed' in the log...
    "one_completion_per_sample": (
        "SELECT sample_id, count(*) AS n FROM geo.state_transitions "
        "WHERE layer = 'collection' AND to_state = 'completed' GROUP BY 1 HAVING count(*) > 1"
    ),
    # ... and exactly one completion event per sample that reached a terminal collection state.
    "one_completion_event": (
        "SELECT s.sample_id, count(o.outbox_id) AS n FROM geo.samples s "
        "LEFT JOIN geo.outbox o ON o.sample_id = s.sample_id AND o.kind = 'completion' "
        "WHERE s.collection_state IN ('completed', 'failed') GROUP BY 1 "
        "HAVING count(o.outbox_id) <> 1"
    ),
    # Fencing tokens never go back in the log, and every claim raised the token.
    "fencing_tokens_increase": (
        "SELECT sample_id, transition_id, fencing_token, prev FROM (SELECT sample_id, "
        "transition_id, fencing_token, lag(fencing_token) OVER (PARTITION BY sample_id ORDER BY "
        "transition_id) AS prev FROM geo.state_transitions) t WHERE fencing_token < prev "
        "UNION ALL SELECT sample_id, transition_id, fencing_token, prev FROM (SELECT sample_id, "
        "transition_id, fencing_token, lag(fencing_token) OVER (PARTITION BY sample_id ORDER BY "
        "transition_id) AS prev FROM geo.state_transitions WHERE layer = 'collection' AND "
        "to_state = 'running') c WHERE fencing_token <= prev"
    ),
    # No stale write: every change a worker logged carries a token that worker itself claimed
    # (a worker writing under a token another worker claimed, or never claimed, got past the fence).
    "no_stale_write": (
        "SELECT t.sample_id, t.transition_id, t.layer, t.to_state, t.fencing_token, t.actor "
        "FROM geo.state_transitions t WHERE t.actor LIKE 'worker:%' AND NOT EXISTS ("
        "SELECT 1 FROM geo.state_transitions c WHERE c.sample_id = t.sample_id "
        "AND c.layer = 'collection' AND c.to_state = 'running' "
        "AND c.fencing_token = t.fencing_token AND c.actor = t.actor)"
    ),
    # One charge per charged attempt, and a completed sample is charged for its attempt.
    "one_charge_per_attempt": (
        "SELECT sample_id, attempt_no, count(*) AS n, 'duplicate' AS what FROM geo.ledger_entries "
        "WHERE kind = 'charge' GROUP BY 1, 2 HAVING count(*) > 1 "
        "UNION ALL SELECT s.sample_id, s.attempt_no, 0, 'completed, not charged' "
        "FROM geo.samples s WHERE s.collection_state = 'completed' AND NOT EXISTS ("
        "SELECT 1 FROM geo.ledger_entries l WHERE l.kind = 'charge' "
        "AND l.sample_id = s.sample_id AND l.attempt_no = s.attempt_no)"
    ),
    # The trigger-maintained run accounts equal the sums recomputed from the entries, and no
    # balance went negative.
    "ledger_recomputes": (
        "SELECT a.run_id, 'run account differs from entries' AS what FROM geo.run_accounts a "
        "JOIN geo.run_billing b USING (run_id) WHERE (a.estimated_minor, a.reserved_minor, "
        "a.overrun_minor, a.charged_minor, a.released_minor, a.refunded_minor) IS DISTINCT FROM "
        "(b.estimated_minor, b.reserved_total_minor, b.overrun_minor, b.charged_minor, "
        "b.released_minor, b.refunded_minor) "
        "UNION ALL SELECT run_id, 'reservation overdrawn' FROM geo.run_billing "
        "WHERE reservation_left_minor < 0 "
        "UNION ALL SELECT tenant_id, 'negative balance' FROM geo.account_balances "
        "WHERE available_minor < 0 OR reserved_minor < 0 OR spent_minor < 0"
    ),
    # Every sample is terminal with a reason, or visible to an operator with one: submission
    # 'uncertain' (samples uncertain), or a dead-lettered stream entry.
    "terminal_or_visible": (
        "SELECT s.sample_id, s.collection_state, s.submission_state, s.collection_reason, "
        "s.submission_reason FROM geo.samples s WHERE NOT ("
        "(s.collection_state = 'completed') "
        "OR (s.collection_state = 'failed' AND s.collection_reason IS NOT NULL) "
        "OR (s.submission_state = 'uncertain' AND s.submission_reason IS NOT NULL) "
        "OR EXISTS (SELECT 1 FROM geo.dead_letters d WHERE d.sample_id = s.sample_id))"
    ),
    # A cancelled run is closed, its reservation released to the last minor unit.
    "cancelled_runs_close": (
        "SELECT r.run_id, r.closed_at, b.reservation_left_minor FROM geo.runs r "
        "LEFT JOIN geo.run_billing b USING (run_id) WHERE r.cancel_requested_at IS NOT NULL "
        "AND (r.closed_at IS NULL OR coalesce(b.reservation_left_minor, 0) <> 0)"
    ),
}


def invariant_violations(db_url: str) -> dict[str, list[dict[str, Any]]]:
    """Every database invariant above with the rows that break it (empty list = holds).

    The database is analysed first: several checks join a table to itself or to another, and a
    planner without statistics (autovacuum is off on the test server, or has not run since the
    storm) joined 100,123 state_transitions rows to themselves in a nested loop -- minutes of
    CPU in the chaos soak (issue 30; test_invariant_statistics.py)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    return {name: fetch(db_url, sql) for name, sql in DB_INVARIANTS.items()}


def platform_violations(
    db_url: str,
    task_ids: dict[str, dict[str, list[list[Any]]]],
    *,
    sim_labels: dict[str, str],
    idempotent: set[str],
) -> dict[str, list[dict[str, Any]]]:
    """Compare the simulator's own record of upstream tasks (``/_control/stats?tasks=1``'s
    ``task_ids``: ``{label: {key: [[task_id, paid], ...]}}``) with the database.

    ``sim_labels`` maps a simulator stats label (``deepseek``, ``openai/deepseek``) to the
    registry platform whose samples it served; ``idempotent`` names the platforms whose submit
    honours the idempotency key (a re-send under the key cannot create a second task).
    Invariants:

    - ``tasks_per_key``: at most one upstream task per idempotency key, on every platform (on a
      synchronous one a re-send under the same key is a second paid answer);
    - ``tasks_per_sample``: a sample's upstream tasks never outnumber its attempts the database
      holds as accepted or uncertain (a task under an attempt recorded as not accepted, or never
      recorded, is a second execution nobody accounts for);
    - ``completed_one_paid_task``: a completed sample on an idempotent platform has exactly one
      paid (completed) task upstream, and it is the one the sample completed with;
    - ``upstream_task_known``: every task the platform created is known to the database by its
      upstream id (geo.upstream_requests / geo.samples) or, for an attempt whose response never
      came back, by its key on an 'uncertain' acceptance record an operator can resolve;
    - ``paid_answer_lost``: a sample with a paid upstream answer is never 'failed' without a
      charge (the tenant's answer was billed by the platform, then thrown away);
    - ``charge_without_task``: no charge without an upstream task: a sample's charges never
      outnumber its upstream tasks and a charge's upstream id is one the platform created.
    """
    samples = {
        r["sample_id"]: r
        for r in fetch(
            db_url,
            "SELECT sample_id, platform, collection_state, submission_state, upstream_id, "
            "attempt_no FROM geo.samples",
        )
    }
    requests: dict[str, dict[str, Any]] = {
        r["idempotency_key"]: r
        for r in fetch(
            db_url,
            "SELECT idempotency_key, sample_id, attempt_no, platform, state, upstream_id "
            "FROM geo.upstream_requests",
        )
    }
    known_ids = {(r["platform"], r["upstream_id"]) for r in requests.values() if r["upstream_id"]}
    known_ids |= {(s["platform"], s["upstream_id"]) for s in samples.values() if s["upstream_id"]}
    live_attempts: Counter[str] = Counter(
        r["sample_id"] for r in requests.values() if r["state"] in ("accepted", "uncertain")
    )
    charges: dict[str, list[dict[str, Any]]] = {}
    for r in fetch(
        db_url,
        "SELECT sample_id, attempt_no, upstream_id FROM geo.ledger_entries WHERE kind = 'charge' "
        "AND sample_id IS NOT NULL",
    ):
        charges.setdefault(r["sample_id"], []).append(r)

    out: dict[str, list[dict[str, Any]]] = {
        k: []
        for k in (
            "tasks_per_key",
            "tasks_per_sample",
            "completed_one_paid_task",
            "upstream_task_known",
            "paid_answer_lost",
            "charge_without_task",
        )
    }
    # sample -> [(key, task_id as the database would name it, paid)]
    per_sample: dict[str, list[tuple[str, str, Any]]] = {}
    for label, keys in task_ids.items():
        platform = sim_labels.get(label)
        if platform is None:
            continue  # traffic of a platform the run did not use
        synchronous = "/" in label
        for key, tasks in keys.items():
            if len(tasks) > 1:
                out["tasks_per_key"].append(
                    {"platform": platform, "key": key, "tasks": [t[0] for t in tasks]}
                )
            sample = key.rsplit(":", 1)[0]
            for tid, paid in tasks:
                if (
                    synchronous
                    and paid is False
                    and (requests.get(key) or {}).get("state") != ("accepted")
                ):
                    # The engine answered this call with an error object inside HTTP 200: it did
                    # no work and billed none, and the worker rightly took it as a 'no' and
                    # opened a new attempt. Not an execution. (A call the database recorded as
                    # accepted -- a filtered answer, a failed task -- still counts.)
                    continue
                # A synchronous connector names the attempt '<platform>:<response id>'.
                db_id = f"{platform}:{tid.split('#', 1)[0]}" if synchronous else tid
                per_sample.setdefault(sample, []).append((key, db_id, paid))
                req = requests.get(key)
                if (platform, db_id) not in known_ids and not (req and req["state"] == "uncertain"):
                    out["upstream_task_known"].append(
                        {
                            "platform": platform,
                            "key": key,
                            "task_id": tid,
                            "db_request": req and req["state"],
                            "sample_state": (samples.get(sample) or {}).get("collection_state"),
                        }
                    )
    for sample, tasks in per_sample.items():
        s = samples.get(sample)
        if s is None:
            continue  # a key this database never issued (another test's traffic)
        if len(tasks) > live_attempts[sample]:
            out["tasks_per_sample"].append(
                {
                    "sample_id": sample,
                    "tasks": len(tasks),
                    "accepted_or_uncertain_attempts": live_attempts[sample],
                    "keys": sorted({k for k, _, _ in tasks}),
                }
            )
        paid = [t for t in tasks if t[2] is True]
        if s["collection_state"] == "completed" and s["platform"] in idempotent:
            if len(paid) != 1 or paid[0][1] != s["upstream_id"]:
                out["completed_one_paid_task"].append(
                    {
                        "sample_id": sample,
                        "paid_tasks": [t[1] for t in paid],
                        "completed_with": s["upstream_id"],
                    }
                )
        if paid and s["collection_state"] == "failed" and not charges.get(sample):
            out["paid_answer_lost"].append(
                {"sample_id": sample, "platform": s["platform"], "paid_tasks": [t[1] for t in paid]}
            )
    for sample, rows in charges.items():
        tasks = per_sample.get(sample, [])
        ids = {t[1] for t in tasks}
        bad = [r for r in rows if r["upstream_id"] and r["upstream_id"] not in ids]
        if len(rows) > len(tasks) or bad:
            out["charge_without_task"].append(
                {
                    "sample_id": sample,
                    "charges": len(rows),
                    "tasks": len(tasks),
                    "unknown_upstream_ids": [r["upstream_id"] for r in bad],
                }
            )
    return out
