"""The connection string `grant-analyst --replica` and `analyst-replica create` print names the
analyst endpoint (port 6432), never the replica's own server (docs/analysts.md): also when the
operator reaches the replica through a Unix socket, where the replica's "host" is a directory
that the endpoint (listening on TCP) is not behind."""

from __future__ import annotations

import pytest

from geo_pipeline.cli.tenants import DEFAULT_ENDPOINT_PORT, _print_grant
from geo_pipeline.store.tenancy import AnalystGrant


def _grant(host: str | None, port: int | None) -> AnalystGrant:
    return AnalystGrant("ana_5d1e07a9c3b2", "acme", "pw", "geo", host, port, rotated=False)


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("acme-analytics.example.com", 5432, "@acme-analytics.example.com:6432/geo"),
        ("/var/run/postgresql", 5432, "@127.0.0.1:6432/geo"),  # the endpoint's default --listen
        (None, None, "@127.0.0.1:6432/geo"),
    ],
)
def test_the_printed_string_is_the_endpoints(
    host: str | None, port: int | None, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _print_grant(_grant(host, port), None, "created analyst login")
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed.endswith(expected), printed
    assert f":{DEFAULT_ENDPOINT_PORT}/" in printed


def test_endpoint_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    _print_grant(_grant("/tmp/sock", 5432), "bi.example.com:7432", "created analyst login")
    assert capsys.readouterr().out.strip().endswith("@bi.example.com:7432/geo")
