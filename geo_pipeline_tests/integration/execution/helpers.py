"""Real runs, an in-test connector and the invariants of issue 4, shared by the execution
integration tests and the fault tests. The invariants are read from the DATABASE only."""

from __future__ import annotations

import asyncio
import itertools
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
from geo_pipeline.domain.plan import quote
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.store import runs as runstore

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
    plan = runstore.build_plan(config, quote(config, PRICES), run_id)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        ledger.deposit(conn, tenant, 10**10, "CNY", f"dep-{run_id}")  # type: ignore[arg-type]
        conn.commit()
        runstore.create_run(conn, plan, confirm=True, dispatch=dispatch)  # type: ignore[arg-type]
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
