"""Checking the configured engines with one cheap, real request each (``connectors check``).

Per platform: is its key set (else skipped, naming the variable), does the engine accept the
key, does the model answer, did it search the web, how long did it take and how many citations
the parser found. The request goes through the platform's own connector, so what is checked is
exactly what a worker would send. Nothing is recorded or charged in the ledger; the vendor
charges the call itself (one short answer).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import httpx

from geo_pipeline.connectors.base import (
    Connector,
    ConnectorError,
    InvalidParams,
    NoPermission,
    SubmitRequest,
    Unparseable,
)
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.http import new_client
from geo_pipeline.connectors.registry import key_is_set
from geo_pipeline.domain.catalogue import PlatformEntry, Registry, RegistryError

CHECK_QUESTION = (
    "Which company makes the iPhone, and where is it headquartered? "
    "Answer in one sentence and cite your source."
)
Status = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True)
class CheckResult:
    platform: str
    protocol: str
    status: Status
    key_variable: str | None
    auth: Literal["ok", "failed", "unknown", "not_checked"]
    model: str | None
    model_available: bool | None = None
    mode: str | None = None
    web_search_used: bool | None = None
    citations: int | None = None  # cited by the answer
    retrieved: int | None = None  # fetched by the engine, not cited
    latency_ms: int | None = None
    detail: str = ""
    # The request-level usage the answer reported ("input/output tokens"; None: none reported),
    # what reconciliation prices for a platform whose vendor has no cost API.
    usage_tokens: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_of(entry: PlatformEntry, mode: str) -> str | None:
    by_mode = entry.options.get("mode_models") or {}
    model = by_mode.get(mode) or entry.options.get("model")
    return str(model) if model else None


def targets(registry: Registry, platforms: Sequence[str], every: bool) -> list[PlatformEntry]:
    """The entries to check: the named ones (offered or disabled); else every platform that
    names a key variable (the real engines); with ``every``, all registered platforms."""
    known = registry.every_entry()
    if platforms:
        unknown = [p for p in platforms if p not in known]
        if unknown:
            raise RegistryError(
                f"platform {unknown[0]!r} is not registered; known: {', '.join(known)}"
            )
        return [known[p] for p in platforms]
    return [e for e in known.values() if every or e.api_key_env]


def _default_mode(entry: PlatformEntry) -> str:
    modes = entry.capabilities.modes
    return "web_search" if "web_search" in modes else modes[0]


def _failure(entry: PlatformEntry, mode: str, exc: ConnectorError) -> CheckResult:
    """What an error says about the key and the model."""

    def failure(**found: Any) -> CheckResult:
        return CheckResult(
            platform=entry.platform,
            protocol=entry.protocol,
            status="failed",
            key_variable=entry.api_key_env,
            model=model_of(entry, mode),
            mode=mode,
            **found,
        )

    text = str(exc)
    if isinstance(exc, NoPermission):
        hint = f"; check {entry.api_key_env}" if entry.api_key_env else ""
        return failure(auth="failed", detail=f"auth failed: {text}{hint}")
    if isinstance(exc, InvalidParams) and (exc.status == 404 or "model" in text.lower()):
        return failure(
            auth="ok",
            model_available=False,
            detail=f"model not available: {text}; set options.model in the registry",
        )
    if isinstance(exc, Unparseable):
        return failure(
            auth="ok",
            model_available=True,
            detail=f"answered, but not in the documented shape: {text}",
        )
    return failure(auth="unknown", detail=f"{exc.error_class}: {text}")


# How a check builds the connector it asks through: by default as the factory builds it. The
# command passes one that puts browser channels over the shared accounts of geo.accounts
# (worker.browser.check_connector_builder): a part cannot build that itself (layers).
ConnectorBuilder = Callable[[PlatformEntry, httpx.AsyncClient], Connector]


def factory_connector(entry: PlatformEntry, client: httpx.AsyncClient) -> Connector:
    return build_connector(entry, client)


async def check_platform(
    entry: PlatformEntry,
    client: httpx.AsyncClient,
    *,
    mode: str | None = None,
    question: str = CHECK_QUESTION,
    timeout_s: float = 300.0,
    build: ConnectorBuilder = factory_connector,
) -> CheckResult:
    """One request to one platform, from submit to parsed evidence."""
    mode = mode or _default_mode(entry)

    def skipped(why: str) -> CheckResult:
        return CheckResult(
            platform=entry.platform,
            protocol=entry.protocol,
            status="skipped",
            key_variable=entry.api_key_env,
            auth="not_checked",
            model=model_of(entry, mode),
            mode=mode,
            detail=f"skipped: {why}",
        )

    if entry.api_key_env and not key_is_set(entry.api_key_env):
        return skipped(
            f"{entry.api_key_env} is not set (set it to enable and check {entry.platform})"
        )
    caps = entry.capabilities
    if mode not in caps.modes:
        return skipped(f"{entry.platform} offers no mode {mode!r}; modes: {', '.join(caps.modes)}")
    request = SubmitRequest(
        sample_id=f"connectors-check-{uuid.uuid4().hex[:12]}",
        attempt_no=1,
        tenant_id="connectors-check",
        question=question,
        platform=entry.platform,
        device=caps.devices[0],
        region=caps.regions[0],
        mode=mode,
        screenshot=False,
    )
    connector = build(entry, client)
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            accepted = await connector.submit(request)
            if accepted.inline_result is None:  # an asynchronous platform: poll to the end
                delay = 0.05
                while (polled := await connector.poll(accepted.upstream_id)).state not in (
                    "completed",
                    "failed",
                ):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                if polled.state == "failed":
                    raise ConnectorError(f"the task failed upstream: {polled.error}")
            evidence = await connector.fetch_evidence(accepted.upstream_id, request)
    except ConnectorError as exc:
        return _failure(entry, mode, exc)
    except TimeoutError:
        return _failure(entry, mode, ConnectorError(f"no answer within {timeout_s:g} s"))
    finally:
        await connector.aclose()
    latency_ms = round((time.monotonic() - started) * 1000)
    cited = sum(1 for c in evidence.citations if c.relation == "cited")
    ok = evidence.collection_state == "completed"
    return CheckResult(
        platform=entry.platform,
        protocol=entry.protocol,
        status="ok" if ok else "failed",
        key_variable=entry.api_key_env,
        auth="ok",
        model=model_of(entry, mode),
        model_available=True,
        mode=mode,
        web_search_used=evidence.web_search_used,
        citations=cited,
        retrieved=len(evidence.citations) - cited,
        latency_ms=latency_ms,
        detail="answered" if ok else "; ".join(evidence.warnings) or "the answer failed",
        usage_tokens=(
            f"{evidence.usage.input_tokens}/{evidence.usage.output_tokens}"
            if evidence.usage is not None
            else None
        ),
    )


async def check_platforms(
    entries: Sequence[PlatformEntry],
    *,
    mode: str | None = None,
    question: str = CHECK_QUESTION,
    timeout_s: float = 300.0,
    client: httpx.AsyncClient | None = None,
    build: ConnectorBuilder = factory_connector,
) -> list[CheckResult]:
    """Every entry's check, concurrently, on one HTTP client."""
    own = client is None
    http = client or new_client()
    try:
        return list(
            await asyncio.gather(
                *(
                    check_platform(
                        e, http, mode=mode, question=question, timeout_s=timeout_s, build=build
                    )
                    for e in entries
                )
            )
        )
    finally:
        if own:
            await http.aclose()


def failed(results: Sequence[CheckResult]) -> bool:
    """The check fails when a checked platform failed, or when nothing could be checked."""
    return any(r.status == "failed" for r in results) or not any(r.status == "ok" for r in results)
