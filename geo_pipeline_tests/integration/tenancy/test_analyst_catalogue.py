"""What an analyst login still learns from the server's catalogue about another tenant
(issue #35), measured on the real server as a KNOWN LIMIT: tenant B's analyst probes a world
without tenant A and the same world once A has a login and runs. The test pins exactly what
differs -- so a change that leaks more fails here.

Leaks (PostgreSQL gives every login these; no grant refuses them per row):
- **role names**: every login can list every role of the server (``pg_roles``), and revoking
  ``pg_roles`` would not close it: ``oid::regrole`` names any role by its oid with no catalogue
  privilege. What it tells: that one more analyst login exists, under an opaque name
  (``ana_`` + 12 hex), in the same group with the same operator settings as B's own -- the
  number of analyst logins, not whose;
- **table-wide statistics**: ``pg_class.reltuples``, ``pg_relation_size`` and the planner's row
  estimate in ``EXPLAIN ... WHERE tenant_id = '<A>'`` are computed from every tenant's rows (the
  estimate is an existence and size oracle for a guessed tenant id).

Does not leak: a single row of A (RLS), A's tenant id in any role name, membership or setting,
A's binding of its login to its tenant, or A's sessions and locks (test_analyst_session.py).

The remedy, built: a tenant's analyst replica, a server that holds one tenant's rows and
login only, fed by publications with ``WHERE (tenant_id = ...)`` row filters
(store/analyst_replica.py, ``geo-pipeline tenants analyst-replica``). There the same probes give
identical answers with and without A (test_analyst_replica.py). Since migration 0083 no analyst
logs in to the shared server at all (test_cli_tenants.py): this test stays as the reason why,
probed as a session of B's NOLOGIN analyst role (a throwaway login that is a member of it only).
"""

from __future__ import annotations

import re
import uuid
from contextlib import ExitStack
from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.store import tenancy
from geo_pipeline_tests.integration.analysis.helpers import make_run
from geo_pipeline_tests.integration.tenancy.helpers import analyst_role, analyst_session, drop_role

OPAQUE = re.compile(r"ana_[0-9a-f]{12}")


def _admin(url: str) -> Any:
    return psycopg.connect(url, row_factory=dict_row)  # type: ignore[arg-type]


def _one(c: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = c.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def _probe(url: str, tenant_a: str, oid_range: tuple[int, int]) -> dict[str, Any]:
    """Everything B's analyst can ask the catalogue about A (the server's answers)."""
    lo, hi = oid_range
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as c:  # type: ignore[arg-type]
        plan = c.execute(
            "EXPLAIN (FORMAT JSON) SELECT * FROM geo.samples WHERE tenant_id = %s", (tenant_a,)
        ).fetchone()
        assert plan is not None
        return {
            "roles": {
                r["rolname"]
                for r in c.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'ana\\_%%'")
            },
            # no catalogue SELECT needed: the regrole output function names any oid's role
            "roles_by_oid": {
                r["name"]
                for r in c.execute(
                    "SELECT o::regrole::text AS name FROM generate_series(%s::int, %s::int) o "
                    "WHERE o::regrole::text LIKE 'ana\\_%%'",
                    (lo, hi),
                )
            },
            "memberships": {
                (r["member"], r["grp"])
                for r in c.execute(
                    "SELECT m.member::regrole::text AS member, m.roleid::regrole::text AS grp "
                    "FROM pg_auth_members m WHERE m.member::regrole::text LIKE 'ana\\_%%'"
                )
            },
            "settings": {
                (r["who"], r["s"])
                for r in c.execute(
                    "SELECT d.setrole::regrole::text AS who, array_to_string(d.setconfig, ',') "
                    "AS s FROM pg_db_role_setting d WHERE d.setrole::regrole::text LIKE 'ana\\_%%'"
                )
            },
            "reltuples": _one(
                c, "SELECT reltuples::bigint FROM pg_class WHERE oid = 'geo.samples'::regclass"
            ),
            "relation_size": _one(c, "SELECT pg_relation_size('geo.samples')"),
            "estimate": plan["QUERY PLAN"][0]["Plan"]["Plan Rows"],
            "rows_of_a": _one(
                c, "SELECT count(*) FROM geo.samples WHERE tenant_id = %s", (tenant_a,)
            ),
            "bindings": [
                r["tenant_id"] for r in c.execute("SELECT tenant_id FROM geo.analyst_logins")
            ],
        }


def test_what_an_analyst_learns_of_another_tenant_from_the_catalogue(db_url: str):
    suffix = uuid.uuid4().hex[:8]
    a, b = f"acme-{suffix}", f"globex-{suffix}"
    logins: list[str] = []
    sessions = ExitStack()
    try:
        with _admin(db_url) as conn:
            for t in (a, b):
                tenancy.create_tenant(conn, t)
            conn.commit()
        b_login = analyst_role(db_url, b)
        logins.append(b_login)
        with _admin(db_url) as conn:
            conn.execute("ANALYZE geo.samples")
            conn.commit()
            b_oid = conn.execute("SELECT %s::regrole::oid::int AS o", (b_login,)).fetchone()["o"]
        b_url = sessions.enter_context(analyst_session(db_url, b_login))
        span = (b_oid - 5, b_oid + 5000)
        without = _probe(b_url, a, span)

        # Tenant A arrives: a login, and a run of 2 questions x 2 channels x 3 repeats.
        a_login = analyst_role(db_url, a)
        logins.append(a_login)
        with _admin(db_url) as conn:
            make_run(
                conn, f"r-{suffix}", questions=["哪家咖啡好？", "最好喝的拿铁？"],
                channels=[{"platform": "kimi", "device": "web"},
                          {"platform": "doubao", "device": "web"}],
                repeats=3, tenant=a,
            )  # fmt: skip
            conn.execute("ANALYZE geo.samples")
            conn.commit()
        with_a = _probe(b_url, a, span)

        # ---- leaks: one more opaque login, listed with or without pg_roles, same as B's own
        assert with_a["roles"] - without["roles"] == {a_login}
        assert OPAQUE.fullmatch(a_login) and not any(p in a_login for p in a.split("-"))
        assert a_login in with_a["roles_by_oid"] and a_login not in without["roles_by_oid"]
        group = {g for m, g in with_a["memberships"] if m == b_login}
        assert {g for m, g in with_a["memberships"] if m == a_login} == group
        settings = {s for w, s in with_a["settings"] if w == b_login}
        assert {s for w, s in with_a["settings"] if w == a_login} == settings
        # ---- leaks: table-wide sizes and the planner's estimate for A's (guessed) id
        assert with_a["reltuples"] - without["reltuples"] == 12  # A's 12 samples, exactly
        assert with_a["relation_size"] > without["relation_size"]
        assert with_a["estimate"] > without["estimate"], (with_a["estimate"], without["estimate"])
        # ---- does not leak: A's rows, A's name in any role fact, A's login binding
        assert with_a["rows_of_a"] == without["rows_of_a"] == 0
        facts = " ".join(
            [*with_a["roles"], *(g for _, g in with_a["memberships"]),
             *(s for _, s in with_a["settings"])]
        )  # fmt: skip
        assert a.split("-")[0] not in facts and suffix not in facts, facts
        assert with_a["bindings"] == without["bindings"] == [b]
    finally:
        sessions.close()
        for login in logins:
            drop_role(db_url, login)
