"""The browser lane in the worker process (issue #32): every ``protocol: browser`` platform's
connector leases its accounts from ``geo.accounts`` (``PgAccounts``), so any number of workers
serve the same accounts and never use one at once (one account = one browser = one
conversation). The other protocols are built as before, on the process's shared HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from geo_pipeline.connectors.base import Connector
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.domain.catalogue import PlatformEntry, Registry
from geo_pipeline.runtime.crash import crashpoint
from geo_pipeline.settings import settings
from geo_pipeline.store import db as dbmod


class _Connect:
    """A short connection per account call: leases and journal rows are a few per answer,
    and an answer takes seconds, so no pool is held for them."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url

    def __call__(self) -> Any:
        return dbmod.connect(self.db_url)


def browser_connector(entry: PlatformEntry, db_url: str, owner: str) -> Connector:
    """A browser platform's connector over the shared accounts table."""
    from geo_pipeline.connectors.browser.connector import BrowserConnector, profiles_root
    from geo_pipeline.store.accounts import PgAccounts

    accounts = PgAccounts(
        _Connect(db_url),
        owner,
        profiles_root(entry.options),
        lease_s=settings().browser_account_lease_s,
    )
    conn = BrowserConnector(entry, accounts)
    # The fault suite's SIGKILL right after the send, while the app answers (R25).
    conn.answering = lambda: crashpoint("browser_sent_not_answered")
    return conn


def build_connectors(
    registry: Registry,
    platforms: Iterable[str],
    client: Any,
    *,
    db_url: str | None,
    owner: str,
) -> dict[str, Connector]:
    """One connector per platform: browser ones over ``PgAccounts`` (the database of
    ``db_url``, else the environment's), the rest as the factory builds them on ``client``."""
    out: dict[str, Connector] = {}
    for p in platforms:
        entry = registry.entry(p)
        if entry.protocol == "browser":
            out[p] = browser_connector(entry, db_url or dbmod.database_url(), owner)
        else:
            out[p] = build_connector(entry, client)
    return out


def check_connector_builder(db_url: str) -> Callable[[PlatformEntry, Any], Connector]:
    """What ``connectors check`` asks through: a browser channel over the shared accounts of
    ``geo.accounts`` (as every worker leases them: pacing, budget and lease hold for a check
    too); any other channel as the factory builds it."""
    import os
    import socket

    owner = f"connectors-check:{socket.gethostname()}:{os.getpid()}"

    def build(entry: PlatformEntry, client: Any) -> Connector:
        if entry.protocol == "browser":
            return browser_connector(entry, db_url, owner)
        return build_connector(entry, client)

    return build
