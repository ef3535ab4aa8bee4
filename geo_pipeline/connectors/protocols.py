"""Connectors for the real engine protocols: synchronous HTTP APIs adapted honestly to the
submit/poll contract (R16).

Acceptance = the request was sent with its idempotency key and a response came back; the response
bytes are kept as ``Acceptance.inline_result`` (and in this process's memory) so ``poll`` and
``fetch_evidence`` read them without asking the engine again. A timeout after sending is
``AcceptanceUnknown``: with no lookup by key (``lookup_by_key`` is False), the execution core
must treat the attempt as uncertain rather than re-ask blindly (R12). Capabilities always say:
no screenshots, no lookup, not cancellable, synchronous — whatever the registry file claims.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import httpx

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
    Attachment,
    CancelResult,
    Evidence,
    FeeLine,
    FeeStatement,
    NoStatementApi,
    NotFound,
    PollResult,
    SubmitRequest,
    Unparseable,
    UpstreamFailed,
    check_request,
)
from geo_pipeline.connectors.http import new_client, status_error, timeout_from, transport_error
from geo_pipeline.connectors.parsers import (
    PARSERS,
    ParsedAnswer,
    error_in_body,
    load_json,
    parse_usage,
)
from geo_pipeline.connectors.registry import api_key
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.settings import variable

RequestBuilder = Callable[[PlatformEntry, SubmitRequest], tuple[str, dict[str, Any]]]


def _model(entry: PlatformEntry, request: SubmitRequest, default: str) -> str:
    """``options.mode_models`` maps a mode to a model (e.g. deep_thinking -> deepseek-reasoner)."""
    by_mode: Mapping[str, str] = entry.options.get("mode_models") or {}
    return str(by_mode.get(request.mode) or entry.options.get("model") or default)


def _extra(entry: PlatformEntry, request: SubmitRequest) -> dict[str, Any]:
    """``options.extra_body`` (every request) and ``options.mode_body.<mode>`` (per mode), e.g.
    Qwen's ``enable_search`` or Ark's ``thinking``; they go into the JSON body unchanged."""
    out = dict(entry.options.get("extra_body") or {})
    out.update((entry.options.get("mode_body") or {}).get(request.mode) or {})
    return out


def build_openai_chat(entry: PlatformEntry, request: SubmitRequest) -> tuple[str, dict[str, Any]]:
    body = {
        "model": _model(entry, request, entry.platform),
        "messages": [{"role": "user", "content": request.question}],
        "stream": False,
        **_extra(entry, request),
    }
    return "/chat/completions", body


def build_perplexity(entry: PlatformEntry, request: SubmitRequest) -> tuple[str, dict[str, Any]]:
    path, body = build_openai_chat(entry, request)
    body["model"] = _model(entry, request, "sonar")
    return path, body


def build_openai_responses(
    entry: PlatformEntry, request: SubmitRequest
) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": _model(entry, request, "gpt-5"),
        "input": request.question,
        "tools": [{"type": "web_search"}],
        # Without this the web_search_call items carry no sources (the retrieved list).
        "include": ["web_search_call.action.sources"],
        **_extra(entry, request),
    }
    return "/responses", body


def build_gemini(entry: PlatformEntry, request: SubmitRequest) -> tuple[str, dict[str, Any]]:
    model = _model(entry, request, "gemini-2.5-flash")
    body = {
        "contents": [{"role": "user", "parts": [{"text": request.question}]}],
        "tools": [{"google_search": {}}],
        **_extra(entry, request),
    }
    return f"/models/{model}:generateContent", body


def build_anthropic(entry: PlatformEntry, request: SubmitRequest) -> tuple[str, dict[str, Any]]:
    body = {
        "model": _model(entry, request, "claude-sonnet-4-5"),
        "max_tokens": int(entry.options.get("max_tokens", 2048)),
        "messages": [{"role": "user", "content": request.question}],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        **_extra(entry, request),
    }
    return "/messages", body


BUILDERS: dict[str, RequestBuilder] = {
    "openai_chat": build_openai_chat,
    "perplexity": build_perplexity,
    "openai_responses": build_openai_responses,
    "gemini": build_gemini,
    "anthropic": build_anthropic,
}


def auth_headers(protocol: str, key: str | None) -> dict[str, str]:
    """Each vendor's documented header; the key comes from the environment only (D2)."""
    if not key:
        return {}
    if protocol == "gemini":
        return {"x-goog-api-key": key}
    if protocol == "anthropic":
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {key}"}


class SyncProtocolConnector:
    """One class for every synchronous protocol; ``protocol`` picks the request builder and the
    parser. Inline results are held per process in a bounded LRU (``options.inline_cache``)."""

    def __init__(self, entry: PlatformEntry, client: httpx.AsyncClient | None = None):
        if entry.protocol not in BUILDERS:
            raise ValueError(f"{entry.platform}: no synchronous connector for {entry.protocol!r}")
        self.platform = entry.platform
        self.entry = entry
        self.protocol = entry.protocol
        self._build = BUILDERS[entry.protocol]
        self._parse = PARSERS[entry.protocol]
        self._own_client = client is None
        self.client = client or new_client()
        self.base = entry.base_url.rstrip("/")
        # A synchronous answer arrives with the response: the submit timeout covers generation.
        self.timeout = timeout_from(entry.options, "submit_timeout_s", 120.0)
        self._inline: OrderedDict[str, tuple[bytes, str]] = OrderedDict()
        self._inline_cap = int(entry.options.get("inline_cache", 10_000))
        self._caps = dataclasses.replace(
            entry.capabilities,
            screenshot=False,
            lookup_by_key=False,
            cancellable=False,
            asynchronous=False,
        )

    def capabilities(self) -> Capabilities:
        return self._caps

    def adopt_inline_result(self, upstream_id: str, raw: bytes, mime_type: str = "") -> None:
        """Give back a stored ``Acceptance.inline_result`` (e.g. after a worker restart) so that
        poll/fetch_evidence can read it without asking the engine again."""
        self._inline[upstream_id] = (raw, mime_type or "application/json")
        self._inline.move_to_end(upstream_id)
        while len(self._inline) > self._inline_cap:
            self._inline.popitem(last=False)

    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self._caps, request)
        what = f"{self.platform} {self.protocol} {request.idempotency_key}"
        path, body = self._build(self.entry, request)
        headers = {
            "Idempotency-Key": request.idempotency_key,
            **auth_headers(self.protocol, api_key(self.entry)),
        }
        try:
            resp = await self.client.post(
                self.base + path, json=body, headers=headers, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=True, what=what) from exc
        if resp.status_code != 200:
            raise status_error(resp, what=what)
        raw = resp.content
        data: dict[str, Any] | None
        try:
            data = load_json(raw, self.protocol)
        except Unparseable:
            data = None  # accepted all the same: fetch_evidence reports it raw (R13)
        if data is not None and "error" in data and not data.keys() - {"error", "type"}:
            # A bare error object inside HTTP 200: the engine answered 'no', nothing to keep.
            # (A body that is a response with a failed status was accepted: poll says failed.)
            err = error_in_body(data, raw, self.protocol)
            if err is not None:
                raise err
        # The engine's own response id when readable; otherwise our key names the attempt.
        rid = data.get("id") or data.get("responseId") if data else None
        upstream_id = f"{self.platform}:{rid or request.idempotency_key}"
        self.adopt_inline_result(upstream_id, raw, resp.headers.get("content-type", ""))
        return Acceptance(upstream_id=upstream_id, accepted_at=datetime.now(UTC), inline_result=raw)

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        raise NotImplementedError(
            f"{self.platform}: a synchronous {self.protocol} API cannot be looked up by key"
        )

    def _held(self, upstream_id: str) -> tuple[bytes, str]:
        try:
            return self._inline[upstream_id]
        except KeyError:
            raise NotFound(
                f"{self.platform}: no inline result held for {upstream_id}; "
                "adopt_inline_result() with the stored Acceptance.inline_result"
            ) from None

    def _parsed(self, upstream_id: str) -> tuple[bytes, str, ParsedAnswer]:
        raw, mime = self._held(upstream_id)
        return raw, mime, self._parse(raw)

    async def poll(self, upstream_id: str) -> PollResult:
        try:
            self._parsed(upstream_id)
        except UpstreamFailed as exc:
            return PollResult("failed", upstream_id, error=str(exc))
        except NotFound:
            raise
        except Exception:
            # An unparseable body is still a completed call: fetch_evidence reports it raw.
            return PollResult("completed", upstream_id)
        return PollResult("completed", upstream_id)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        """The parsed answer with the body exactly as received. A refusal or filter reported
        inside HTTP 200 comes back as a *failed* evidence that still keeps the raw body (the
        caller may skip ``poll`` for an inline result); a body that does not parse raises
        ``Unparseable`` with the raw bytes (R13)."""
        try:
            raw, mime, parsed = self._parsed(upstream_id)
        except UpstreamFailed as exc:
            raw, mime = self._held(upstream_id)
            return Evidence(
                sample_id=request.sample_id,
                upstream_id=upstream_id,
                collection_state="failed",
                answer_text="",
                raw_body=raw,
                raw_mime_type=mime.split(";")[0] or "application/json",
                captured_at=datetime.now(UTC),
                warnings=(f"UPSTREAM_FAILED: {exc}"[:300],),
                # A refusal or filter is billed by the vendor all the same: keep its usage.
                usage=parse_usage(self.protocol, raw),
            )
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=parsed.answer_text,
            raw_body=raw,
            raw_mime_type=mime.split(";")[0] or "application/json",
            captured_at=datetime.now(UTC),
            citations=parsed.citations,
            screenshot=(
                Attachment("screenshot", "unavailable", reason="unsupported")
                if request.screenshot
                else None
            ),
            warnings=parsed.warnings + (("SCREENSHOT_UNAVAILABLE",) if request.screenshot else ()),
            provider_truncated=parsed.truncated,
            deep_thinking_used=parsed.deep_thinking_used,
            web_search_used=parsed.web_search_used,
            usage=parsed.usage,
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "unavailable", reason="unsupported")

    async def cancel(self, upstream_id: str) -> CancelResult:
        return CancelResult(
            upstream_cancelled=False, detail="synchronous API: the call already finished"
        )

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        """One UTC day's costs from the vendor's organization cost API, as day-total lines
        (upstream id ``day-total:<platform>:<day>``): OpenAI ``/organization/costs`` and
        Anthropic ``/organizations/cost_report`` bill per day and line item, never per request,
        so reconciliation compares day totals. A platform whose ``statement_source`` is
        ``usage_fields`` (its vendor has no cost API, e.g. DeepSeek behind the OpenAI-compatible
        protocol) publishes none (NoStatementApi): it reconciles from recorded usage x price."""
        source = statement_source(self.entry)
        fetch = COST_APIS.get(self.protocol) if source in COST_API_SOURCES else None
        if fetch is None or COST_API_SOURCES[source] is not fetch:
            raise NoStatementApi(
                f"{self.platform}: {self.protocol} offers no cost API (statement_source "
                f"{source}); reconciled against the request-level usage recorded with each "
                "answer x the frozen price version"
            )
        day = date.fromisoformat(statement_date)
        path, params = fetch(day)
        base = str(self.entry.options.get("costs_base_url") or self.base).rstrip("/")
        key_env = self.entry.options.get("admin_key_env")
        key = variable(str(key_env)) if key_env else api_key(self.entry)
        what = f"{self.platform} {self.protocol} costs {statement_date}"
        try:
            resp = await self.client.get(
                base + path,
                params=params,
                headers=auth_headers(self.protocol, key),
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=False, what=what) from exc
        if resp.status_code != 200:
            raise status_error(resp, what=what)
        model = _model(self.entry, _COSTS_PROBE, "")
        filt = str(self.entry.options.get("costs_filter") or model)
        lines = parse_cost_report(self.protocol, resp.content, day, self.platform, filt)
        currency = lines[0].currency if lines else self.entry.capabilities.prices.currency
        return FeeStatement(self.platform, statement_date, currency, tuple(lines), resp.content)

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()


# --------------------------------------------------------------------------- cost APIs
# A statement line that is a vendor's day total, not one request: reconciliation compares it
# with the sum of our charges on that platform and day.
DAY_TOTAL_PREFIX = "day-total:"
_COSTS_PROBE = SubmitRequest("", 0, "", "", "", "", "", "standard", False)


def _openai_costs(day: date) -> tuple[str, dict[str, Any]]:
    start = datetime.combine(day, time.min, UTC)
    return "/organization/costs", {
        "start_time": int(start.timestamp()),
        "end_time": int((start + timedelta(days=1)).timestamp()),
        "bucket_width": "1d",
        "group_by": "line_item",
        "limit": 1,
    }


def _anthropic_costs(day: date) -> tuple[str, dict[str, Any]]:
    start = datetime.combine(day, time.min, UTC)
    return "/organizations/cost_report", {
        "starting_at": start.isoformat().replace("+00:00", "Z"),
        "ending_at": (start + timedelta(days=1)).isoformat().replace("+00:00", "Z"),
        "bucket_width": "1d",
        "group_by[]": "description",
    }


COST_APIS: dict[str, Callable[[date], tuple[str, dict[str, Any]]]] = {
    "openai_chat": _openai_costs,
    "openai_responses": _openai_costs,
    "anthropic": _anthropic_costs,
}
# ``options.statement_source`` of a registry entry: where its vendor's bill comes from.
COST_API_SOURCES: dict[str, Callable[[date], tuple[str, dict[str, Any]]]] = {
    "openai_costs": _openai_costs,
    "anthropic_cost_report": _anthropic_costs,
}
USAGE_FIELDS = "usage_fields"
# A service that bills credits (issue 31): each task's vendor cost is the credits it reported
# x the frozen price version's credit_price -- the default of a platform whose prices state one.
CREDITS = "credits"
# A channel no vendor bills per answer (a consumer app driven in a browser, issue #32): its
# price is our own estimate; reconciliation classes its lines no_vendor_bill (explained).
OWN_ESTIMATE = "own_estimate"
STATEMENT_SOURCES = (*COST_API_SOURCES, USAGE_FIELDS, "simulator", CREDITS, OWN_ESTIMATE)
_DEFAULT_SOURCE = {
    "openai_chat": "openai_costs",  # only OpenAI itself; other vendors must say usage_fields
    "openai_responses": "openai_costs",
    "anthropic": "anthropic_cost_report",
    "perplexity": USAGE_FIELDS,
    "gemini": USAGE_FIELDS,
    "simulator": "simulator",
    "browser": OWN_ESTIMATE,
}


def statement_source(entry: PlatformEntry) -> str:
    """Where the platform's vendor bill comes from: a cost API (``openai_costs``,
    ``anthropic_cost_report``), the simulator's statement API, or ``usage_fields`` (no cost
    API: request-level usage recorded with each attempt x the frozen price version). Stated
    per platform as ``options.statement_source``; the protocol's default otherwise."""
    declared = entry.options.get("statement_source")
    if not declared and entry.capabilities.prices.credit_price is not None:
        declared = CREDITS
    source = str(declared or _DEFAULT_SOURCE.get(entry.protocol, USAGE_FIELDS))
    if source not in STATEMENT_SOURCES:
        raise ValueError(
            f"platforms.{entry.platform}.options.statement_source: {source!r} is not one of "
            f"{list(STATEMENT_SOURCES)}"
        )
    return source


def _to_minor(amount: Decimal, what: str, raw: bytes) -> int:
    """Whole minor units; a fraction of one (vendors report fractional cents) is rounded half
    up once per line, the exact amount staying in the raw statement."""
    if not amount.is_finite():
        raise Unparseable(f"{what}: the amount {amount} is not a number", raw=raw)
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def parse_cost_report(
    protocol: str, raw: bytes, day: date, platform: str, model_filter: str
) -> list[FeeLine]:
    """The day's cost lines of ``model_filter`` (a model name; empty = every line) from an
    OpenAI costs page or an Anthropic cost report, one ``FeeLine`` per vendor line item, in
    minor units (two decimals) of the currency the vendor names."""
    body = load_json(raw, f"{protocol} costs")
    upstream_id = f"{DAY_TOTAL_PREFIX}{platform}:{day.isoformat()}"
    lines: list[FeeLine] = []
    try:
        for bucket in body.get("data") or []:
            for r in bucket.get("results") or []:
                if protocol == "anthropic":
                    label = str(r.get("description") or r.get("cost_type") or "cost")
                    model = str(r.get("model") or "")
                    amount = _to_minor(Decimal(str(r["amount"])), label, raw)
                    currency = str(r.get("currency") or "USD").upper()
                    web = r.get("cost_type") == "web_search"
                else:
                    label = str(r.get("line_item") or "cost")
                    model = label.split(",", 1)[0].strip()
                    value = Decimal(str(r["amount"]["value"])) * 100
                    amount = _to_minor(value, label, raw)
                    currency = str(r["amount"].get("currency") or "usd").upper()
                    web = "web search" in label.lower() or "web_search" in label.lower()
                if model_filter and model and not model.startswith(model_filter):
                    continue
                item = "web_search" if web else "base"
                lines.append(FeeLine(upstream_id, item, amount, currency))
    except (KeyError, TypeError, AttributeError, InvalidOperation) as exc:
        raise Unparseable(f"{protocol} costs: not the documented shape ({exc!r})", raw=raw) from exc
    return lines


__all__ = [
    "BUILDERS",
    "COST_APIS",
    "COST_API_SOURCES",
    "DAY_TOTAL_PREFIX",
    "STATEMENT_SOURCES",
    "USAGE_FIELDS",
    "AcceptanceUnknown",
    "SyncProtocolConnector",
    "auth_headers",
    "parse_cost_report",
    "statement_source",
]
