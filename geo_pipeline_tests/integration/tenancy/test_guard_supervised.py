"""`geo-pipeline dev` runs the analyst guard as a supervised process (issue #35): an analyst role
that gives itself `statement_timeout = 0` for all its later sessions is put back by the running
guard, with no operator command -- on the real server, through the same child dev starts. (No
analyst logs in to this server since migration 0083: the role is reached by a throwaway login
that is a member of it and starts as it; on a tenant's replica, where logins live, the same
guard runs with --replica.)"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import ExitStack
from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.ops import dev
from geo_pipeline.ops.demo import Stack
from geo_pipeline.ops.supervisor import Supervisor
from geo_pipeline.store import analyst_guard, tenancy
from geo_pipeline_tests.integration.tenancy.helpers import analyst_role, analyst_session, drop_role


def _role_settings(admin_url: str, login: str) -> list[str]:
    with psycopg.connect(admin_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        row = conn.execute(
            "SELECT coalesce(array_agg(s ORDER BY s), '{}') AS s FROM pg_db_role_setting d, "
            "unnest(d.setconfig) s WHERE d.setrole = %s::regrole",
            (login,),
        ).fetchone()
    assert row is not None
    return list(row["s"])


def test_dev_runs_the_guard_and_it_undoes_what_a_login_set_for_itself(db_url: str, tmp_path):
    tenant = f"acme-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c: Any = conn
        tenancy.create_tenant(c, tenant)
        c.commit()
    login = analyst_role(db_url, tenant)
    try:
        with psycopg.connect(db_url, autocommit=True) as admin:  # the operator's defaults
            analyst_guard.set_login_defaults(admin, login)  # type: ignore[arg-type]
        operator = _role_settings(db_url, login)
        assert "statement_timeout=300s" in operator
        session = ExitStack()
        analyst_url = session.enter_context(analyst_session(db_url, login))
        with psycopg.connect(analyst_url, autocommit=True) as analyst:
            analyst.execute("SET default_transaction_read_only = off")
            analyst.execute(f'ALTER ROLE "{login}" SET statement_timeout = 0')
        assert "statement_timeout=0" in _role_settings(db_url, login)

        env = {**os.environ, "GEO_DATABASE_URL": db_url, "PYTHONUNBUFFERED": "1"}
        stack = Stack(tmp_path, db_url, "", "", {}, env)
        with Supervisor(tmp_path / "logs", env, grace_s=5) as sup:
            guard = dev.start_analyst_guard(sup, stack, restart=dev.RESTART, every_s=0.5)
            assert guard.name == "analyst-guard"
            line = sup.wait_for_line(guard, lambda s: "restored" in s, 180)
            assert line == f"restored the operator's role defaults of {login}"
            assert _role_settings(db_url, login) == operator
            # Periodic, not one pass: the login does it again and the same child undoes it.
            with psycopg.connect(analyst_url, autocommit=True) as analyst:
                analyst.execute("SET default_transaction_read_only = off")
                analyst.execute(f'ALTER ROLE "{login}" SET default_transaction_read_only = off')
            assert "default_transaction_read_only=off" in _role_settings(db_url, login)
            deadline = time.monotonic() + 180  # the guard passes every 0.5 s; a loaded box
            while _role_settings(db_url, login) != operator and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _role_settings(db_url, login) == operator
            assert guard.proc.poll() is None  # still running
        session.close()
    finally:
        drop_role(db_url, login)
