"""Request-level usage of one engine call (tokens, cache hits, searches) and its vendor cost.

``Usage`` is what an engine reports with each response (OpenAI-compatible ``usage``, Responses
and Anthropic ``usage``, Gemini ``usageMetadata``, Perplexity ``usage`` with its search context),
normalised so that ``input_tokens`` is every billed input token (cache hits included) and
``output_tokens`` every billed output token (reasoning included). A field the vendor did not
report is None, never 0.

``TokenPrices`` are a vendor's token prices in integer minor units per 1M tokens (plus per-1,000
fees for searches and requests); ``usage_cost`` multiplies exactly and rounds once, half up, to a
whole minor unit. Used to reconcile a platform whose vendor publishes no usage/cost API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PER_TOKENS = 1_000_000  # token prices are per 1M tokens
PER_CALLS = 1_000  # search and request fees are per 1,000


# The integer counts of a Usage (each None or a non-negative integer).
COUNT_FIELDS: tuple[str, ...] = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "web_search_requests",
)


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None  # part of input_tokens billed at the cache-hit price
    reasoning_tokens: int | None = None  # part of output_tokens (or reported beside it)
    web_search_requests: int | None = None
    search_context_size: str | None = None  # Perplexity: low / medium / high
    source: str = ""  # the body field it came from: 'usage' | 'usageMetadata'

    def __post_init__(self) -> None:
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(f"usage.{name} must be a non-negative integer, got {value!r}")

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


@dataclass(frozen=True)
class TokenPrices:
    """A vendor's token prices for one price version, integer minor units of ``currency``."""

    version: str
    currency: str
    input_per_1m: int
    output_per_1m: int
    cached_input_per_1m: int | None = None  # None: cache hits cost the input price
    per_1k_searches: int = 0  # per 1,000 web search requests the usage reports
    per_1k_requests: int = 0  # per 1,000 requests (e.g. Perplexity's search-context fee)
    source: str = ""
    as_of: str = ""

    @classmethod
    def from_mapping(cls, version: str, m: Mapping[str, Any], at: str) -> TokenPrices:
        """From a registry ``token_prices.<version>`` mapping; ``at`` names it in errors."""
        problems: list[str] = []

        def whole(key: str, required: bool) -> int | None:
            value = m.get(key)
            if value is None and not required:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(
                    f"{at}.{key}: must be a non-negative integer of minor units, got {value!r}"
                )
                return 0
            return value

        known = {
            "currency", "input_per_1m", "output_per_1m", "cached_input_per_1m",
            "per_1k_searches", "per_1k_requests", "source", "as_of",
        }  # fmt: skip
        problems += [f"{at}.{k}: unknown field; known: {sorted(known)}" for k in set(m) - known]
        currency = m.get("currency")
        if not (isinstance(currency, str) and len(currency) == 3 and currency.isupper()):
            problems.append(f"{at}.currency: an ISO 4217 code like 'USD' is required")
        prices = cls(
            version=version,
            currency=str(currency),
            input_per_1m=whole("input_per_1m", True) or 0,
            output_per_1m=whole("output_per_1m", True) or 0,
            cached_input_per_1m=whole("cached_input_per_1m", False),
            per_1k_searches=whole("per_1k_searches", False) or 0,
            per_1k_requests=whole("per_1k_requests", False) or 0,
            source=str(m.get("source") or ""),
            as_of=str(m.get("as_of") or ""),
        )
        if problems:
            raise ValueError("; ".join(problems))
        return prices


@dataclass(frozen=True)
class UsageCost:
    amount_minor: int  # rounded once, half up
    exact: str  # the unrounded amount in minor units, as a decimal string
    parts: Mapping[str, int]  # component -> minor units x 1,000,000 (exact)


def usage_cost(usage: Usage, prices: TokenPrices) -> UsageCost:
    """The vendor's cost of one call: tokens x price per 1M, searches and the request fee per
    1,000, summed exactly (in millionths of a minor unit) and rounded ONCE, half up. Missing
    input or output tokens are an error: an unknown count is never priced as zero."""
    if usage.input_tokens is None or usage.output_tokens is None:
        raise ValueError("usage without input and output token counts cannot be priced")
    cached = min(usage.cached_input_tokens or 0, usage.input_tokens)
    cache_price = (
        prices.input_per_1m if prices.cached_input_per_1m is None else (prices.cached_input_per_1m)
    )
    scale = PER_TOKENS // PER_CALLS
    parts = {
        "input": (usage.input_tokens - cached) * prices.input_per_1m,
        "cached_input": cached * cache_price,
        "output": usage.output_tokens * prices.output_per_1m,
        "web_search": (usage.web_search_requests or 0) * prices.per_1k_searches * scale,
        "request": prices.per_1k_requests * scale,
    }
    total = sum(parts.values())
    whole, rest = divmod(total, PER_TOKENS)
    return UsageCost(
        amount_minor=whole + (1 if 2 * rest >= PER_TOKENS else 0),
        exact=f"{whole}.{rest:06d}",
        parts={k: v for k, v in parts.items() if v},
    )
