"""cloro: answer-scraping async tasks (``access: scraped``), the consumer product's rendered answer.

Contract (research on answer services, §2.1; cloro's OpenAPI): ``POST /v1/async/task`` with our
idempotency key as ``idempotencyKey``; ``GET /v1/async/task/{id}`` until COMPLETED or FAILED; the
result comes with the status (text, markdown, sources, searchQueries, model, shoppingCards, html).

Truths this connector keeps (docs/design.md section 9):
- **409 on our key = accepted (R12).** A re-send under the same key answers 409
  RESOURCE_ALREADY_EXISTS naming the key, never the task. If this process saw the task's id it
  reads the task; otherwise it raises ``AlreadyAccepted``: the worker parks the sample for
  review and never opens a new key (a second task would be billed a second time).
- **No lookup by key** (cloro has none) and **no per-task cancel**: ``DELETE /v1/async/queue``
  empties the whole organisation's queue, so ``cancel`` records local intent only.
- **Billing on COMPLETED**: FAILED costs 0 (``retry_fee_rule: free_after_failure``); a canned
  refusal (no sources, under ~160 characters) is billed all the same and flagged
  ``REFUSAL_SUSPECTED``.
- **Retention 24 h**: a task (and its ``html`` URL) is gone 24 h after creation: 404 then means
  the result is lost upstream, not "try again".
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
    AlreadyAccepted,
    Attachment,
    CancelResult,
    Citation,
    Evidence,
    FeeStatement,
    NoStatementApi,
    PollResult,
    PollState,
    SubmitRequest,
    TransientError,
    Unparseable,
    UpstreamFailed,
    check_request,
)
from geo_pipeline.connectors.http import new_client, status_error, timeout_from, transport_error
from geo_pipeline.connectors.registry import api_key
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities

_STATES: dict[str, PollState] = {
    "QUEUED": "pending",
    "PROCESSING": "running",
    "COMPLETED": "completed",
    "FAILED": "failed",
}
_HELD = 2048  # finished task bodies kept between poll and fetch_evidence (a bound, not a store)
_KNOWN_IDS = 100_000  # idempotency key -> task id of tasks this process created
# research §2.1 "Gotchas": an answer with no sources and under about 160 characters is a canned
# refusal; cloro bills it.
REFUSAL_MAX_CHARS = 160


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def country_of(region: str) -> str:
    """cloro's ``payload.country``: an uppercase ISO-2 code; our regions are lowercase codes."""
    return region.upper()


class CloroConnector:
    def __init__(self, entry: PlatformEntry, client: httpx.AsyncClient | None = None):
        self.platform = entry.platform
        self.entry = entry
        self._own_client = client is None
        self.client = client or new_client()
        self.base = entry.base_url.rstrip("/")
        self.task_type = str(entry.options.get("task_type") or "CHATGPT")
        self.include = dict(
            entry.options.get("include") or {"markdown": True, "searchQueries": True}
        )
        self.priority = int(entry.options.get("priority", 1))
        # research §2.1 "Submit": webhook?:{url}. The deployment's receiver URL (it carries its
        # secret: from the environment, never logged); empty = no callbacks, polling only.
        self.webhook_url = str(entry.options.get("webhook_url") or "")
        self.submit_timeout = timeout_from(entry.options, "submit_timeout_s", 15.0)
        self.read_timeout = timeout_from(entry.options, "read_timeout_s", 15.0)
        self._held: OrderedDict[str, bytes] = OrderedDict()
        self._ids: OrderedDict[str, str] = OrderedDict()

    def capabilities(self) -> Capabilities:
        return self.entry.capabilities

    @property
    def callbacks_on(self) -> bool:
        """A completion callback is asked for with every task (polling is the safety net)."""
        return bool(self.webhook_url)

    def _headers(self) -> dict[str, str]:
        key = api_key(self.entry)
        # research §2.1 "Auth": the prefix is case-sensitive (`bearer` is refused with 401).
        return {"Authorization": f"Bearer {key}"} if key else {}

    # ------------------------------------------------------------------ submit
    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self.entry.capabilities, request)
        key = request.idempotency_key
        what = f"{self.platform} cloro submit {key}"
        body = {
            "taskType": self.task_type,
            "priority": self.priority,
            "idempotencyKey": key,
            "payload": {
                "prompt": request.question,
                "country": country_of(request.region),
                "include": self.include,
            },
        }
        if self.webhook_url:
            body["webhook"] = {"url": self.webhook_url}
        try:
            resp = await self.client.post(
                self.base + "/v1/async/task",
                json=body,
                headers=self._headers(),
                timeout=self.submit_timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=True, what=what) from exc
        if resp.status_code == 409 and _error_code(resp) == "RESOURCE_ALREADY_EXISTS":
            return await self._already_exists(key, resp, what)
        if resp.status_code != 200:
            raise status_error(resp, what=what)
        try:
            task = resp.json()["task"]
            task_id = str(task["id"])
        except (ValueError, KeyError, TypeError) as exc:
            # A 200 without a readable id: the task may exist, and we cannot name it (R12).
            raise AcceptanceUnknown(f"{what}: unreadable acceptance", raw=resp.content) from exc
        self._ids[key] = task_id
        while len(self._ids) > _KNOWN_IDS:
            self._ids.popitem(last=False)
        return Acceptance(upstream_id=task_id, accepted_at=_time(task.get("createdAt")))

    async def _already_exists(self, key: str, resp: httpx.Response, what: str) -> Acceptance:
        """409 on our key: upstream holds the task (accepted, R12). Read it when we know its id;
        never open a new key."""
        task_id = self._ids.get(key)
        if task_id is not None:
            got = await self._get_task(task_id, f"{what} (read after 409)")
            if got.status_code == 200:
                return Acceptance(upstream_id=task_id)
        raise AlreadyAccepted(
            f"{what}: cloro already holds a task under this idempotency key (409 "
            "RESOURCE_ALREADY_EXISTS) and does not say which; cloro has no lookup by key, so the "
            "task id can only come from its webhook or an operator. Not re-sent under a new key.",
            status=409,
            raw=resp.content,
        )

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        raise NotImplementedError(f"{self.platform}: cloro has no lookup by idempotency key")

    # ------------------------------------------------------------------ follow
    async def _get_task(self, task_id: str, what: str) -> httpx.Response:
        try:
            return await self.client.get(
                f"{self.base}/v1/async/task/{task_id}",
                headers=self._headers(),
                timeout=self.read_timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=False, what=what) from exc

    async def poll(self, upstream_id: str) -> PollResult:
        what = f"{self.platform} cloro poll {upstream_id}"
        resp = await self._get_task(upstream_id, what)
        if resp.status_code != 200:
            # 404: unknown, or past cloro's 24 h retention: the result is gone upstream.
            raise status_error(resp, what=what, not_found_is_missing=True)
        try:
            data = resp.json()
            status = data["task"]["status"]
        except (ValueError, KeyError, TypeError) as exc:
            raise TransientError(f"{what}: unreadable status", raw=resp.content) from exc
        state = _STATES.get(status)
        if state is None:
            raise TransientError(f"{what}: unknown status {status!r}", raw=resp.content)
        error = None
        if state == "completed":
            self._held[upstream_id] = resp.content
            self._held.move_to_end(upstream_id)
            while len(self._held) > _HELD:
                self._held.popitem(last=False)
        elif state == "failed":
            error = _failure(data)
        return PollResult(state, upstream_id, error=error)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        raw = self._held.pop(upstream_id, None)
        if raw is None:
            what = f"{self.platform} cloro result {upstream_id}"
            resp = await self._get_task(upstream_id, what)
            if resp.status_code != 200:
                raise status_error(resp, what=what, not_found_is_missing=True)
            raw = resp.content
        evidence = self.parse_result(upstream_id, request, raw)
        return await self._with_html(evidence, raw)

    async def _with_html(self, evidence: Evidence, raw: bytes) -> Evidence:
        """The rendered page behind ``html`` (a URL that expires 24 h after completion, research
        §2.1 "ChatGPT result fields"), fetched now so it is archived with the answer (evidence,
        R20) before the vendor's URL expires. An expired or unreachable page is a warning on
        the evidence, never a failed answer."""
        try:
            url = json.loads(raw)["response"].get("html")
        except (ValueError, KeyError, TypeError, AttributeError):
            return evidence
        if not isinstance(url, str) or not url:
            return evidence
        try:
            resp = await self.client.get(url, timeout=self.read_timeout)
        except httpx.HTTPError as exc:
            return replace(evidence, warnings=(*evidence.warnings, f"HTML_UNFETCHED:{exc!r}"[:160]))
        if resp.status_code != 200:
            return replace(
                evidence, warnings=(*evidence.warnings, f"HTML_UNFETCHED:{resp.status_code}")
            )
        return replace(evidence, page_html=resp.content)

    def parse_result(self, upstream_id: str, request: SubmitRequest, raw: bytes) -> Evidence:
        """A task body (``GET /v1/async/task/{id}``) as evidence, from bytes alone: also how an
        archived raw body is re-parsed after a parser fix (R13)."""
        what = f"{self.platform} cloro result {upstream_id}"
        try:
            data = json.loads(raw)
            status = data["task"]["status"]
            if status == "FAILED":
                raise UpstreamFailed(f"{what}: {_failure(data)}", raw=raw)
            if status != "COMPLETED":
                raise TransientError(f"{what}: not completed yet ({status})")
            result = data["response"]
            text = result.get("markdown") or result["text"]
            if not isinstance(text, str):
                raise TypeError("text is not a string")
            citations = tuple(
                Citation(
                    url=str(s["url"]),
                    relation="cited",
                    id=None if s.get("position") is None else str(s["position"]),
                    title=s.get("label"),
                )
                for s in result.get("sources") or []
            )
            queries = result.get("searchQueries") or []
            charged = (data.get("credits") or {}).get("creditsCharged")
            credits = None if charged is None else int(charged)
        except (UpstreamFailed, TransientError):
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Unparseable(f"{what}: {exc!r}", status=200, raw=raw) from exc
        warnings: list[str] = []
        if not citations and len(str(result.get("text") or "")) < REFUSAL_MAX_CHARS:
            warnings.append("REFUSAL_SUSPECTED")  # billed all the same (research §2.1)
        if request.screenshot:
            warnings.append("SCREENSHOT_UNAVAILABLE")
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=text,
            raw_body=raw,
            raw_mime_type="application/json",
            captured_at=datetime.now(UTC),
            citations=citations,
            screenshot=(
                Attachment("screenshot", "unavailable", reason="unsupported")
                if request.screenshot
                else None
            ),
            warnings=tuple(warnings),
            # The fan-out: the consumer product searched when it listed search queries.
            web_search_used=bool(queries),
            search_queries=tuple(str(q) for q in queries),
            # research §2.1 "Poll": credits.creditsCharged, set once the task is terminal.
            vendor_credits=credits,
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "unavailable", reason="unsupported")

    async def cancel(self, upstream_id: str) -> CancelResult:
        """cloro cannot cancel one task (``DELETE /v1/async/queue`` empties the organisation's
        whole queue); the local intent is recorded and the task runs (and bills) on."""
        return CancelResult(
            upstream_cancelled=False,
            detail="cloro cannot cancel one task: only the whole queue can be emptied",
        )

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        raise NoStatementApi(
            f"{self.platform}: cloro publishes no per-task fee statement; each task's "
            "credits.creditsCharged is in its raw body"
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()


def _error_code(resp: httpx.Response) -> str | None:
    try:
        return str(resp.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def _failure(data: Any) -> str:
    try:
        err = data["response"]["error"]
        return f"{err.get('code')}: {err.get('message')}"
    except (KeyError, TypeError, AttributeError):
        return "FAILED"
