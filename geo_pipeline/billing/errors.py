"""What billing refuses, with a message that says why and what to do (R23, R24). Shared by the
ledger and the price versions."""

from __future__ import annotations

from geo_pipeline.domain.money import Money


class BillingError(ValueError):
    """A billing request that cannot be honoured; the message says why and what to do."""


class InsufficientFunds(BillingError):
    """The tenant's available balance does not cover the reservation."""

    def __init__(self, tenant_id: str, available: Money, needed: Money, run_id: str | None):
        self.tenant_id = tenant_id
        self.available = available
        self.needed = needed
        self.run_id = run_id
        short = needed.amount_minor - available.amount_minor
        what = f"run {run_id}" if run_id else "the reservation"
        super().__init__(
            f"insufficient funds: tenant {tenant_id} has {available.amount_minor} "
            f"{available.currency} minor units available ({available.format()}) but {what} "
            f"needs {needed.amount_minor} ({needed.format()}); deposit at least {short} with "
            f"`geo-pipeline billing deposit --tenant {tenant_id} --amount {short} "
            f"--currency {needed.currency}` and try again"
        )


class RefundExceedsCharges(BillingError):
    """A refund larger than what was charged (net of earlier refunds) for that upstream task."""


class IdempotencyConflict(BillingError):
    """The idempotency key was already used for a different movement."""


class RunNotBillable(BillingError):
    """The run has no billing account, is closed, or still has work that may cost money."""
