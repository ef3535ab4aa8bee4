"""Building connectors from the registry, and the set of connectors a process shares.

``ConnectorSet`` owns the one pooled ``httpx.AsyncClient`` every HTTP connector of the process
uses (D4, D8): ``async with ConnectorSet() as connectors: c = connectors["deepseek"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

import httpx

from geo_pipeline.connectors.base import Connector
from geo_pipeline.connectors.brightdata import BrightDataConnector
from geo_pipeline.connectors.cloro import CloroConnector
from geo_pipeline.connectors.dataforseo import DataForSeoConnector
from geo_pipeline.connectors.http import new_client
from geo_pipeline.connectors.protocols import BUILDERS, SyncProtocolConnector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.connectors.serpapi import SerpApiConnector
from geo_pipeline.connectors.simulator import SimulatorConnector
from geo_pipeline.domain.catalogue import PlatformEntry, Registry, RegistryError

# Answer-scraping services (access: scraped), one connector class per vendor's contract.
SERVICE_CONNECTORS: dict[str, Callable[[PlatformEntry, httpx.AsyncClient | None], Connector]] = {
    "cloro": CloroConnector,
    "dataforseo": DataForSeoConnector,
    "serpapi": SerpApiConnector,
    "brightdata": BrightDataConnector,
}
PROTOCOLS = ("simulator", "browser", *BUILDERS, *SERVICE_CONNECTORS)


def build_connector(entry: PlatformEntry, client: httpx.AsyncClient | None = None) -> Connector:
    """The connector of one registry entry, by its ``protocol``. With ``client=None`` an HTTP
    connector makes (and closes, in ``aclose``) its own client; pass a shared one instead."""
    if entry.protocol == "simulator":
        return SimulatorConnector(entry, client)
    if entry.protocol in BUILDERS:
        return SyncProtocolConnector(entry, client)
    if entry.protocol == "browser":  # the browser lane (issue #32): no HTTP client of ours
        from geo_pipeline.connectors.browser.connector import BrowserConnector

        return BrowserConnector(entry)
    if entry.protocol in SERVICE_CONNECTORS:
        return SERVICE_CONNECTORS[entry.protocol](entry, client)
    raise RegistryError(
        f"platforms.{entry.platform}: unknown protocol {entry.protocol!r}; "
        f"known: {', '.join(PROTOCOLS)}"
    )


class ConnectorSet:
    """Every registered platform's connector, built on first use, sharing one HTTP client.

    ``stand_in``: builds every platform's connector instead of its protocol, keeping the
    registry's capabilities and prices -- e.g. the simulator's in-process ``InstantConnector``
    (benchmark mode without an engine). The caller passes it, so connectors never import the
    simulator that imitates them."""

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        stand_in: Callable[[PlatformEntry], Connector] | None = None,
    ):
        self.registry = registry or load_registry()
        self.stand_in = stand_in
        self._own_client = client is None
        self._client = client
        self._built: dict[str, Connector] = {}

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = new_client()
        return self._client

    def get(self, platform: str) -> Connector:
        conn = self._built.get(platform)
        if conn is None:
            entry = self.registry.entry(platform)
            if self.stand_in is not None:
                conn = self.stand_in(entry)
            else:
                conn = build_connector(entry, self.client)
            self._built[platform] = conn
        return conn

    __getitem__ = get

    def platforms(self) -> list[str]:
        return sorted(self.registry.entries)

    async def aclose(self) -> None:
        self._built.clear()  # connectors built on the shared client own nothing to close
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> ConnectorSet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
