"""Versioned price lists (R4, R23): each platform's prices as they stood from a date on, imported
with ``geo-pipeline prices import`` into ``geo.price_versions`` (immutable). A quote prices with
the list in effect when the run is created and freezes its version name; charges follow the
quote, and reconciliation names a statement line priced on a newer list a price change. The
registry's static prices are each platform's fallback version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from geo_pipeline.billing.errors import BillingError
from geo_pipeline.domain.catalogue import (
    OfferedCapabilities,
    PriceVersion,
    price_list_mapping,
)
from geo_pipeline.domain.platforms import Capabilities, PriceList
from geo_pipeline.store.queries import Q

if TYPE_CHECKING:
    from geo_pipeline.store.db import Conn


# A quote prices with the list in effect when the run is created and freezes its version name
# (geo.quote_lines.price_version); charges follow the quote, so a later list never re-prices a
# run. The registry's static prices are each platform's fallback version (R4, R23).
REGISTRY_SOURCE = "registry (fallback)"


@dataclass(frozen=True)
class PriceImport:
    platform: str
    version: str
    effective_from: datetime
    imported_now: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "version": self.version,
            "effective_from": self.effective_from.isoformat(),
            "imported_now": self.imported_now,
        }


def _price_sha256(v: PriceVersion) -> str:
    body = {
        "platform": v.platform,
        "effective_from": v.effective_from.isoformat(),
        "prices": price_list_mapping(v.prices),
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def version_of(row: Mapping[str, Any]) -> PriceVersion:
    return PriceVersion(
        platform=str(row["platform"]),
        effective_from=row["effective_from"],
        prices=PriceList.from_mapping(row["prices"]),
        source=str(row.get("source") or ""),
    )


def import_price_versions(
    conn: Conn, versions: list[PriceVersion], caps: Mapping[str, Capabilities] | None = None
) -> list[PriceImport]:
    """Store price lists, all or none (one transaction). The same list again is a no-op; a
    version name holding other prices, or two lists of a platform taking effect at the same
    instant, is refused: a frozen quote may already point at the name. ``caps``: the registry,
    whose static versions are names too."""
    out: list[PriceImport] = []
    with conn.transaction(), conn.cursor() as cur:
        for v in versions:
            static = caps[v.platform].prices if caps and v.platform in caps else None
            if static is not None and static.version == v.version and static != v.prices:
                raise BillingError(
                    f"{v.platform} version {v.version} is the registry's fallback list with "
                    "other prices; give the new list a new version name"
                )
            sha = _price_sha256(v)
            cur.execute(
                Q("prices.insert_price_version"),
                {
                    "platform": v.platform,
                    "version": v.version,
                    "effective_from": v.effective_from,
                    "currency": v.prices.currency,
                    "prices": Jsonb(price_list_mapping(v.prices)),
                    "source": v.source,
                    "content_sha256": sha,
                },
            )
            if cur.fetchone() is not None:
                out.append(PriceImport(v.platform, v.version, v.effective_from, True))
                continue
            cur.execute(Q("prices.price_version"), {"platform": v.platform, "version": v.version})
            existing = cur.fetchone()
            if existing is None:
                cur.execute(
                    Q("prices.price_version_at"),
                    {"platform": v.platform, "effective_from": v.effective_from},
                )
                clash = cur.fetchone()
                raise BillingError(
                    f"{v.platform}: version {clash['version'] if clash else '?'} already takes "
                    f"effect at {v.effective_from.isoformat()}; a new list needs its own instant"
                )
            if str(existing["content_sha256"]) != sha:
                raise BillingError(
                    f"{v.platform} version {v.version} already exists with other prices or "
                    f"another effective date ({existing['effective_from'].isoformat()}); "
                    "published versions never change: import the new list under a new version"
                )
            out.append(PriceImport(v.platform, v.version, v.effective_from, False))
    return out


def price_versions(conn: Conn, platform: str | None = None) -> list[PriceVersion]:
    """Every imported version, per platform in order of taking effect."""
    with conn.cursor() as cur:
        cur.execute(Q("prices.list_price_versions"), {"platform": platform})
        return [version_of(r) for r in cur.fetchall()]


def effective_prices(
    conn: Conn, caps: Mapping[str, Capabilities], at: datetime | None = None
) -> dict[str, PriceList]:
    """Each registered platform's list in effect at ``at`` (database time when None): the
    latest imported version that has taken effect, else the registry's static list."""
    with conn.cursor() as cur:
        cur.execute(Q("prices.effective_price_versions"), {"at": at})
        imported = {str(r["platform"]): version_of(r).prices for r in cur.fetchall()}
    return {p: imported.get(p, c.prices) for p, c in caps.items()}


def effective_capabilities(
    conn: Conn, caps: Mapping[str, Capabilities], at: datetime | None = None
) -> dict[str, Capabilities]:
    """The registry's capabilities with each platform's prices in effect at ``at``: what a
    run is planned and quoted with (``plan_run(raw, effective_capabilities(conn, caps))``), so
    the quote snapshot freezes the version in effect when the run is created."""
    prices = effective_prices(conn, caps, at)
    effective = {p: dataclasses.replace(c, prices=prices[p]) for p, c in caps.items()}
    # A platform disabled until its key is set keeps saying which variable to set.
    return OfferedCapabilities(effective, getattr(caps, "disabled", {}))


def find_price_list(
    conn: Conn, platform: str, version: str, caps: Mapping[str, Capabilities] | None = None
) -> PriceList | None:
    """A named version of a platform's prices: imported, or the registry's static one."""
    with conn.cursor() as cur:
        cur.execute(Q("prices.price_version"), {"platform": platform, "version": version})
        row = cur.fetchone()
    if row is not None:
        return version_of(row).prices
    static = caps[platform].prices if caps and platform in caps else None
    return static if static is not None and static.version == version else None


def price_listing(
    conn: Conn, caps: Mapping[str, Capabilities], platform: str | None = None
) -> list[dict[str, Any]]:
    """Every version (the registry's fallback first), with the one in effect now marked."""
    now = effective_prices(conn, caps)
    rows: list[dict[str, Any]] = []
    imported = price_versions(conn, platform)
    for p in sorted(caps):
        if platform is not None and p != platform:
            continue
        versions = [(None, caps[p].prices, REGISTRY_SOURCE)] + [
            (v.effective_from, v.prices, v.source) for v in imported if v.platform == p
        ]
        for since, prices, source in versions:
            rows.append(
                {
                    "platform": p,
                    "version": prices.version,
                    "effective_from": since.isoformat() if since else None,
                    "in_effect": prices == now[p],
                    **{k: v for k, v in price_list_mapping(prices).items() if k != "version"},
                    "source": source,
                }
            )
    return rows
