"""One database with two tenants' planted data for the whole module (planting runs a worker, so
it is done once), analyst logins for both, and a service login."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis as redis_lib

from geo_pipeline.store import tenancy
from geo_pipeline_tests.fixtures.postgres import create_database, drop_database
from geo_pipeline_tests.integration.tenancy.helpers import (
    analyst_role,
    analyst_session,
    drop_role,
    login_role,
    plant_tenant,
    with_user,
)


@dataclass(frozen=True)
class World:
    admin_url: str  # superuser, as the tests and processes connect today
    service_url: str  # a login in geo_service
    a: str  # tenant ids
    b: str
    a_url: str  # sessions as the tenants' analyst roles (NOLOGIN here since issue 35: a
    b_url: str  # throwaway login that is a member of the role and starts as it)
    a_login: str  # the analyst roles
    b_login: str


@pytest.fixture(scope="module")
def world(
    pg_admin_url: str, pg_template: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    name = f"geo_ten_{uuid.uuid4().hex[:10]}"
    url = create_database(pg_admin_url, name, template=pg_template)
    suffix = uuid.uuid4().hex[:8]
    a, b = f"brand-a-{suffix}", f"brand-b-{suffix}"
    # Login names must not name the tenant (issue 35): their own random part.
    a_login, b_login = (f"analyst_{k}_{uuid.uuid4().hex[:8]}" for k in "ab")
    ns = f"geo-test-{suffix}"
    archive = tmp_path_factory.mktemp("tenancy-evidence")
    try:
        with login_role(url, "geo_svc", tenancy.SERVICE_ROLE) as svc:
            service_url = with_user(url, svc)
            for t in (a, b):
                plant_tenant(service_url, url, redis_url, ns, t, str(archive / t))
            analyst_role(url, a, a_login)
            analyst_role(url, b, b_login)
            with analyst_session(url, a_login) as a_url, analyst_session(url, b_login) as b_url:
                yield World(
                    admin_url=url,
                    service_url=service_url,
                    a=a,
                    b=b,
                    a_url=a_url,
                    b_url=b_url,
                    a_login=a_login,
                    b_login=b_login,
                )
    finally:
        for login in (a_login, b_login):
            drop_role(url, login)
        drop_database(pg_admin_url, name)
        client = redis_lib.Redis.from_url(redis_url)
        try:
            keys = list(client.scan_iter(match=f"{ns}:*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()
