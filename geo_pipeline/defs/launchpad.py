"""The launchpad's typed form of a collection config: Dagster ``Config`` classes mirroring
geo_pipeline.domain.config.CollectionConfig (and BrandIn, ChannelIn), so Dagster's config type
system checks a config as it is typed — unknown and missing fields, types, and the closed sets
(platform, device, region and mode from the connector registry, screenshot policies) — and
lists every mistake with its path before a run starts.

Dagster config cannot say everything the domain model does (string patterns and lengths, value
ranges, a mode a platform does not offer): the domain validation still runs in the op, on
``collection_dict()``, and fails with field paths (R1). Defaults are read from the domain model,
so the two cannot drift apart.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import dagster as dg
from pydantic import Field

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs.markdown import md_text
from geo_pipeline.domain.config_model import (
    MAX_PUBLISH_DEADLINE_SECONDS,
    MIN_PUBLISH_DEADLINE_SECONDS,
    SCREENSHOT_POLICIES,
    CollectionConfig,
)
from geo_pipeline.store.db import Conn


def _closed_set(name: str, values: Iterable[str]) -> type[enum.Enum]:
    """A Dagster-visible enum whose members' names are their values."""
    return enum.Enum(name, {v: v for v in sorted(set(values))}, type=str)  # type: ignore[return-value]


def _registry_sets() -> dict[str, set[str]]:
    """Every platform, device, region and mode the registry knows, offered or disabled: a
    disabled platform passes here so the domain validation can say which key variable to set."""
    out: dict[str, set[str]] = {"platform": set(), "device": set(), "region": set(), "mode": set()}
    for name, entry in load_registry().every_entry().items():
        caps = entry.capabilities
        out["platform"].add(name)
        out["device"].update(caps.devices)
        out["region"].update(caps.regions)
        out["mode"].update(caps.modes)
    return out


_SETS = _registry_sets()
if TYPE_CHECKING:  # the type checker sees the values; Dagster sees the closed sets
    PlatformName: TypeAlias = str
    DeviceName: TypeAlias = str
    RegionName: TypeAlias = str
    ModeName: TypeAlias = str
    ScreenshotPolicyName: TypeAlias = str
else:
    PlatformName = _closed_set("PlatformName", _SETS["platform"])
    DeviceName = _closed_set("DeviceName", _SETS["device"])
    RegionName = _closed_set("RegionName", _SETS["region"])
    ModeName = _closed_set("ModeName", _SETS["mode"])
    ScreenshotPolicyName = _closed_set("ScreenshotPolicyName", SCREENSHOT_POLICIES)

_DEFAULTS = {name: f.default for name, f in CollectionConfig.model_fields.items()}


class BrandFields(dg.Config):
    """A tracked brand: the target, or a competitor (domain: BrandIn)."""

    name: str = Field(description="the brand's name as answers write it")
    aliases: list[str] = Field(default=[], description="other names it goes by")
    domains: list[str] = Field(default=[], description="its web domains (citations)")


class ChannelFields(dg.Config):
    """One platform on one device, in the given regions and modes (domain: ChannelIn)."""

    platform: PlatformName = Field(description="an AI answer engine from the connector registry")
    device: DeviceName = Field(description="web or app, as the platform offers")
    regions: list[RegionName] | None = Field(
        default=None, description="regions to ask from (default: the platform's first)"
    )
    modes: list[ModeName] | None = Field(
        default=None, description="answer modes (default: the platform's first)"
    )
    screenshot: ScreenshotPolicyName | None = Field(
        default=None, description="overrides the config-wide screenshot policy for this channel"
    )


class CollectionFields(dg.Config):
    """What the user fills in; the same fields as the YAML the CLI reads."""

    tenant: str = Field(description="the tenant paying for the run (lower case, digits, - _)")
    monitor: str | None = Field(
        default=None, description="save this config as a monitor, re-sampled daily"
    )
    brand: BrandFields = Field(description="the brand whose visibility is measured")
    competitors: list[BrandFields] = Field(default=[], description="brands compared with it")
    questions: list[str] = Field(description="the questions asked (exact duplicates removed)")
    channels: list[ChannelFields] = Field(description="where the questions are asked")
    repeats: int = Field(
        default=_DEFAULTS["repeats"], description="answers per question and target (1..20)"
    )
    screenshot: ScreenshotPolicyName = Field(
        default=_DEFAULTS["screenshot"], description="required, optional or off"
    )
    priority: int = Field(default=_DEFAULTS["priority"], description="queue priority")
    submit_cap: int = Field(default=_DEFAULTS["submit_cap"], description="samples per batch")
    max_attempts: int = Field(
        default=_DEFAULTS["max_attempts"], description="attempts per sample (1..10)"
    )
    publish_deadline_seconds: int = Field(
        default=_DEFAULTS["publish_deadline_seconds"],
        description="seconds after the run's creation when each partition publishes what is "
        "terminal and lists the rest as excluded (allowed "
        f"{MIN_PUBLISH_DEADLINE_SECONDS}..{MAX_PUBLISH_DEADLINE_SECONDS})",
    )
    question_tags: dict[str, dict[str, str]] | None = Field(
        default=None,
        description="tags per question as written: {topic, intent, persona, market} "
        "(docs/monitors.md)",
    )


def environment_references(raw: Any, path: str = "") -> list[str]:
    """Field paths of ``{env: VAR}`` values in a raw launchpad config. Dagster's typed string
    fields accept them, so without this a launchpad user could copy a deployment secret (a key,
    a URL with its password) into a brand name or question that is stored and shown in reports.
    A collection config is what a person typed: it never names an environment variable."""
    if isinstance(raw, dict):
        if set(raw) == {"env"}:
            return [path or "(root)"]
        return [
            ref
            for key, value in raw.items()
            for ref in environment_references(value, f"{path}.{key}" if path else str(key))
        ]
    if isinstance(raw, list):
        return [
            ref
            for i, value in enumerate(raw)
            for ref in environment_references(value, f"{path}[{i}]")
        ]
    return []


def refuse_environment_references(run_config: Any, op_name: str) -> None:
    """Raise a Failure naming every field of the op's config given as ``{env: VAR}``."""
    ops = run_config.get("ops", {}) if isinstance(run_config, dict) else {}
    raw = ops.get(op_name, {}).get("config", {}) if isinstance(ops, dict) else {}
    found = environment_references(raw)
    if found:
        raise dg.Failure(
            description="environment variables are not accepted in a launchpad config; type the "
            f"value itself at: {', '.join(found)}",
            allow_retries=False,
        )


def plain(value: Any) -> Any:
    """A config value as the domain model reads it: enums as their values, ``None`` fields left
    out (the domain's defaults apply), models as mappings."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dg.Config):
        return {k: plain(v) for k, v in value if v is not None}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def collection_dict(fields: CollectionFields) -> dict[str, Any]:
    """The collection config as the CLI would read it from YAML (and as a monitor saves it)."""
    out = plain(fields)
    assert isinstance(out, dict)
    return out


# A small valid example, pre-filled on the launchpad (examples/collection.yaml, shortened): a
# coffee brand and two competitors, two questions, two channels, two repeats.
EXAMPLE: Mapping[str, Any] = {
    "tenant": "acme",
    "brand": {
        "name": "瑞幸咖啡",
        "aliases": ["Luckin Coffee", "luckin", "瑞幸"],
        "domains": ["luckincoffee.com"],
    },
    "competitors": [
        {"name": "星巴克", "aliases": ["Starbucks"], "domains": ["starbucks.com.cn"]},
        {"name": "库迪咖啡", "aliases": ["Cotti Coffee", "库迪"], "domains": ["cotticoffee.com"]},
    ],
    "questions": [
        "国内性价比最高的连锁咖啡品牌有哪些？",
        "Which coffee chain in China has the best value for money?",
    ],
    "channels": [
        {"platform": "deepseek", "device": "web", "modes": ["standard"], "screenshot": "required"},
        {"platform": "doubao", "device": "web"},
    ],
    "repeats": 2,
    "screenshot": "optional",
    "priority": 5,
    "submit_cap": 100,
    "publish_deadline_seconds": 21600,
}


def example_fields() -> CollectionFields:
    return CollectionFields(**EXAMPLE)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Rows as a Markdown table for the run's metadata (every cell literal text)."""
    if not rows:
        return "(no channel)"
    cols = list(rows[0])
    lines = [
        "| " + " | ".join(md_text(c) for c in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    lines += ["| " + " | ".join(md_text(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- dev's deposit
@dataclass(frozen=True)
class LaunchpadFunding:
    """What ``geo-pipeline dev`` did so the pre-filled example launches (issue 36)."""

    tenant: str
    currency: str
    run_needs_minor: int  # the example's quote, estimated maximum (what a launch reserves)
    deposited_minor: int  # deposited now (0: the balance already covered the target)
    available_minor: int  # after the deposit

    def line(self) -> str:
        runs = self.available_minor // self.run_needs_minor if self.run_needs_minor else 0
        did = (
            f"deposited {self.deposited_minor} {self.currency} minor units now"
            if self.deposited_minor
            else "no deposit needed"
        )
        return (
            f"launchpad tenant {self.tenant}: {did}; available {self.available_minor} "
            f"{self.currency} minor units, {runs} launches of the pre-filled create_collection_run "
            f"(each reserves up to {self.run_needs_minor})"
        )


def fund_launchpad_example(conn: Conn, runs: int = 5) -> LaunchpadFunding:
    """Top the example's tenant up to ``runs`` times the example's quote (at the prices in
    effect), so the launchpad's pre-filled form launches on a fresh ``dev``. Idempotent: the
    deposit's key is the tenant's deposited total and the amount, so a second start (or two at
    once) with the money still there deposits nothing, and one after the money was spent tops up
    again. A person's own deposits count towards the target."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.billing.errors import BillingError
    from geo_pipeline.flows.create_run import quoted_plan

    # The one quote path (issue #34): what the launch will reserve, at the prices in effect.
    quote = quoted_plan(conn, dict(EXAMPLE), load_registry().capabilities(), None).quote
    needs, currency = quote.estimated_max.amount_minor, quote.currency
    tenant = str(EXAMPLE["tenant"])
    try:
        bal = ledger.balances(conn, tenant)
        available, deposited = bal.available.amount_minor, bal.deposited.amount_minor
    except BillingError:  # no such tenant yet: it appears with its first deposit
        available = deposited = 0
    amount = runs * needs - available
    if amount > 0:
        key = f"dev-launchpad:{tenant}:{deposited}:{amount}"
        ledger.deposit(conn, tenant, amount, currency, key)
        available += amount
    return LaunchpadFunding(tenant, currency, needs, max(amount, 0), available)
