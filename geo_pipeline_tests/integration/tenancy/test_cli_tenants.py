"""``geo-pipeline tenants``: create, list, revoke; `grant-analyst` refused on the service's server
(issue 35: logins live on a tenant's analyst replica); and the errors a person can act on."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from geo_pipeline.cli.main import main
from geo_pipeline.store import migrate
from geo_pipeline_tests.integration.tenancy.helpers import analyst_role, drop_role, with_user


class Ran:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """The CLI in this process (a subprocess costs seconds of imports per call)."""

    def run(url: str, *args: str, check: bool = True) -> Ran:
        monkeypatch.setenv("GEO_DATABASE_URL", url)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        if check and code != 0:
            raise AssertionError(f"exit {code}: {err}")
        return Ran(code, out, err)

    return run


@pytest.fixture
def login(db_url):
    name = f"cli_analyst_{uuid.uuid4().hex[:8]}"
    yield name
    drop_role(db_url, name)


def test_create_list_and_revoke_a_role_left_from_before(db_url, login, run_cli):
    """Logins are made on a tenant's analyst replica (test_analyst_replica.py and
    test_analyst_pooler.py grant and rotate there); on the service's server `revoke` still
    removes an analyst role an older version made, and refuses another tenant's."""
    assert "created" in run_cli(db_url, "tenants", "create", "acme").stdout
    assert "already exists" in run_cli(db_url, "tenants", "create", "acme").stdout
    run_cli(db_url, "tenants", "create", "rival")
    analyst_role(db_url, "acme", login)
    listed = run_cli(db_url, "tenants", "analysts", "--json").stdout
    assert login in listed and "rival" not in listed
    wrong = run_cli(db_url, "tenants", "revoke", "rival", "--login", login, check=False)
    assert wrong.returncode != 0 and "not an analyst of tenant 'rival'" in wrong.stderr
    assert "revoked" in run_cli(db_url, "tenants", "revoke", "acme", "--login", login).stdout
    with psycopg.connect(db_url) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone() is None
        )


def test_bad_requests_are_refused_with_a_reason(db_url, run_cli):
    bad = run_cli(db_url, "tenants", "grant-analyst", "nobody", "--login", "x_1", check=False)
    assert bad.returncode != 0 and "analyst-replica create nobody" in bad.stderr
    run_cli(db_url, "tenants", "create", "acme")
    for name in ("Robert'); DROP TABLE geo.runs;--", "pg_evil", "geo_service", "postgres"):
        r = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", name, check=False)
        assert r.returncode != 0 and "is not allowed" in r.stderr, (name, r.stderr)
    taken = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", "geo_owner", check=False)
    assert taken.returncode != 0
    cap = run_cli(db_url, "tenants", "limit", "acme", "--platform", "nope", "--submits-per-second",
                  "5", check=False)  # fmt: skip
    assert cap.returncode != 0 and "unknown platform" in cap.stderr
    ok = run_cli(db_url, "tenants", "limit", "acme", "--platform", "deepseek",
                 "--submits-per-second", "5")  # fmt: skip
    assert "at most 5 submits/s" in ok.stdout
    nan = run_cli(db_url, "tenants", "limit", "acme", "--platform", "deepseek",
                  "--submits-per-second", "nan", check=False)  # fmt: skip
    assert nan.returncode != 0


def test_the_service_role_cannot_make_logins_either(db_url, run_cli):
    from geo_pipeline_tests.integration.tenancy.helpers import login_role, with_user

    run_cli(db_url, "tenants", "create", "acme")
    with login_role(db_url, "geo_svc", "geo_service") as svc:
        r = run_cli(with_user(db_url, svc), "tenants", "grant-analyst", "acme", "--login",
                    f"x_{uuid.uuid4().hex[:6]}", check=False)  # fmt: skip
    assert r.returncode != 0 and "analyst-replica create acme" in r.stderr, r.stderr


def test_no_analyst_can_log_in_to_the_services_server(db_url, login, run_cli):
    """Issue 35: an analyst login on the service's own server could ALTER ROLE itself and read
    the shared catalogue; its login lives on the tenant's replica, behind the endpoint. Here
    `grant-analyst` refuses (naming those commands) without writing a role, and a login made
    by the old command is made NOLOGIN by migration 0083: connecting as it is refused."""
    run_cli(db_url, "tenants", "create", "acme")
    refused = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", login, check=False)
    assert refused.returncode != 0, refused.stdout
    assert "analyst-replica create acme" in refused.stderr, refused.stderr
    assert "analyst-replica endpoint" in refused.stderr, refused.stderr
    with psycopg.connect(db_url) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone() is None
        )
        assert conn.execute("SELECT count(*) FROM geo.analyst_logins").fetchone() == (0,)
    rotate = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", login, "--rotate",
                     check=False)  # fmt: skip
    assert rotate.returncode != 0 and "analyst-replica" in rotate.stderr, rotate.stderr

    # A login the old `grant-analyst` made here (its exact DDL), then the migration.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{login}" LOGIN CONNECTION LIMIT 10 IN ROLE geo_analyst')
        conn.execute("INSERT INTO geo.analyst_logins (login, tenant_id) VALUES (%s, 'acme')",
                     (login,))  # fmt: skip
    with psycopg.connect(with_user(db_url, login)) as conn:  # it could, before the migration
        assert conn.execute("SELECT geo.analyst_tenant()").fetchone() == ("acme",)
    [nologin] = [m for m in migrate.migrations() if m.version == 83]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(nologin.sql)
    with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
        psycopg.connect(with_user(db_url, login)).close()
    # The operator still sees what the role would (RLS on the service's server holds).
    with psycopg.connect(db_url) as conn:
        conn.execute(f'SET ROLE "{login}"')
        assert conn.execute("SELECT geo.analyst_tenant()").fetchone() == ("acme",)
