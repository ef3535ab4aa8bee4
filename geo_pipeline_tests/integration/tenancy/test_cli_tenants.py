"""``geo-pipeline tenants``: create, grant an analyst login (its connection string printed once,
the password kept by PostgreSQL only as a verifier), read as that login, revoke; and the errors a
person can act on. Passwords are not checked on this machine (trust authentication)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from geo_pipeline.cli.main import main
from geo_pipeline_tests.integration.tenancy.helpers import drop_role


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


def test_create_grant_read_revoke(db_url, login, run_cli):
    assert "created" in run_cli(db_url, "tenants", "create", "acme").stdout
    assert "already exists" in run_cli(db_url, "tenants", "create", "acme").stdout
    run_cli(db_url, "tenants", "create", "rival")
    out = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", login).stdout
    url = out.strip().splitlines()[-1]
    assert url.startswith(f"postgresql://{login}:") and url.endswith(
        psycopg.connect(db_url).info.dbname
    )
    password = url.split(":", 2)[2].split("@", 1)[0]
    with psycopg.connect(db_url) as conn:
        stored = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (login,))
        verifier = stored.fetchone()[0]  # type: ignore[index]
    assert verifier.startswith("SCRAM-SHA-256$") and password not in verifier
    # The operator CLI run with the analyst's login shows the analyst's tenant only.
    listed = run_cli(url, "tenants", "list", "--json").stdout
    assert '"acme"' in listed and "rival" not in listed
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT geo.analyst_tenant()").fetchone() == ("acme",)
        assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
    # Errors a person can act on.
    again = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", login, check=False)
    assert again.returncode != 0 and "--rotate" in again.stderr
    other = run_cli(db_url, "tenants", "grant-analyst", "rival", "--login", login, check=False)
    assert other.returncode != 0 and "analyst of tenant 'acme'" in other.stderr
    rotated = run_cli(db_url, "tenants", "grant-analyst", "acme", "--login", login, "--rotate")
    assert "new password" in rotated.stdout and rotated.stdout.strip().splitlines()[-1] != url
    wrong = run_cli(db_url, "tenants", "revoke", "rival", "--login", login, check=False)
    assert wrong.returncode != 0 and "not an analyst of tenant 'rival'" in wrong.stderr
    assert "revoked" in run_cli(db_url, "tenants", "revoke", "acme", "--login", login).stdout
    with psycopg.connect(db_url) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone() is None
        )


def test_bad_requests_are_refused_with_a_reason(db_url, run_cli):
    bad = run_cli(db_url, "tenants", "grant-analyst", "nobody", "--login", "x_1", check=False)
    assert bad.returncode != 0 and "tenants create nobody" in bad.stderr
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


def test_the_service_role_cannot_make_logins(db_url, run_cli):
    from geo_pipeline_tests.integration.tenancy.helpers import login_role, with_user

    run_cli(db_url, "tenants", "create", "acme")
    with login_role(db_url, "geo_svc", "geo_service") as svc:
        r = run_cli(with_user(db_url, svc), "tenants", "grant-analyst", "acme", "--login",
                    f"x_{uuid.uuid4().hex[:6]}", check=False)  # fmt: skip
    assert r.returncode != 0 and "may not manage logins" in r.stderr, r.stderr
