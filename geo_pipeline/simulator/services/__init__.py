"""Answer-scraping services imitated by the simulator (docs/research: answer services, §2).

Each service lives in its own module with its own envelope, state, clock and per-key counts,
and is mounted on the simulator's application under a path prefix (``/cloro``,
``/dataforseo``, ``/serpapi``, ``/brightdata``), so a connector pointed at
``<simulator>/cloro`` sees the vendor's own paths (``/v1/async/task``...).
Control routes: ``/_control/services/<name>/{profile,advance,stats,reset}``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from geo_pipeline.simulator.journal import Journal
from geo_pipeline.simulator.services.brightdata import BrightDataService
from geo_pipeline.simulator.services.cloro import CloroService
from geo_pipeline.simulator.services.dataforseo import DataForSeoService
from geo_pipeline.simulator.services.serpapi import SerpApiService

Service = CloroService | DataForSeoService | SerpApiService | BrightDataService

SERVICES: dict[str, type[Service]] = {
    "cloro": CloroService,
    "dataforseo": DataForSeoService,
    "serpapi": SerpApiService,
    "brightdata": BrightDataService,
}


def mount_services(
    app: web.Application,
    seed: int,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
    journal: Journal | None = None,
) -> list[Service]:
    """Mount every service's vendor routes and control routes on ``app``; returns the services
    (``POST /_control/reset`` resets them with everything else). ``profiles``: the
    ``services`` section of a simulator profile file (``{cloro: {fail_rate: 0.1}}``).
    ``journal`` (``--state-file``): the services' tasks are replayed from it, then written to
    it as they change (simulator.services.persist)."""
    profiles = profiles or {}
    unknown = set(profiles) - set(SERVICES)
    if unknown:
        raise ValueError(
            f"services: unknown service(s) {sorted(unknown)}; known: {sorted(SERVICES)}"
        )
    mounted: list[Service] = []
    for name, cls in SERVICES.items():
        service = cls(seed, profiles.get(name) or {})
        service.mount(app)
        mounted.append(service)
    if journal is not None:
        by_name = dict(zip(SERVICES, mounted, strict=True))
        for record in journal.service_records():
            found = by_name.get(str(record.get("svc")))
            if found is not None and hasattr(found, "restore"):
                found.restore(record)
        for name, service in by_name.items():
            if hasattr(service, "write"):
                service.write = functools.partial(journal.service, name)
    return mounted
