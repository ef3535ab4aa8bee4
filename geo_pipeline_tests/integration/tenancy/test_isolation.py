"""Tenant B's analyst sees none of tenant A's rows, in every table and view of geo and analytics
-- enumerated from the catalogue, so a table added tomorrow is covered (or fails) without anyone
remembering this test -- and sees all of its own. Escapes are refused.

Trust authentication on this machine means passwords are not checked here: these tests prove
what a login may do once connected (roles, grants, policies), not the password check.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from geo_pipeline_tests.integration.tenancy.conftest import World

# Objects analysts are not granted, each with its reason. Anything else must be granted.
NOT_FOR_ANALYSTS = {
    "geo.outbox": "stream transport: ids and routing hints, no business facts",
    "geo.dead_letters": "stream transport: undeliverable entries, no tenant column",
    "geo.fee_statements": "a platform's statement covers every tenant",
    "geo.fee_statement_lines": "a platform's statement covers every tenant; a tenant's own side "
    "is geo.reconciliation_lines",
    "geo.accounts": "the operator's browser-lane accounts serve every tenant; no tenant column",
    "geo.alert_recipients": "the operator's routing of a tenant's alerts (addresses, variable "
    "names), managed with `monitors recipients`",
    "geo.alert_deliveries": "the operator's delivery log of tenant alerts",
    "geo.account_sends": "the operator's browser-lane send journal (which shared account sent "
    "which key), read by the lookup after a crash",
    "geo.webhook_deliveries": "a service's callbacks as received (transport, keyed by the "
    "vendor's task id), before they settle a sample",
}
# Granted, the same rows for every tenant, no tenant data.
SHARED = {
    "geo.allowed_transitions": "the state rules (R6), identical for every tenant",
    "geo.price_versions": "the platforms' published price lists, the same for every tenant",
}
# How a row names its tenant, in order of preference: the first column an object has.
KEYS = (
    "tenant_id",
    "run_id",
    "sample_id",
    "publication_id",
    "quote_id",
    "snapshot_id",
    "monitor_id",
    "question_revision",
    "login",
)
OWNERS = {
    "tenant_id": "SELECT tenant_id AS k, tenant_id AS t FROM geo.tenants",
    "run_id": "SELECT run_id AS k, tenant_id AS t FROM geo.runs",
    "sample_id": "SELECT sample_id AS k, tenant_id AS t FROM geo.samples",
    "publication_id": "SELECT p.publication_id::text AS k, r.tenant_id AS t "
    "FROM geo.partition_publications p JOIN geo.runs r USING (run_id)",
    "quote_id": "SELECT quote_id AS k, tenant_id AS t FROM geo.quote_snapshots",
    "snapshot_id": "SELECT snapshot_id AS k, tenant_id AS t FROM geo.config_snapshots",
    "monitor_id": "SELECT monitor_id AS k, tenant_id AS t FROM geo.monitors",
    "question_revision": "SELECT DISTINCT question_revision AS k, tenant_id AS t FROM geo.samples",
    "login": "SELECT login AS k, tenant_id AS t FROM geo.analyst_logins",
}
OBJECTS = """
SELECT n.nspname || '.' || c.relname AS name, c.oid, c.relkind, c.relrowsecurity,
       pg_get_userbyid(c.relowner) AS owner, coalesce(c.reloptions, '{}') AS reloptions,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('geo', 'analytics') AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY 1"""


def _rows(url: str, query: Any, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:  # type: ignore[arg-type]
        return [dict(r) for r in conn.execute(query, params).fetchall()]


def _owners(url: str) -> dict[str, dict[str, set[str]]]:
    out: dict[str, dict[str, set[str]]] = {}
    for key, q in OWNERS.items():
        m: dict[str, set[str]] = {}
        for r in _rows(url, q):
            m.setdefault(str(r["k"]), set()).add(r["t"])
        out[key] = m
    return out


def _per_key(url: str, name: str, key: str) -> Counter[str]:
    schema, rel = name.split(".")
    q = sql.SQL("SELECT {k}::text AS k, count(*) AS n FROM {t} GROUP BY 1").format(
        k=sql.Identifier(key), t=sql.Identifier(schema, rel)
    )
    return Counter({str(r["k"]): int(r["n"]) for r in _rows(url, q)})


def test_every_table_and_view_shows_a_tenant_its_own_rows_and_nothing_else(world: World):
    problems, checked = isolation_problems(world)
    assert not problems, "\n".join(problems)
    assert checked > 30


def test_a_new_table_without_a_policy_fails_the_check(world: World):
    with psycopg.connect(world.admin_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE geo.new_facts (tenant_id text, fact text)")
        conn.execute("ALTER TABLE geo.new_facts OWNER TO geo_owner")
        conn.execute(
            "INSERT INTO geo.new_facts VALUES (%s, 'a secret'), (%s, 'b secret')",
            (world.a, world.b),
        )
        try:
            problems, _ = isolation_problems(world)
            assert (
                "geo.new_facts: not granted to geo_analyst and not listed in NOT_FOR_ANALYSTS "
                "(grant it with a policy, or list it with the reason)" in problems
            )
            conn.execute("GRANT SELECT ON geo.new_facts TO geo_analyst")
            problems, _ = isolation_problems(world)
            mine = [p for p in problems if p.startswith("geo.new_facts")]
            assert "geo.new_facts: row-level security is not enabled" in mine
            assert any("sees rows of others" in p for p in mine), mine
            conn.execute("ALTER TABLE geo.new_facts ENABLE ROW LEVEL SECURITY")
            problems, _ = isolation_problems(world)
            assert any(p.startswith("geo.new_facts") and "sees 0 of its 1 rows" in p
                       for p in problems), problems  # fmt: skip
        finally:
            conn.execute("DROP TABLE geo.new_facts")


def isolation_problems(world: World) -> tuple[list[str], int]:
    """Every way an object of geo or analytics breaks tenant isolation, and how many objects
    had their rows compared."""
    objects = _rows(world.admin_url, OBJECTS)
    assert len(objects) > 30, "the catalogue query found too little"
    owners = _owners(world.admin_url)
    problems: list[str] = []
    checked = 0
    for obj in objects:
        name = obj["name"]
        if obj["relkind"] in ("r", "p") and not obj["relrowsecurity"]:
            problems.append(f"{name}: row-level security is not enabled")
        if obj["owner"] != "geo_owner":
            problems.append(f"{name}: owned by {obj['owner']}, not geo_owner")
        granted = _rows(
            world.admin_url,
            "SELECT p AS privilege FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', "
            "'TRUNCATE', 'REFERENCES', 'TRIGGER']) p WHERE has_table_privilege(%s, %s::oid, p)",
            (world.b_login, obj["oid"]),
        )
        privileges = {r["privilege"] for r in granted}
        if privileges - {"SELECT"}:
            problems.append(f"{name}: analysts may {sorted(privileges - {'SELECT'})}")
        if "SELECT" not in privileges:
            if name not in NOT_FOR_ANALYSTS:
                problems.append(
                    f"{name}: not granted to geo_analyst and not listed in NOT_FOR_ANALYSTS "
                    "(grant it with a policy, or list it with the reason)"
                )
            continue
        if name in NOT_FOR_ANALYSTS:
            problems.append(f"{name}: listed as not for analysts, but granted")
        if obj["relkind"] == "m":
            problems.append(f"{name}: a materialised view ignores row-level security")
            continue
        if obj["relkind"] == "v" and "security_invoker=true" not in obj["reloptions"]:
            problems.append(f"{name}: a view without security_invoker reads as its owner")
        if name in SHARED:
            continue
        key = next((k for k in KEYS if k in obj["columns"]), None)
        if key is None:
            problems.append(f"{name}: no column names its tenant ({', '.join(KEYS)})")
            continue
        everyone = _per_key(world.admin_url, name, key)

        def owned(tenant: str, counts: Counter[str], k: str = key) -> Counter[str]:
            return Counter({v: n for v, n in counts.items() if tenant in owners[k].get(v, set())})

        for me, me_url, other in ((world.b, world.b_url, world.a), (world.a, world.a_url, world.b)):
            seen = _per_key(me_url, name, key)
            foreign = {v: n for v, n in seen.items() if me not in owners[key].get(v, set())}
            if foreign:
                problems.append(f"{name}: {me}'s analyst sees rows of others: {foreign}")
            if seen != owned(me, everyone):
                problems.append(
                    f"{name}: {me}'s analyst sees {sum(seen.values())} of its "
                    f"{sum(owned(me, everyone).values())} rows"
                )
            if not owned(other, everyone):
                problems.append(
                    f"{name}: no rows of {other} were planted (the check proves nothing)"
                )
        checked += 1
    return problems, checked


def test_analysts_cannot_write_or_create_anything(world: World):
    with psycopg.connect(world.b_url, autocommit=True) as conn:
        for stmt in (
            "INSERT INTO geo.tenants (tenant_id, name) VALUES ('evil', 'x')",
            f"UPDATE geo.samples SET priority = 1 WHERE tenant_id = '{world.a}'",
            "DELETE FROM geo.ledger_entries",
            "TRUNCATE analytics.brand_metrics",
            "CREATE TABLE geo.mine (x int)",
            "CREATE TABLE public.mine (x int)",
            "CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "INSERT INTO geo.analyst_logins (login, tenant_id) VALUES (current_user, 'x')",
        ):
            with pytest.raises(psycopg.Error) as err:
                conn.execute(stmt)  # type: ignore[arg-type]
            assert isinstance(
                err.value,
                (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction),
            ), (stmt, err.value)


def _sees_a(conn: Any, a: str) -> int:
    row = conn.execute("SELECT count(*) FROM analytics.sample_facts WHERE tenant_id = %s", (a,))
    return int(row.fetchone()[0])


def test_escapes_are_refused(world: World):
    with psycopg.connect(world.b_url, autocommit=True) as conn:
        assert _sees_a(conn, world.b) > 0 and _sees_a(conn, world.a) == 0
        for role in ("geo_service", "geo_owner", "postgres", world.a_login):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(world.a_login))
            )
        # SET ROLE to the group itself is allowed (a member may) and shows nothing at all.
        conn.execute("SET ROLE geo_analyst")
        assert conn.execute("SELECT count(*) FROM geo.samples").fetchone()[0] == 0  # type: ignore[index]
        conn.execute("RESET ROLE")
        # No setting names the tenant: whatever a session sets, it sees its own rows only.
        for setting in ("geo.tenant", "geo.tenant_id", "app.tenant", "app.tenant_id",
                        "geo.actor", "request.jwt.claim.tenant", "role"):  # fmt: skip
            try:
                conn.execute("SELECT set_config(%s, %s, false)", (setting, world.a))
            except psycopg.Error:
                continue  # refused outright ('role' names no role B may take)
            assert _sees_a(conn, world.a) == 0, setting
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET row_security = off")
            conn.execute("SELECT count(*) FROM geo.samples")
        conn.execute("RESET row_security")
        # COPY applies the same policies.
        with conn.cursor() as cur:
            with cur.copy("COPY (SELECT tenant_id FROM geo.samples) TO STDOUT") as cp:
                got = {bytes(row).decode().strip() for row in cp}
        assert got == {world.b}
        with conn.cursor() as cur:
            with cur.copy("COPY geo.runs (tenant_id) TO STDOUT") as cp:
                got = {bytes(row).decode().strip() for row in cp}
        assert got == {world.b}
        # Planner statistics are not a side door: pg_stats hides tables whose RLS applies.
        with psycopg.connect(world.admin_url, autocommit=True) as admin:
            admin.execute("ANALYZE geo.samples, geo.answers, geo.runs")
        leaked = conn.execute(
            "SELECT tablename, attname FROM pg_stats WHERE schemaname IN ('geo', 'analytics')"
        ).fetchall()
        assert leaked == []
        # Trigger functions cannot be called to act as someone else.
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT geo.forbid_change()")
        # Every function the analyst can call runs as the analyst (no SECURITY DEFINER).
        definers = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = "
            "p.pronamespace WHERE p.prosecdef AND n.nspname NOT IN ('pg_catalog', "
            "'information_schema') AND has_function_privilege(p.oid, 'EXECUTE')"
        ).fetchall()
        assert definers == []
        # The analytics functions compute from their arguments only.
        z = conn.execute("SELECT analytics.two_proportion_z(1, 10, 5, 10), "
                         "analytics.wilson_lower(1, 10), analytics.wilson_upper(1, 10), "
                         "geo.exclusion_reason('planned', 'queued', 0), "
                         "geo.analyst_tenant()").fetchone()  # fmt: skip
        assert z is not None and z[4] == world.b
        assert _sees_a(conn, world.a) == 0


def test_functions_in_geo_and_analytics_are_not_definer_escapes(world: World):
    rows = _rows(
        world.admin_url,
        "SELECT p.oid::regprocedure::text AS f, p.prosecdef, p.provolatile, l.lanname, "
        "p.prorettype = 'trigger'::regtype AS is_trigger FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang "
        "WHERE n.nspname IN ('geo', 'analytics')",
    )
    assert rows
    assert [r["f"] for r in rows if r["prosecdef"]] == []
    # A function analysts can call that is not a trigger reads nothing or reads as the caller;
    # either way not as its owner (checked above). Their number is known, so a new one is seen.
    callable_ = sorted(r["f"] for r in rows if not r["is_trigger"])
    assert callable_ == [
        # The analyst trends and changes of a monitor's days (0049), as the views computed them:
        # they read brand_metrics, channel_brand_metrics and brand_day_changes as the caller
        # (an analyst: its tenant's rows only). Their writing siblings rewrite_brand_days,
        # refresh_brand_rollup and rebuild_brand_rollup are the service's (EXECUTE revoked from
        # PUBLIC, and analysts may not write the tables): listed below as callable by name only.
        "analytics.brand_changes_of(text,date[])",
        "analytics.brand_trends_of(text,date[])",
        # Pure arithmetic of the question-clustered intervals and change tests (0021): they
        # compute from their arguments and read no table.
        "analytics.clustered_wilson_lower(double precision,double precision,integer,double precision)",
        "analytics.clustered_wilson_upper(double precision,double precision,integer,double precision)",
        "analytics.design_effect(bigint,double precision,double precision,double precision,double precision,double precision)",
        "analytics.normal_two_sided_p(double precision)",
        "analytics.rebuild_brand_rollup(text)",
        "analytics.refresh_brand_rollup(text,date)",
        "analytics.rewrite_brand_days(text,date[])",
        "analytics.t_critical_95(integer)",
        "analytics.t_two_sided_p(double precision,integer)",
        "analytics.two_proportion_z(bigint,bigint,bigint,bigint)",
        "analytics.wilson_lower(bigint,bigint,double precision)",
        "analytics.wilson_upper(bigint,bigint,double precision)",
        "geo.analyst_tenant()",
        "geo.claimable(text,text,text,text,text[])",
        # The analyst replicas' replica identities (0058): DDL run as its caller, the operator
        # (EXECUTE revoked from PUBLIC; only a table's owner may index it or set its identity).
        "geo.enable_replica_identities()",
        "geo.exclusion_reason(text,text,integer)",
        # The sample-id rule (0051): a hash of its arguments, reading no table; and whether the
        # check over it is validated, read from the catalogue every login may read.
        "geo.sample_id_check_in_force()",
        "geo.sample_id_for(text,text,text,text,text,text,integer)",
    ], "a new callable function: check it reads only what its caller may, then list it here"


def test_service_role_has_no_ddl_and_cannot_rewrite_history(world: World):
    with psycopg.connect(world.service_url, autocommit=True) as conn:
        for stmt in (
            "CREATE TABLE geo.mine (x int)",
            "ALTER TABLE geo.samples ADD COLUMN x int",
            "DROP TABLE analytics.brand_metrics",
            "UPDATE geo.ledger_entries SET amount_minor = 0",
            "DELETE FROM geo.ledger_entries",
            "UPDATE geo.state_transitions SET reason = 'x'",
            "DELETE FROM geo.state_transitions",
            "DELETE FROM geo.review_decisions",
            "UPDATE geo.answers SET raw_text = 'x'",
            "UPDATE geo.config_snapshots SET config = '{}'",
            "TRUNCATE geo.samples",
            "SELECT * FROM geo.analyst_logins",
            "INSERT INTO geo.analyst_logins (login, tenant_id) VALUES ('x', 'y')",
            "SET ROLE geo_owner",
        ):
            with pytest.raises(psycopg.Error) as err:
                conn.execute(stmt)  # type: ignore[arg-type]
            assert isinstance(err.value, psycopg.errors.InsufficientPrivilege), (stmt, err.value)
        # And it reads every tenant (the processes are all-tenant).
        n = conn.execute("SELECT count(DISTINCT tenant_id) FROM geo.samples").fetchone()
        assert n is not None and n[0] == 2


def test_the_stored_trends_and_changes_are_guarded_like_their_siblings(world: World):
    """The rows behind analytics.brand_changes / brand_trends (0049) carry the policy of
    analytics.channel_brand_metrics, and each analyst sees exactly its tenant's rows (both
    tenants have some: each planted a monitor's two days)."""
    policies = _rows(
        world.admin_url,
        "SELECT tablename, policyname, permissive, roles::text[] AS roles, cmd, qual, with_check"
        " FROM pg_policies WHERE schemaname = 'analytics' AND tablename IN"
        " ('channel_brand_metrics', 'brand_day_changes', 'brand_day_trends') ORDER BY 1",
    )
    shape = {r["tablename"]: {k: v for k, v in r.items() if k != "tablename"} for r in policies}
    assert shape["brand_day_changes"] == shape["brand_day_trends"] == shape["channel_brand_metrics"]
    for name in ("analytics.brand_day_changes", "analytics.brand_day_trends",
                 "analytics.brand_changes", "analytics.brand_trends"):  # fmt: skip
        everyone = _per_key(world.admin_url, name, "tenant_id")
        assert everyone[world.a] > 0 and everyone[world.b] > 0, (name, everyone)
        for me, url in ((world.a, world.a_url), (world.b, world.b_url)):
            assert _per_key(url, name, "tenant_id") == Counter({me: everyone[me]}), (name, me)
