"""The connector contract (R16, R17) and its typed errors (R13).

Every platform connector implements ``Connector``. ``submit`` returns an acceptance with the
upstream id (never a fabricated answer); ``poll`` returns an explicit state; ``fetch_evidence``
returns the raw content exactly as received plus normalised citations; ``cancel`` records local
intent and says whether upstream could stop. Errors are typed so that the retry classifier
(geo_pipeline.domain.retry) can tell the R13 classes apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.domain.usage import Usage

# --------------------------------------------------------------------------- errors (R13)
ErrorClass = Literal[
    "invalid_params",  # no retry; record
    "no_permission",  # no retry; record
    "rate_limited",  # honour Retry-After; bounded count and total time
    "acceptance_unknown",  # timeout after send: look upstream up before anything else
    "transient",  # 5xx / connection failure before send, or a poll failure
    "upstream_failed",  # upstream says the task failed
    "unparseable",  # keep raw, send to review, never re-ask
    "not_found",  # lookup found nothing for the key / id
    "already_accepted",  # the key names a task upstream whose id we cannot read: never re-key
    "unavailable",  # nothing was sent and nothing may be now (account, page): the sample waits
]


class ConnectorError(Exception):
    error_class: ErrorClass = "transient"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        raw: bytes | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.raw = raw


class AlreadyAccepted(ConnectorError):
    """A re-send was refused because upstream already holds a task under this idempotency key
    (cloro's 409 RESOURCE_ALREADY_EXISTS), and the refusal does not say which task. The attempt
    WAS accepted (R12): a new key would pay a second time, so the sample waits for the task's
    id (a webhook, an operator) instead of being sent again."""

    error_class = "already_accepted"


class InvalidParams(ConnectorError):
    error_class = "invalid_params"


class NoPermission(ConnectorError):
    error_class = "no_permission"


class RateLimited(ConnectorError):
    error_class = "rate_limited"


class AcceptanceUnknown(ConnectorError):
    """The request may have been accepted: no response arrived after it was sent (R12)."""

    error_class = "acceptance_unknown"


class TransientError(ConnectorError):
    error_class = "transient"


class UpstreamFailed(ConnectorError):
    error_class = "upstream_failed"


class Unparseable(ConnectorError):
    """The response could not be parsed; ``raw`` holds the bytes exactly as received."""

    error_class = "unparseable"


class NotFound(ConnectorError):
    error_class = "not_found"


class Unavailable(ConnectorError):
    """Nothing was sent, and nothing can be until an account or an operator acts (a login wall,
    a captcha, a changed page, no free account). The sample waits: never failed, never charged,
    no attempt or time budget spent; ``cause`` names why (the reason recorded, R13)."""

    error_class = "unavailable"
    cause: str = "unavailable"


class NoStatementApi(NotFound, NotImplementedError):
    """The platform publishes no fee statement through its API (e.g. a synchronous vendor API
    billed from a console export). Both a ConnectorError and a NotImplementedError, so a
    reconciliation loop that catches either reports it as unavailable instead of crashing."""


# --------------------------------------------------------------------------- values
@dataclass(frozen=True)
class SubmitRequest:
    sample_id: str
    attempt_no: int
    tenant_id: str
    question: str
    platform: str
    device: str
    region: str
    mode: str
    screenshot: bool  # the policy asks for one ('required' or 'optional')

    @property
    def idempotency_key(self) -> str:
        """One key per attempt: a re-send of the same attempt can never create a second task."""
        return f"{self.sample_id}:{self.attempt_no}"


@dataclass(frozen=True)
class Acceptance:
    upstream_id: str
    accepted_at: datetime | None = None
    # A synchronous API adapted to submit/poll may already hold the finished response here.
    inline_result: bytes | None = None


PollState = Literal["pending", "running", "completed", "failed"]


@dataclass(frozen=True)
class PollResult:
    state: PollState
    upstream_id: str
    error: str | None = None
    # A task that failed upstream but was billed all the same (DataForSEO bills at task_post):
    # the credits the vendor charged for it, so reconciliation can price the failed attempt's
    # charge (issue 31). None: the vendor reports none (nothing billed, or not known).
    vendor_credits: int | None = None


@dataclass(frozen=True)
class Citation:
    """One normalised citation. ``relation`` keeps *cited* (the answer points at it) apart from
    *retrieved* (the engine fetched it but did not cite it)."""

    url: str
    relation: Literal["cited", "retrieved"] = "cited"
    id: str | None = None
    title: str | None = None
    span_start: int | None = None
    span_end: int | None = None
    cited_text: str | None = None
    # When ``url`` is a redirect that hides the page (Gemini's grounding links): the page or site
    # the engine says it stands for. ``url`` stays the raw URL; normalisation uses this (R18).
    target_url: str | None = None


@dataclass(frozen=True)
class Attachment:
    kind: Literal["screenshot"]
    status: Literal["available", "pending", "unavailable"]
    data: bytes | None = None
    mime_type: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class HttpExchange:
    """The upstream HTTP exchange a result came from, as sent and as received (headers in wire
    order; the evidence layer redacts secrets before archiving them, D2). ``response_body`` is
    ``Evidence.raw_body``, so it is not repeated here."""

    method: str
    url: str
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes
    status: int
    reason: str
    response_headers: tuple[tuple[str, str], ...]
    http_version: str = "HTTP/1.1"


@dataclass(frozen=True)
class Evidence:
    """The normalised connector result (R17)."""

    sample_id: str
    upstream_id: str
    collection_state: Literal["completed", "failed"]
    answer_text: str
    raw_body: bytes  # the response exactly as received
    raw_mime_type: str
    captured_at: datetime
    citations: tuple[Citation, ...] = ()
    screenshot: Attachment | None = None
    warnings: tuple[str, ...] = ()  # e.g. SCREENSHOT_UNAVAILABLE, SCREENSHOT_PENDING
    provider_truncated: bool = False  # e.g. finish_reason == "length"
    deep_thinking_used: bool = False
    web_search_used: bool = False
    screenshot_used: bool = False
    # Request-level usage the engine reported with this response (None: it reported none).
    usage: Usage | None = None
    # The search queries the engine said it ran (its fan-out), when the answer names them.
    search_queries: tuple[str, ...] = ()
    # The browser lane: the rendered page's HTML as captured, and how it was captured (device
    # emulation, region, account) -- recorded with the evidence (DESIGN section 9).
    page_html: bytes | None = None
    capture: Mapping[str, str] = field(default_factory=dict)
    # The exchange the raw body came in, when the connector kept it (WARC request/response).
    exchange: HttpExchange | None = None
    # What a service that bills credits says this task cost, in its credits (cloro's
    # creditsCharged, Bright Data's billed records, one DataForSEO task, one SerpApi search);
    # None: not reported. Priced with the frozen price version's credit_price (issue 31).
    vendor_credits: int | None = None


@dataclass(frozen=True)
class CancelResult:
    local_intent_recorded: bool = True
    upstream_cancelled: bool = False
    detail: str = ""


@dataclass(frozen=True)
class FeeLine:
    """One line of a platform's fee statement (for reconciliation, R23)."""

    upstream_id: str
    item: str
    amount_minor: int
    currency: str
    price_version: str | None = None
    charged_at: datetime | None = None


@dataclass(frozen=True)
class FeeStatement:
    platform: str
    statement_date: str  # YYYY-MM-DD
    currency: str
    lines: tuple[FeeLine, ...] = field(default_factory=tuple)
    raw: bytes = b""


def check_request(caps: Capabilities, request: SubmitRequest) -> None:
    """R16: an option the platform does not support is refused before anything is sent."""
    problems = [
        f"{name} {value!r} not in {list(allowed)}"
        for name, value, allowed in (
            ("device", request.device, caps.devices),
            ("region", request.region, caps.regions),
            ("mode", request.mode, caps.modes),
        )
        if value not in allowed
    ]
    if problems:
        raise InvalidParams(f"{caps.platform}: " + "; ".join(problems))


@runtime_checkable
class Connector(Protocol):
    platform: str

    def capabilities(self) -> Capabilities: ...

    async def submit(self, request: SubmitRequest) -> Acceptance:
        """Send the request with its idempotency key. Raises AcceptanceUnknown when the request
        may have left but no answer came back; never returns a fabricated answer."""
        ...

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        """Find an earlier submission by its idempotency key (R12); None = verified absent.
        Raises NotImplementedError when the platform has no lookup (capabilities say so)."""
        ...

    async def poll(self, upstream_id: str) -> PollResult: ...

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence: ...

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        """A screenshot fetched on its own (the screenshot stream, R10); may be pending."""
        ...

    async def cancel(self, upstream_id: str) -> CancelResult: ...

    async def fee_statement(self, statement_date: str) -> FeeStatement: ...

    async def aclose(self) -> None: ...
