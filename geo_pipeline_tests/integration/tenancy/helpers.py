"""Two tenants' worth of real data, planted the way production makes it -- connected as a
``geo_service`` login, so the planting itself proves the processes' privileges -- and logins of
each role, created per test and dropped after.

This machine's PostgreSQL trusts local connections: a password is not checked, so these tests
show what the roles, grants and policies allow, not that a wrong password is refused.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from geo_pipeline.analysis.review import resolve
from geo_pipeline.analysis.run import analyse_run
from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.connectors.base import Citation, Evidence, FeeLine, FeeStatement, SubmitRequest
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan
from geo_pipeline.domain.plan import quote as make_quote
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import status, tenancy
from geo_pipeline_tests.integration.execution.helpers import CAPS, FakeConnector, fetch
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until


def with_user(url: str, user: str, password: str | None = None) -> str:
    """``url`` logging in as ``user`` (host, port, database and query unchanged)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    cred = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    return urlunsplit(parts._replace(netloc=f"{cred}@{host}"))


@contextmanager
def login_role(admin_url: str, prefix: str, member_of: str) -> Iterator[str]:
    """A throwaway LOGIN role in ``member_of`` whose sessions start as ``member_of`` (role
    attributes such as BYPASSRLS are not inherited through membership; the session must take
    the role). Roles are cluster-wide: a unique name per test."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(ident, sql.Identifier(member_of))
        )
        conn.execute(sql.SQL("ALTER ROLE {} SET role = {}").format(ident, sql.Literal(member_of)))
    try:
        yield name
    finally:
        drop_role(admin_url, name)


def analyst_role(admin_url: str, tenant: str, name: str | None = None) -> str:
    """An analyst role of ``tenant`` on the service's server as it is since issue 35: NOLOGIN, in
    geo_analyst, bound by geo.analyst_logins (what migration 0083 leaves of a login the old
    `grant-analyst` made here). Row-level security reads it through ``current_user``: reach it
    with ``SET ROLE`` (or ``analyst_session``). Roles are cluster-wide: drop it after."""
    name = name or tenancy.opaque_login()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE {}").format(
                sql.Identifier(name), sql.Identifier(tenancy.ANALYST_GROUP)
            )
        )
        conn.execute(
            "INSERT INTO geo.analyst_logins (login, tenant_id) VALUES (%s, %s)", (name, tenant)
        )
    return name


@contextmanager
def analyst_session(admin_url: str, role: str) -> Iterator[str]:
    """A URL whose sessions run as the NOLOGIN analyst ``role`` (``current_user``): a throwaway
    login that is a member of that role only and starts as it, so what RLS, grants and the
    catalogue give the role is what such a session gets, and no other role can be taken."""
    with login_role(admin_url, "sess", role) as login:
        yield with_user(admin_url, login)


def drop_role(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


class CitingConnector(FakeConnector):
    """The in-test connector, answering with citations (so geo.citations gets rows)."""

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        ev = await super().fetch_evidence(upstream_id, request)
        return Evidence(
            **{
                **ev.__dict__,
                "citations": (Citation("https://luckincoffee.com/menu?utm_source=x"),),
            }
        )


# The same engine through the browser lane (issue 31): deepseek_web (access browser) beside the
# deepseek API channel, so analytics.ui_api_agreement holds each tenant's rows. Offered only
# with its profiles variable set; its capabilities come from the registry's disabled entry.
_REGISTRY = load_registry()
UI_PLATFORM = "deepseek_web"
UI_CAPS = {
    **CAPS,
    UI_PLATFORM: {**_REGISTRY.disabled, **_REGISTRY.entries}[UI_PLATFORM].capabilities,
}
UI_PRICES = {p: c.prices for p, c in UI_CAPS.items()}


class BrowserLaneFake(CitingConnector):
    """The in-test connector standing in for the browser lane (nothing is driven)."""

    def capabilities(self) -> Any:
        return UI_CAPS[self.platform]


def plant_tenant(
    service_url: str, admin_url: str, redis_url: str, ns: str, tenant: str, archive_dir: str
) -> str:
    """One small real run of ``tenant`` through every stage: create (monitor, snapshot, quote,
    batches, samples, ledger) -> worker (attempts, requests, transitions, evidence, answers,
    citations, charges) -> analysis and analyst tables -> a review verdict -> a publication ->
    a fee statement and its reconciliation; and the few rows no short run produces (a deadline
    publication's exclusion, a retention record). Returns the run id."""
    run_id = f"r-{tenant}"
    raw = {
        "tenant": tenant,
        "monitor": f"m-{tenant}",
        "brand": {"name": f"Brand {tenant}", "aliases": [tenant], "domains": ["luckincoffee.com"]},
        "competitors": [{"name": "星巴克", "aliases": ["Starbucks"]}],
        "questions": [f"{tenant} 的问题 {i}：哪家咖啡最好？" for i in range(2)],
        "channels": [
            {"platform": "deepseek", "device": "web"},
            {"platform": UI_PLATFORM, "device": "desktop", "modes": ["standard"]},
        ],
        "repeats": 1,
        "screenshot": "off",
        # Tagged (issue 37), so analytics.question_tags / brand_rates_by_tag hold its rows.
        "question_tags": {f"{tenant} 的问题 0：哪家咖啡最好？": {"topic": "coffee"}},
    }
    config = normalise_and_validate(raw, UI_CAPS)
    # The day before, a run of the same monitor: day-over-day and trend views need two days.
    before = build_plan(config, make_quote(config, UI_PRICES), f"{run_id}-d0")
    plan = build_plan(config, make_quote(config, UI_PRICES), run_id)
    with psycopg.connect(service_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c: Any = conn
        tenancy.create_tenant(c, tenant)
        ledger.deposit(c, tenant, 10**10, "CNY", f"dep-{tenant}")
        c.commit()
        for p, day in ((before, date(2026, 11, 30)), (plan, date(2026, 12, 1))):
            create_run(
                c, p, monitor_id=config.monitor, scheduled_for=day, confirm=True, dispatch=True
            )
        c.commit()
        tenancy.set_platform_limit(c, tenant, "deepseek", 50.0)
    n = len(plan.samples) + len(before.samples)
    fake = CitingConnector("deepseek")
    # Evidence as WARC (issue 33), so geo.warc_records holds this tenant's rows too.
    before_format = os.environ.get("GEO_EVIDENCE_FORMAT")
    os.environ["GEO_EVIDENCE_FORMAT"] = "warc"
    try:
        asyncio.run(
            run_worker_until(
                service_url,
                redis_url,
                ns,
                {"deepseek": fake, UI_PLATFORM: BrowserLaneFake(UI_PLATFORM)},
                lambda: _terminal(service_url, run_id) + _terminal(service_url, before.run_id) == n,
                archive=LocalArchive(archive_dir),
                capabilities=UI_CAPS,
            )
        )
    finally:
        os.environ.pop("GEO_EVIDENCE_FORMAT", None)
        if before_format is not None:
            os.environ["GEO_EVIDENCE_FORMAT"] = before_format
    done = _terminal(service_url, run_id) + _terminal(service_url, before.run_id)
    assert done == n, "the planting runs did not finish"
    with psycopg.connect(service_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c = conn
        analyse_run(c, before.run_id)
        analyse_run(c, run_id)
        c.commit()
        first = plan.samples[0].sample_id
        resolve(c, first, "valid", "checked by hand", "operator:test")
        # The day before: its answers counted too, so day-over-day comparisons have two days.
        for s in before.samples:
            resolve(c, s.sample_id, "valid", "checked by hand", "operator:test")
        c.commit()
        status.record_publication(c, run_id, "deepseek__web", None)
        c.commit()
        days = reconcile.statement_days_needed(c, run_id)
        charges = fetch(
            service_url,
            "SELECT l.upstream_id, l.amount_minor, s.platform FROM geo.ledger_entries l"
            " JOIN geo.samples s USING (sample_id) WHERE l.run_id = %s AND l.kind = 'charge'",
            (run_id,),
        )
        for platform, dates in days.items():
            lines = tuple(
                FeeLine(r["upstream_id"], "base", r["amount_minor"], "CNY")
                for r in charges
                if r["platform"] == platform
            )
            reconcile.import_statement(c, FeeStatement(platform, dates[0], "CNY", lines))
        reconcile.reconcile_run(c, run_id)
        c.commit()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        pub = conn.execute(
            "INSERT INTO geo.partition_publications (run_id, channel, basis, deadline_at, samples,"
            " included, excluded, excluded_reasons) VALUES (%s, 'deepseek__web', 'deadline', now(),"
            " 1, 0, 1, '{\"queued\": 1}') RETURNING publication_id",
            (run_id,),
        ).fetchone()
        assert pub is not None
        conn.execute(
            "INSERT INTO geo.publication_exclusions (publication_id, sample_id, reason,"
            " submission_state, collection_state, attempt_no) VALUES (%s, %s, 'queued',"
            " 'planned', 'queued', 0)",
            (pub[0], first),
        )
        conn.execute(
            "INSERT INTO geo.retention_log (run_id, tenant_id, retention_days, cutoff,"
            " objects_deleted, bytes_deleted, attempts_deleted) VALUES (%s, %s, 30, now(), 0, 0, 0)",
            (run_id, tenant),
        )
        # A monitor's history and a failed re-sample (issue 37).
        conn.execute(
            "INSERT INTO geo.monitor_events (monitor_id, tenant_id, event, revision, actor)"
            " VALUES (%s, %s, 'paused', 1, 'operator:test')",
            (config.monitor, tenant),
        )
        conn.execute(
            "INSERT INTO geo.monitor_resample_failures (monitor_id, tenant_id, day, reason_kind,"
            " reason) VALUES (%s, %s, '2026-12-02', 'insufficient_balance', 'short')",
            (config.monitor, tenant),
        )
    return run_id


def _terminal(url: str, run_id: str) -> int:
    rows = fetch(
        url,
        "SELECT count(*) AS n FROM geo.samples WHERE run_id = %s "
        "AND collection_state IN ('completed', 'failed')",
        (run_id,),
    )
    return int(rows[0]["n"])
