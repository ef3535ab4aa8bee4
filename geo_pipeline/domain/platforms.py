"""What a platform (AI answer engine) can do and what it charges: its capabilities (R16).

This is the value the connector registry hands to planning and execution; planning validates a
config against it before anything is submitted, so unsupported options never reach an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Access = Literal["api", "scraped", "browser"]
ACCESS_KINDS: tuple[str, ...] = ("api", "scraped", "browser")
CancelScope = Literal["task", "queue", "none"]
CANCEL_SCOPES: tuple[str, ...] = ("task", "queue", "none")

RetryFeeRule = Literal["charged", "free_after_failure", "free"]
"""Whether the platform charges a retry (R15): 'charged' = every accepted attempt is billed;
'free_after_failure' = an attempt whose upstream task failed is not billed; 'free' = only the
first accepted attempt of a sample is billed. The platform's rule, never our assumption."""


@dataclass(frozen=True)
class CreditCost:
    amount_minor: int  # rounded once, half up
    exact: str  # the unrounded amount in minor units, as a decimal string (6 places)


@dataclass(frozen=True)
class CreditPrice:
    """What a vendor's credit costs (answer-scraping services bill credits, or records, or
    searches: one "credit" each): ``minor`` minor units buy ``per_credits`` credits. cloro's
    entry plan, $30 for 37,500 credits, is ``CreditPrice(3000, 37500)``."""

    minor: int
    per_credits: int

    def __post_init__(self) -> None:
        for name, value in (("minor", self.minor), ("per_credits", self.per_credits)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"credit_price.{name} must be a non-negative integer: {value!r}")
        if self.per_credits == 0:
            raise ValueError("credit_price.per_credits must be at least 1")

    def cost(self, credits: int) -> CreditCost:
        """``credits`` x the price, exact, rounded ONCE half up to a whole minor unit."""
        scaled = credits * self.minor * 1_000_000 // self.per_credits  # micro-minor, floored
        whole, rest = divmod(scaled, 1_000_000)
        remainder = credits * self.minor - whole * self.per_credits  # exact, in 1/per_credits
        half_up = whole + (1 if 2 * remainder >= self.per_credits else 0)
        return CreditCost(half_up, f"{whole}.{rest:06d}")

    def ceil_minor(self, credits: int) -> int:
        """The whole minor units a per-answer price must be to cover ``credits``."""
        return -(-credits * self.minor // self.per_credits)


@dataclass(frozen=True)
class PriceList:
    """A platform's published prices, in integer minor units (R4, R23)."""

    version: str
    currency: str
    # Base price of one answer, per mode (e.g. {"standard": 8, "deep_thinking": 8}).
    base: dict[str, int]
    # Surcharges that apply only when the feature is used and charged.
    deep_thinking: int = 0
    web_search: int = 0
    screenshot: int = 0
    retry_fee_rule: RetryFeeRule = "charged"
    # Services that bill credits (issue 31): the credits one answer costs, per mode, and what a
    # credit costs. The per-answer ``base`` is then credits x credit price rounded UP to a whole
    # minor unit (computed when the list gives no base; a stated base must equal it), and
    # reconciliation prices the credits the vendor reports with the same ``credit_price``.
    credits: dict[str, int] = field(default_factory=dict)
    credit_price: CreditPrice | None = None

    @classmethod
    def from_mapping(cls, p: Mapping[str, Any]) -> PriceList:
        """From the registry's (or a simulator profile's) ``prices`` mapping; missing
        surcharges are 0, a missing retry_fee_rule is 'charged'. With ``credits`` and
        ``credit_price: {minor, per_credits}`` the base may be left out: it is computed."""
        credits = {str(k): int(v) for k, v in (p.get("credits") or {}).items()}
        cp = p.get("credit_price")
        credit_price = None
        if cp is not None:
            if not isinstance(cp, Mapping) or set(cp) != {"minor", "per_credits"}:
                raise ValueError(
                    f"prices.credit_price: {cp!r} must be {{minor: <minor units>, "
                    "per_credits: <credits they buy>}"
                )
            credit_price = CreditPrice(cp["minor"], cp["per_credits"])
        if credits and credit_price is None:
            raise ValueError("prices.credits needs prices.credit_price (what a credit costs)")
        computed = (
            {m: credit_price.ceil_minor(n) for m, n in credits.items()} if credit_price else {}
        )
        base_spec = p.get("base")
        base = {str(k): int(v) for k, v in base_spec.items()} if base_spec else dict(computed)
        for mode, minor_units in computed.items():
            if base.get(mode) != minor_units:
                raise ValueError(
                    f"prices.base.{mode}: {base.get(mode)!r}, but {credits[mode]} credits x "
                    f"{credit_price.minor}/{credit_price.per_credits} rounded up is "  # type: ignore[union-attr]
                    f"{minor_units}: leave base out, it is computed from the credits"
                )
        return cls(
            version=str(p["version"]),
            currency=str(p["currency"]),
            base=base,
            deep_thinking=int(p.get("deep_thinking", 0)),
            web_search=int(p.get("web_search", 0)),
            screenshot=int(p.get("screenshot", 0)),
            retry_fee_rule=p.get("retry_fee_rule", "charged"),
            credits=credits,
            credit_price=credit_price,
        )

    def __post_init__(self) -> None:
        for name, value in [
            *self.base.items(),
            ("deep_thinking", self.deep_thinking),
            ("web_search", self.web_search),
            ("screenshot", self.screenshot),
        ]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"price {name} must be a non-negative integer of minor units, got {value!r}"
                )


@dataclass(frozen=True)
class RateLimits:
    submit_per_second: float = 50.0
    poll_per_second: float = 200.0
    screenshot_per_second: float = 20.0


@dataclass(frozen=True)
class Capabilities:
    platform: str
    devices: tuple[str, ...]
    regions: tuple[str, ...]
    modes: tuple[str, ...]
    screenshot: bool
    submit_cap: int
    prices: PriceList
    rate_limits: RateLimits = field(default_factory=RateLimits)
    idempotency_keys: bool = True  # submit accepts an idempotency key
    lookup_by_key: bool = True  # an accepted task can be found again by that key
    cancellable: bool = False  # upstream can stop an accepted task
    asynchronous: bool = True  # False: a synchronous API adapted to submit/poll
    # How the answer is collected (docs/design.md section 9): 'api' (a model API), 'scraped'
    # (an answer-scraping service rendering the consumer product) or 'browser' (our own lane).
    # Answers of different access are never pooled.
    access: Access = "api"
    # What cancel can reach upstream: 'task' (one task), 'queue' (only the whole account's
    # queue, e.g. cloro: so one task cannot be cancelled) or 'none'.
    cancel_scope: CancelScope = "task"
    # How long the upstream keeps a result (seconds; None = not stated): fetch well inside it.
    result_retention_s: float | None = None
    # The answer engine behind the platform, the same for each way of asking it (issue 31):
    # chatgpt_cloro (scraped) and openai_responses_api (api) are both 'chatgpt'. UI-vs-API
    # agreement pairs the channels of one engine; '' = the platform's own name.
    engine: str = ""

    @property
    def engine_name(self) -> str:
        """The engine this platform asks (its own name unless the registry says otherwise)."""
        return self.engine or self.platform

    @property
    def recoverable(self) -> bool:
        """An attempt whose outcome is unknown can be settled without an operator: looked up by
        its key, or re-sent under the same key (which can never create a second task)."""
        return self.lookup_by_key or self.idempotency_keys

    def channels(self) -> list[str]:
        return [channel_key(self.platform, device) for device in self.devices]


def channel_key(platform: str, device: str) -> str:
    """The Dagster partition key of a channel: platform + device (docs/design.md section 5)."""
    return f"{platform}__{device}"
