"""Reconciliation of our charges against the platforms' fee statements (R23, R24, R26).

``import_statement`` stores a platform's daily statement once (idempotent by content sha256; a
re-issued statement for the same day supersedes the earlier one). ``reconcile_run`` matches the
statement lines to our charge entries by platform + upstream id, item by item, classifies each
upstream task (matched / amount_mismatch / missing_ours / missing_theirs / pending, see
``geo_pipeline.domain.billing.classify``), and rewrites the run's rows of
``geo.reconciliation_lines`` (delete-then-insert in one transaction, so a re-run replaces the
previous result instead of adding to it). The summary separates completed, failed and
to-be-verified fees and gives the unexplained difference in minor units; the Dagster
``billing_reconciliation`` asset materialises it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from geo_pipeline.billing.prices import find_price_list
from geo_pipeline.connectors.protocols import (
    CREDITS,
    DAY_TOTAL_PREFIX,
    OWN_ESTIMATE,
    USAGE_FIELDS,
    statement_source,
)
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain import billing as rules
from geo_pipeline.domain.billing import (
    NO_VENDOR_BILL,
    USAGE_COST,
    USAGE_MISSING,
    ReconciliationSummary,
    ReconLine,
)
from geo_pipeline.domain.catalogue import PlatformEntry, Registry, RegistryError
from geo_pipeline.domain.money import Money
from geo_pipeline.domain.platforms import PriceList
from geo_pipeline.domain.usage import COUNT_FIELDS, TokenPrices, Usage, usage_cost
from geo_pipeline.domain.words import NO_VENDOR_BILL_SOURCE
from geo_pipeline.observability.metrics import RECONCILIATION_DIFF
from geo_pipeline.store.queries import Q
from geo_pipeline.store.usage import run_attempt_usage

if TYPE_CHECKING:
    from geo_pipeline.connectors.base import Connector, FeeStatement
    from geo_pipeline.store.db import Conn

# A vendor without a usage/cost API: its cost per call is computed from the usage recorded with
# the attempt x the token prices of the price version frozen in the run's quote.


@dataclass(frozen=True)
class ImportResult:
    statement_id: int
    platform: str
    statement_date: str
    lines: int
    imported_now: bool

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def statement_sha256(statement: FeeStatement) -> str:
    """Content hash of a statement: its parsed content in canonical JSON, so the same statement
    fetched twice (whatever the whitespace of the raw body) is recognised as one."""
    body = {
        "platform": statement.platform,
        "statement_date": statement.statement_date,
        "currency": statement.currency,
        "lines": [
            {
                "upstream_id": line.upstream_id,
                "item": line.item,
                "amount_minor": line.amount_minor,
                "currency": line.currency,
                "price_version": line.price_version,
                "charged_at": line.charged_at.isoformat() if line.charged_at else None,
            }
            for line in statement.lines
        ],
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def import_statement(conn: Conn, statement: FeeStatement) -> ImportResult:
    """Store a fee statement and its lines once; a repeat import of the same content is a no-op."""
    day = date.fromisoformat(statement.statement_date)
    Money(0, statement.currency)  # a valid currency code
    for line in statement.lines:
        Money(rules.minor(line.amount_minor, f"statement line {line.upstream_id}"), line.currency)
    sha = statement_sha256(statement)
    params = {
        "platform": statement.platform,
        "statement_date": day,
        "currency": statement.currency,
        "content_sha256": sha,
    }
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("billing.insert_statement"), params)
        row = cur.fetchone()
        if row is None:
            cur.execute(Q("billing.statement_by_content"), params)
            existing = cur.fetchone()
            assert existing is not None
            return ImportResult(
                int(existing["statement_id"]),
                statement.platform,
                statement.statement_date,
                len(statement.lines),
                False,
            )
        statement_id = int(row["statement_id"])
        cur.executemany(
            Q("billing.insert_statement_line"),
            [
                {
                    "statement_id": statement_id,
                    "line_no": i,
                    "upstream_id": line.upstream_id,
                    "item": line.item,
                    "amount_minor": line.amount_minor,
                    "currency": line.currency,
                    "price_version": line.price_version,
                    "charged_at": line.charged_at,
                }
                for i, line in enumerate(statement.lines)
            ],
        )
    return ImportResult(
        statement_id, statement.platform, statement.statement_date, len(statement.lines), True
    )


async def afetch_and_import(conn: Conn, connector: Connector, statement_date: str) -> ImportResult:
    """Fetch one day's statement through the connector and import it (for async callers)."""
    statement = await connector.fee_statement(statement_date)
    return import_statement(conn, statement)


def fetch_and_import(conn: Conn, connector: Connector, statement_date: str) -> ImportResult:
    """Fetch one day's statement through the connector and import it. Runs its own event loop;
    inside async code call ``afetch_and_import`` instead."""
    return asyncio.run(afetch_and_import(conn, connector, statement_date))


def _run_currency(conn: Conn, run_id: str) -> str:
    with conn.cursor() as cur:
        cur.execute(Q("billing.run_for_billing"), {"run_id": run_id})
        row = cur.fetchone()
    if row is None:
        raise LookupError(f"no run with id {run_id!r}")
    return str(row["currency"]).strip()


def statement_days_needed(conn: Conn, run_id: str) -> dict[str, list[str]]:
    """The (platform, day) statements a run's charges fall on: what to fetch to reconcile it."""
    days: dict[str, set[str]] = defaultdict(set)
    with conn.cursor() as cur:
        cur.execute(Q("billing.run_charges"), {"run_id": run_id})
        for r in cur.fetchall():
            days[str(r["platform"])].add(r["charged_on"].isoformat())
        cur.execute(Q("billing.run_upstream_tasks"), {"run_id": run_id})
        for r in cur.fetchall():
            days[str(r["platform"])].add(r["accepted_on"].isoformat())
    return {p: sorted(d) for p, d in sorted(days.items())}


def _entries(registry: Registry | None) -> dict[str, PlatformEntry]:
    if registry is None:
        try:
            registry = load_registry()
        except RegistryError:
            return {}
    return registry.every_entry()


def statement_sources(conn: Conn, run_id: str, registry: Registry | None = None) -> dict[str, str]:
    """Per platform of the run: where its vendor cost is reconciled from, in words (a cost
    API's day totals, the simulator's statements, or request-level usage x price version V)."""
    entries = _entries(registry)
    with conn.cursor() as cur:
        cur.execute(Q("usage.run_quote_versions"), {"run_id": run_id})
        versions: dict[str, list[str]] = defaultdict(list)
        for r in cur.fetchall():
            versions[str(r["platform"])].append(str(r["price_version"]))
    out: dict[str, str] = {}
    for platform in sorted(versions):
        entry = entries.get(platform)
        out[platform] = (
            "not in the registry: statements as imported"
            if entry is None
            else source_words(entry, versions[platform])
        )
    return out


def source_words(entry: PlatformEntry, versions: Sequence[str]) -> str:
    """Where one platform's vendor cost is reconciled from, in words (``statement_sources``)."""
    source = statement_source(entry)
    if source == USAGE_FIELDS:
        return "no cost API: reconciled against request-level usage x price version " + ", ".join(
            versions
        )
    if source == "simulator":
        return "the simulator's statement API (per task)"
    if source == OWN_ESTIMATE:
        return NO_VENDOR_BILL_SOURCE
    if source == CREDITS:
        return (
            "credits the vendor reports for each task x the credit price of price version "
            + ", ".join(versions)
            + " (per task, no statement)"
        )
    return f"vendor cost API {source} (day totals)"


def reconcile_run(
    conn: Conn, run_id: str, registry: Registry | None = None
) -> ReconciliationSummary:
    """Match the run's charges to the imported statements and rewrite its reconciliation lines.

    A platform whose ``statement_source`` is ``usage_fields`` (``registry``: the deployment's
    when None) has no statement: each of its tasks is compared with the vendor cost computed
    from the usage recorded with the attempt x the token prices of the frozen price version
    (``usage_cost`` when it differs from our charge, ``usage_missing`` when an answered attempt
    has no usage or no token price to compute it with).

    The run's upstream tasks are those it charged plus those its upstream requests know (an
    accepted task we never charged may still be on their statement: missing_ours). A statement
    line for a task of no run cannot be attributed here; it stays in geo.fee_statement_lines.
    """
    currency = _run_currency(conn, run_id)
    entries = _entries(registry)
    by_usage = {p: e for p, e in entries.items() if statement_source(e) == USAGE_FIELDS}
    by_credits = {p: e for p, e in entries.items() if statement_source(e) == CREDITS}
    by_estimate = {p for p, e in entries.items() if statement_source(e) == OWN_ESTIMATE}
    usage_rows = {
        (str(r["platform"]), str(r["upstream_id"])): r
        for r in (run_attempt_usage(conn, run_id) if by_usage else [])
        if r["platform"] in by_usage
    }
    with conn.transaction(), conn.cursor() as cur:
        # key: (platform, upstream_id)
        ours: dict[tuple[str, str], dict[str, int]] = {}
        info: dict[tuple[str, str], dict[str, Any]] = {}
        cur.execute(Q("billing.run_charges"), {"run_id": run_id})
        for r in cur.fetchall():
            k = (str(r["platform"]), str(r["upstream_id"]))
            items = ours.setdefault(k, {})
            details = r["details"] or {}
            for item, amount in (details.get("items") or {}).items():
                items[item] = items.get(item, 0) + int(amount)
            # A refund settles part of a charge: take it off the items, base last.
            refunded = int(r["refunded_minor"]) if k not in info else 0
            for item in sorted(items, key=lambda i: i == "base"):
                take = min(items[item], refunded)
                items[item] -= take
                refunded -= take
            info[k] = {
                "sample_id": r["sample_id"],
                "attempt_no": r["attempt_no"],
                "outcome": details.get("upstream_outcome"),
                "day": r["charged_on"],
                "free_reason": details.get("free_reason"),
                "refunded_minor": int(r["refunded_minor"]),
                "vendor_credits": details.get("vendor_credits"),
            }
        cur.execute(Q("billing.run_upstream_tasks"), {"run_id": run_id})
        for r in cur.fetchall():
            k = (str(r["platform"]), str(r["upstream_id"]))
            entry = info.setdefault(
                k,
                {
                    "sample_id": r["sample_id"],
                    "attempt_no": r["attempt_no"],
                    "outcome": None,
                    "day": r["accepted_on"],
                },
            )
            if entry.get("outcome") is None and r["outcome"] in ("completed", "failed"):
                entry["outcome"] = r["outcome"]
            entry["request_state"] = r["state"]
        platforms = sorted({p for p, _ in info})
        upstream_ids = sorted({u for _, u in info})
        theirs: dict[tuple[str, str], dict[str, int]] = {}
        their_days: dict[tuple[str, str], set[str]] = defaultdict(set)
        foreign: dict[tuple[str, str], list[str]] = defaultdict(list)
        their_versions: dict[tuple[str, str], set[str]] = defaultdict(set)
        cur.execute(
            Q("billing.statement_lines_for"),
            {"platforms": platforms, "upstream_ids": upstream_ids},
        )
        for r in cur.fetchall():
            k = (str(r["platform"]), str(r["upstream_id"]))
            if k not in info:
                continue
            if str(r["currency"]).strip() != currency:
                # Never add amounts of two currencies: show the line, count nothing of it.
                foreign[k].append(f"{r['item']}={r['amount_minor']} {r['currency']}")
                theirs.setdefault(k, {})
                continue
            items = theirs.setdefault(k, {})
            items[str(r["item"])] = items.get(str(r["item"]), 0) + int(r["amount_minor"])
            their_days[k].add(r["statement_date"].isoformat())
            if r["price_version"]:
                their_versions[k].add(str(r["price_version"]))
        cur.execute(Q("billing.imported_statement_days"), {"platforms": platforms})
        imported = {(str(r["platform"]), r["statement_date"]) for r in cur.fetchall()}

        # Vendors' cost APIs bill day totals: those (platform, day)s reconcile on one line.
        cur.execute(Q("usage.day_total_lines"), {"platforms": platforms})
        day_totals: dict[tuple[str, date], dict[str, Any]] = {}
        for r in cur.fetchall():
            total = day_totals.setdefault(
                (str(r["platform"]), r["statement_date"]),
                {"items": {}, "currencies": set(), "by_currency": defaultdict(int)},
            )
            total["by_currency"][str(r["currency"]).strip()] += int(r["amount_minor"])
            total["items"][str(r["item"])] = total["items"].get(str(r["item"]), 0) + int(
                r["amount_minor"]
            )
            total["currencies"].add(str(r["currency"]).strip())
        # The version and mode each charge was priced with (its frozen quote's).
        cur.execute(Q("prices.run_charge_versions"), {"run_id": run_id})
        charged_with = {
            str(r["upstream_id"]): (str(r["price_version"] or ""), str(r["mode"] or ""))
            for r in cur.fetchall()
        }
        price_cache: dict[tuple[str, str], PriceList | None] = {}
        cur.execute(Q("usage.run_quote_versions"), {"run_id": run_id})
        quoted = {str(r["platform"]): str(r["price_version"]) for r in cur.fetchall()}

        lines: list[ReconLine] = []
        for k in sorted(info, key=lambda k: (k[0], k[1])):
            platform, upstream_id = k
            meta = info[k]
            mine = ours.get(k)
            theirs_items = theirs.get(k)
            if platform in by_credits and theirs_items is None:
                version, mode = charged_with.get(upstream_id) or (quoted.get(platform, ""), "")
                key = (platform, version)
                if key not in price_cache:
                    price_cache[key] = find_price_list(
                        cur.connection,
                        platform,
                        version,
                        {platform: by_credits[platform].capabilities},
                    )
                lines.append(
                    _credit_line(
                        upstream_id, meta, mine, currency, version, mode, price_cache[key], platform
                    )
                )
                continue
            if platform in by_estimate and theirs_items is None:
                lines.append(_no_bill_line(upstream_id, platform, meta, mine, currency))
                continue
            if platform in by_usage and theirs_items is None:
                version = (charged_with.get(upstream_id) or (quoted.get(platform, ""), ""))[0]
                lines.append(
                    _usage_line(
                        upstream_id,
                        meta,
                        mine,
                        currency,
                        usage_rows.get(k),
                        version,
                        by_usage[platform],
                    )
                )
                continue
            if (platform, meta["day"]) in day_totals and theirs_items is None:
                lines.append(_in_day_total(run_id, platform, upstream_id, meta, mine, currency))
                continue
            cls = rules.classify(
                mine, theirs_items, statement_imported=(platform, meta["day"]) in imported
            )
            if foreign.get(k) and cls == "matched":
                cls = "amount_mismatch"
            changed_to = None
            if cls == "amount_mismatch" and not foreign.get(k) and mine and theirs_items:
                changed_to = _price_change(
                    cur,
                    platform,
                    mine,
                    theirs_items,
                    charged_with.get(upstream_id),
                    their_versions.get(k, set()),
                    meta["day"],
                    price_cache,
                )
                if changed_to is not None:
                    cls = "price_change"
            detail: dict[str, Any] = {
                "ours_items": mine,
                "theirs_items": theirs_items,
                "statement_days": sorted(their_days.get(k, ())),
                "our_day": meta["day"].isoformat(),
            }
            for extra in ("free_reason", "request_state", "refunded_minor"):
                if meta.get(extra):
                    detail[extra] = meta[extra]
            if foreign.get(k):
                detail["other_currency_lines"] = foreign[k]
            if changed_to is not None:
                detail["price_version_ours"] = charged_with[upstream_id][0]
                detail["price_version_theirs"] = changed_to
            lines.append(
                ReconLine(
                    upstream_id=upstream_id,
                    platform=platform,
                    classification=cls,
                    fee_class=rules.fee_class(cls, meta.get("outcome")),
                    ours_minor=sum((mine or {}).values()),
                    theirs_minor=sum((theirs_items or {}).values()),
                    currency=currency,
                    sample_id=meta.get("sample_id"),
                    attempt_no=meta.get("attempt_no"),
                    detail=detail,
                )
            )
        days_of_run = {(p, m["day"]) for (p, _), m in info.items()}
        # A day total is apportioned once across the day's runs: the other runs' day lines
        # (of runs already reconciled) are rewritten with the same split as this run's.
        others: list[tuple[str, str, list[ReconLine]]] = []
        for platform, day in sorted(day_totals):
            if (platform, day) in days_of_run:
                day_split = _DaySplit.load(
                    cur, platform, day, day_totals, currency, entries.get(platform)
                )
                lines.extend(day_split.lines_for(run_id))
                for other in sorted(set(day_split.charged) - {run_id}):
                    others.append((other, day_split.upstream_id, day_split.lines_for(other)))
        # Idempotent rewrite: the run's previous result is replaced, never added to.
        cur.execute(Q("billing.delete_reconciliation"), {"run_id": run_id})
        _insert_lines(cur, run_id, lines)
        for other, upstream_id, other_lines in others:
            cur.execute(
                Q("billing.delete_day_total_lines"), {"run_id": other, "upstream_id": upstream_id}
            )
            if cur.fetchall():
                _insert_lines(cur, other, other_lines)
    summary = rules.summarise(run_id, currency, lines)
    # R26: one meaning for the gauge, the unexplained difference over every run per currency
    # (the query business_gauges.refresh sets it from); the asset keeps each run's own.
    with conn.cursor() as cur:
        cur.execute(Q("ops.reconciliation_difference"), {"explained": list(rules.EXPLAINED)})
        for r in cur.fetchall():
            RECONCILIATION_DIFF.labels(str(r["currency"]).strip()).set(int(r["difference_minor"]))
    return summary


def stored_summary(conn: Conn, run_id: str) -> ReconciliationSummary:
    """The summary of the run's stored reconciliation lines (as ``reconcile_run`` last wrote
    them), by the same ``summarise``: what `runs show` and the reports read without reconciling
    again."""
    rows = reconciliation_lines(conn, run_id)
    currency = str(rows[0]["currency"]).strip() if rows else _run_currency(conn, run_id)
    return rules.summarise(
        run_id,
        currency,
        [
            ReconLine(
                upstream_id=str(r["upstream_id"]),
                platform=str(r["platform"]),
                classification=str(r["classification"]),
                fee_class=str(r["fee_class"]),
                ours_minor=int(r["ours_minor"]),
                theirs_minor=int(r["theirs_minor"]),
                currency=str(r["currency"]).strip(),
                sample_id=r.get("sample_id"),
                attempt_no=r.get("attempt_no"),
                detail=r.get("detail") or {},
            )
            for r in rows
        ],
    )


def token_prices(entry: PlatformEntry, version: str) -> TokenPrices | None:
    """The token prices the registry states for ``version`` of the platform's prices
    (``options.token_prices.<version>``); None when it states none."""
    spec = (entry.options.get("token_prices") or {}).get(version)
    if spec is None:
        return None
    return TokenPrices.from_mapping(
        version, spec, f"platforms.{entry.platform}.options.token_prices.{version}"
    )


def _no_bill_line(
    upstream_id: str,
    platform: str,
    meta: dict[str, Any],
    mine: dict[str, int] | None,
    currency: str,
) -> ReconLine:
    """One task of a channel no vendor bills (statement source own_estimate): our charge at our
    own estimated price, theirs 0 because nobody billed -- explained, never a difference. A task
    never answered and never charged is matched (nothing on either side)."""
    ours = sum((mine or {}).values())
    detail: dict[str, Any] = {
        "source": NO_VENDOR_BILL_SOURCE,
        "statement_source": OWN_ESTIMATE,
        "ours_items": mine,
        "our_day": meta["day"].isoformat(),
    }
    for extra in ("free_reason", "request_state", "refunded_minor"):
        if meta.get(extra):
            detail[extra] = meta[extra]
    cls = NO_VENDOR_BILL if ours else "matched"
    return ReconLine(
        upstream_id=upstream_id,
        platform=platform,
        classification=cls,
        fee_class=rules.fee_class(cls, meta.get("outcome")),
        ours_minor=ours,
        theirs_minor=0,
        currency=currency,
        sample_id=meta.get("sample_id"),
        attempt_no=meta.get("attempt_no"),
        detail=detail,
    )


def _usage_line(
    upstream_id: str,
    meta: dict[str, Any],
    mine: dict[str, int] | None,
    currency: str,
    row: dict[str, Any] | None,
    version: str,
    entry: PlatformEntry,
) -> ReconLine:
    """One task of a platform without a cost API: our charge against the vendor cost computed
    from the attempt's recorded usage x the token prices of the frozen version ``version``."""
    ours = sum((mine or {}).values())
    outcome = meta.get("outcome") or (row or {}).get("outcome")
    detail: dict[str, Any] = {
        "source": f"no cost API: reconciled against request-level usage x price version {version}",
        "statement_source": USAGE_FIELDS,
        "price_version": version,
        "ours_items": mine,
        "our_day": meta["day"].isoformat(),
    }
    for extra in ("free_reason", "request_state", "refunded_minor"):
        if meta.get(extra):
            detail[extra] = meta[extra]

    def line(cls: str, theirs: int) -> ReconLine:
        return ReconLine(
            upstream_id=upstream_id,
            platform=entry.platform,
            classification=cls,
            fee_class=rules.fee_class(cls, outcome),
            ours_minor=ours,
            theirs_minor=theirs,
            currency=currency,
            sample_id=meta.get("sample_id"),
            attempt_no=meta.get("attempt_no"),
            detail=detail,
        )

    if row is None or row.get("source") is None:
        if outcome not in ("completed", "failed"):
            # Never answered (uncertain, not accepted): nothing to price, as with a statement.
            return line(rules.classify(mine, None, statement_imported=True), 0)
        detail["missing"] = (
            "the attempt was answered but recorded no usage: the vendor's cost of this call is "
            "unknown (not zero); check it in the vendor's billing console"
        )
        return line(USAGE_MISSING, 0)
    usage = Usage(
        **{f: row[f] for f in COUNT_FIELDS},
        search_context_size=row.get("search_context"),
        source=str(row["source"]),
    )
    detail["usage"] = usage.as_dict()
    try:
        prices = token_prices(entry, version)
    except ValueError as exc:
        detail["missing"] = f"token prices unreadable: {exc}"
        return line(USAGE_MISSING, 0)
    if prices is None:
        detail["missing"] = (
            f"no token prices for price version {version!r}: state them in the registry as "
            f"platforms.{entry.platform}.options.token_prices.{version}"
        )
        return line(USAGE_MISSING, 0)
    if prices.currency != currency:
        detail["missing"] = f"token prices are in {prices.currency}, the run in {currency}"
        return line(USAGE_MISSING, 0)
    try:
        cost = usage_cost(usage, prices)
    except ValueError as exc:
        detail["missing"] = str(exc)
        return line(USAGE_MISSING, 0)
    detail["token_prices"] = {
        k: v for k, v in dataclasses.asdict(prices).items() if v is not None and k != "version"
    }
    detail["cost_exact_minor"] = cost.exact
    detail["cost_parts_micro_minor"] = dict(cost.parts)
    detail["rounding"] = "exact sum, rounded once half up to a whole minor unit"
    if cost.amount_minor != ours:
        detail["explained_by"] = (
            f"we charge a per-answer price; the vendor bills tokens: {usage.input_tokens} in, "
            f"{usage.output_tokens} out x version {version} = {cost.exact} minor units"
        )
    return line("matched" if cost.amount_minor == ours else USAGE_COST, cost.amount_minor)


def _credit_line(
    upstream_id: str,
    meta: dict[str, Any],
    mine: dict[str, int] | None,
    currency: str,
    version: str,
    mode: str,
    prices: PriceList | None,
    platform: str,
) -> ReconLine:
    """One task of a service that bills credits: our charge against the credits the vendor
    reported for it x the credit price of the frozen version ``version`` (issue 31). One
    conversion: the per-answer price in the quote is the same credits x price, rounded up."""
    ours = sum((mine or {}).values())
    outcome = meta.get("outcome")
    credits = meta.get("vendor_credits")
    detail: dict[str, Any] = {
        "source": f"credits reported by the vendor x credit price of price version {version}",
        "statement_source": CREDITS,
        "price_version": version,
        "ours_items": mine,
        "our_day": meta["day"].isoformat(),
    }
    for extra in ("free_reason", "request_state", "refunded_minor"):
        if meta.get(extra):
            detail[extra] = meta[extra]

    def line(cls: str, theirs: int) -> ReconLine:
        return ReconLine(
            upstream_id=upstream_id,
            platform=platform,
            classification=cls,
            fee_class=rules.fee_class(cls, outcome),
            ours_minor=ours,
            theirs_minor=theirs,
            currency=currency,
            sample_id=meta.get("sample_id"),
            attempt_no=meta.get("attempt_no"),
            detail=detail,
        )

    if credits is None:
        if mine is None or outcome not in ("completed", "failed"):
            # Never answered or never charged: nothing reported to price (as with a statement).
            return line(rules.classify(mine, None, statement_imported=True), 0)
        if meta.get("free_reason") or outcome == "failed":
            # A failed task reports nothing to us (its body never came): the platform's rule
            # decided our charge; the vendor's credits for it are not known here.
            detail["missing"] = (
                "the task failed and its vendor reported no credits to us; check the vendor's "
                "credit usage for this task"
            )
            if ours == 0:
                return line("matched", 0)
            return line(rules.CREDITS_MISSING, 0)
        detail["missing"] = (
            "the task was answered but its vendor reported no credits: its cost is unknown "
            "(not zero)"
        )
        return line(rules.CREDITS_MISSING, 0)
    if prices is None or prices.credit_price is None:
        detail["missing"] = f"price version {version!r} states no credit price"
        return line(rules.CREDITS_MISSING, 0)
    if prices.currency != currency:
        detail["missing"] = f"price version {version!r} is in {prices.currency}, the run {currency}"
        return line(rules.CREDITS_MISSING, 0)
    cp = prices.credit_price
    cost = cp.cost(int(credits))
    detail["credits"] = int(credits)
    detail["credits_quoted"] = prices.credits.get(mode)
    detail["credit_price"] = {"minor": cp.minor, "per_credits": cp.per_credits}
    detail["cost_exact_minor"] = cost.exact
    detail["rounding"] = "credits x price exact, rounded once half up to a whole minor unit"
    if cost.amount_minor == ours:
        return line("matched", cost.amount_minor)
    quoted = prices.credits.get(mode)
    if ours == 0 or quoted is None or int(credits) != quoted:
        # Not the rounding of the quoted credits: the vendor billed credits the price version
        # does not say an answer costs (a surcharge, a task we counted free). A person looks.
        detail["unmatched"] = (
            f"the vendor billed {credits} credits; price version {version} quotes {quoted} "
            f"for mode {mode!r} and we charged {ours}"
        )
        return line("amount_mismatch", cost.amount_minor)
    detail["explained_by"] = (
        f"we charge a per-answer price ({prices.credits.get(mode)} credits rounded up to a whole "
        f"minor unit); the vendor billed {credits} credits x {cp.minor}/{cp.per_credits} = "
        f"{cost.exact} minor units"
    )
    return line(rules.CREDIT_COST, cost.amount_minor)


def _in_day_total(
    run_id: str,
    platform: str,
    upstream_id: str,
    meta: dict[str, Any],
    mine: dict[str, int] | None,
    currency: str,
) -> ReconLine:
    """A task of a day the vendor bills as a total: no money on its own line (the day's line
    compares it), what we charged kept in the detail."""
    day = meta["day"]
    return ReconLine(
        upstream_id=upstream_id,
        platform=platform,
        classification=rules.IN_DAY_TOTAL,
        fee_class=rules.fee_class("in_day_total", meta.get("outcome")),
        ours_minor=0,
        theirs_minor=0,
        currency=currency,
        sample_id=meta.get("sample_id"),
        attempt_no=meta.get("attempt_no"),
        detail={
            "ours_items": mine,
            "charged_minor": sum((mine or {}).values()),
            "day_total": f"{DAY_TOTAL_PREFIX}{platform}:{day.isoformat()}",
            "our_day": day.isoformat(),
        },
    )


def _expected_minor(row: dict[str, Any], entry: PlatformEntry | None) -> tuple[int, str]:
    """What one charged answer is expected to cost at the vendor, and how that was found: its
    recorded usage x the token prices of the run's frozen price version when the registry
    states them, else what we charged for it (the per-answer price)."""
    charged = max(0, int(row["charged_minor"]))
    version = str(row.get("price_version") or "")
    if entry is None or row.get("source") is None or not version:
        return charged, "charge"
    try:
        prices = token_prices(entry, version)
        if prices is None:
            return charged, "charge"
        usage = Usage(
            **{f: row[f] for f in COUNT_FIELDS},
            search_context_size=row.get("search_context"),
            source=str(row["source"]),
        )
        return usage_cost(usage, prices).amount_minor, "usage"
    except ValueError:
        return charged, "charge"


def _insert_lines(cur: Any, run_id: str, lines: list[ReconLine]) -> None:
    """The run's lines in one statement, whatever their number (issue 39)."""
    if not lines:
        return
    cur.execute(
        Q("billing.insert_reconciliation_lines"),
        {
            "run_id": run_id,
            "upstream_ids": [x.upstream_id for x in lines],
            "sample_ids": [x.sample_id for x in lines],
            "attempt_nos": [x.attempt_no for x in lines],
            "platforms": [x.platform for x in lines],
            "classifications": [x.classification for x in lines],
            "ours_minor": [x.ours_minor for x in lines],
            "theirs_minor": [x.theirs_minor for x in lines],
            "currencies": [x.currency for x in lines],
            "fee_classes": [x.fee_class for x in lines],
            "details": [Jsonb(x.detail) for x in lines],
        },
    )


@dataclass(frozen=True)
class _DaySplit:
    """One vendor day total and its apportionment across the day's runs, computed once.

    A cost API bills the whole account per day, so the total is apportioned across every run
    with charges on that platform and day, in proportion to each run's expected cost
    (per-answer usage x price, ``_expected_minor``; ``domain.billing.split_day_total``). A
    run's line compares its charges with its share (classification 'apportioned', explained
    by that arithmetic, shown in the detail). What is above the runs' expected cost (other
    usage on the account) is one unexplained line of the day's first run (by run id), so the
    difference is counted once by the summary, the check, the gauge and the alert."""

    platform: str
    day: date
    currency: str
    items: dict[str, int]
    currencies: frozenset[str]
    charged: dict[str, int]
    expected: dict[str, int]
    expected_from: tuple[str, ...]
    # Charges of the day booked in another currency than the total's, per currency: shown,
    # never added to (or apportioned with) the total's currency (issue #34).
    other_currency: dict[str, dict[str, int]] = field(default_factory=dict)
    # Each run's own charges of the day in its own (one) currency, whatever the total's.
    own: dict[str, int] = field(default_factory=dict)
    # The day total per currency of its lines (a statement with two currencies is never summed).
    by_currency: dict[str, int] = field(default_factory=dict)

    @property
    def upstream_id(self) -> str:
        return f"{DAY_TOTAL_PREFIX}{self.platform}:{self.day.isoformat()}"

    @classmethod
    def load(
        cls,
        cur: Any,
        platform: str,
        day: date,
        day_totals: dict[tuple[str, date], dict[str, Any]],
        currency: str,
        entry: PlatformEntry | None,
    ) -> _DaySplit:
        total = day_totals[(platform, day)]
        cur.execute(Q("usage.platform_day_charges"), {"platform": platform, "day": day})
        charged: dict[str, int] = defaultdict(int)
        expected: dict[str, int] = defaultdict(int)
        how: set[str] = set()
        # The total's currency (one, or the run's when the statement mixes them: then nothing
        # is compared at all, lines_for says so).
        (total_currency,) = total["currencies"] if len(total["currencies"]) == 1 else {currency}
        other: dict[str, dict[str, Any]] = {}
        own: dict[str, int] = defaultdict(int)
        for r in cur.fetchall():
            run = str(r["run_id"])
            own[run] += int(r["charged_minor"])
            booked = str(r["currency"]).strip()
            if booked != total_currency:
                o = other.setdefault(booked, {"runs": set(), "charged_minor": 0})
                o["runs"].add(run)
                o["charged_minor"] += int(r["charged_minor"])
                continue
            charged[run] += int(r["charged_minor"])
            cost, source = _expected_minor(dict(r), entry)
            expected[run] += cost
            how.add(source)
        return cls(
            platform,
            day,
            currency,
            dict(total["items"]),
            frozenset(total["currencies"]),
            dict(charged),
            dict(expected),
            tuple(sorted(how)),
            {
                c: {"runs": len(o["runs"]), "charged_minor": int(o["charged_minor"])}
                for c, o in sorted(other.items())
            },
            dict(own),
            dict(total["by_currency"]),
        )

    def lines_for(self, run_id: str) -> list[ReconLine]:
        """The run's day line, and on the day's first run the line of what is not ours."""
        ours = self.own.get(run_id, 0)
        theirs = sum(self.items.values())
        detail: dict[str, Any] = {
            "source": "vendor cost API (day total of the account)",
            "theirs_items": self.items,
            "day_total_minor": theirs,
            "this_run_minor": ours,
            "other_runs_minor": sum(self.charged.values()) - self.charged.get(run_id, 0),
            "runs": len(self.charged),
        }
        if self.other_currency:
            detail["other_currency_charges"] = self.other_currency

        def line(uid: str, cls: str, o: int, t: int, d: dict[str, Any]) -> ReconLine:
            return ReconLine(
                upstream_id=uid,
                platform=self.platform,
                classification=cls,
                fee_class="completed",
                ours_minor=o,
                theirs_minor=t,
                currency=self.currency,
                detail=d,
            )

        if self.currencies != {self.currency}:
            # Never add amounts of two currencies: show the total per currency, count nothing
            # of it (the summed figures above would add them: they go).
            for key in ("theirs_items", "day_total_minor", "other_runs_minor", "runs"):
                detail.pop(key, None)
            detail["day_total_by_currency"] = dict(sorted(self.by_currency.items()))
            detail["other_currency_total"] = ", ".join(
                f"{v} {c}" for c, v in sorted(self.by_currency.items())
            )
            return [line(self.upstream_id, "amount_mismatch", ours, 0, detail)]
        split = rules.split_day_total(theirs, self.expected)
        first = min(self.expected) if self.expected else run_id
        share = split.shares.get(run_id, 0)
        detail.update(
            {
                "expected_minor": self.expected.get(run_id, 0),
                "expected_all_runs_minor": split.expected_minor,
                "expected_from": list(self.expected_from),
                "share_minor": share,
                "apportioned_minor": split.apportioned_minor,
                "not_ours_minor": split.not_ours_minor,
                "not_ours_on_run": first,
                "explained_by": (
                    f"the account's day total {theirs} is apportioned once across the day's "
                    f"{len(self.expected)} run(s) in proportion to their expected cost "
                    f"(usage x price, {split.expected_minor} in all; largest remainder): this "
                    f"run's share is {share}"
                ),
            }
        )
        lines = [line(self.upstream_id, rules.APPORTIONED, ours, share, detail)]
        if run_id == first and split.not_ours_minor != 0:
            lines.append(
                line(
                    f"{self.upstream_id}:not-ours",
                    "amount_mismatch",
                    0,
                    split.not_ours_minor,
                    {
                        "source": "vendor cost API (day total of the account)",
                        "day_total_minor": theirs,
                        "expected_all_runs_minor": split.expected_minor,
                        "runs": sorted(self.expected),
                        **(
                            {"other_currency_charges": self.other_currency}
                            if self.other_currency
                            else {}
                        ),
                        "not_ours": (
                            f"{split.not_ours_minor} of the day total {theirs} is not the "
                            "expected cost of any run of ours (other usage on the account, or "
                            "a charge nobody expects): one line for the day, on its first run"
                            if split.not_ours_minor > 0
                            else f"the vendor's day total {theirs} is "
                            f"{-split.not_ours_minor} below the {split.expected_minor} the "
                            "day's runs expect (usage x price): one line for the day, on its "
                            "first run"
                        ),
                    },
                )
            )
        return lines


def _price_change(
    cur: Any,
    platform: str,
    ours: dict[str, int],
    theirs: dict[str, int],
    charged_with: tuple[str, str] | None,
    statement_versions: set[str],
    day: date,
    cache: dict[tuple[str, str], PriceList | None],
) -> str | None:
    """The newer price version that explains an amount mismatch exactly, or None. Candidates:
    the versions the statement names, then the imported version in effect at the end of the
    charge's day (usage and cost APIs name no version)."""
    if charged_with is None:
        return None
    ours_version, mode = charged_with
    names = sorted(statement_versions - {ours_version})
    end_of_day = datetime.combine(day, time.min, UTC) + timedelta(days=1, microseconds=-1)
    cur.execute(Q("prices.effective_price_versions"), {"at": end_of_day})
    for r in cur.fetchall():
        if str(r["platform"]) == platform and str(r["version"]) not in names:
            names.append(str(r["version"]))
    candidates: dict[str, PriceList] = {}
    for name in names:
        if (platform, name) not in cache:
            cache[(platform, name)] = find_price_list(cur.connection, platform, name)
        found = cache[(platform, name)]
        if found is not None:
            candidates[name] = found
    return rules.price_change_version(ours, theirs, mode, ours_version, candidates)


def reconciliation_lines(conn: Conn, run_id: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("billing.reconciliation_lines"), {"run_id": run_id})
        return [dict(r) for r in cur.fetchall()]


def unattributed_statement_lines(
    conn: Conn, platform: str | None = None, statement_date: str | None = None
) -> list[dict[str, Any]]:
    """Statement lines for upstream tasks that no run of ours knows: money the platform billed
    for nothing we sent (missing on our side at the platform level, R23). Per-run
    reconciliation cannot see these, since they belong to no run."""
    with conn.cursor() as cur:
        cur.execute(
            Q("billing.unattributed_statement_lines"),
            {
                "platform": platform,
                "statement_date": date.fromisoformat(statement_date) if statement_date else None,
            },
        )
        return [dict(r) for r in cur.fetchall()]
