"""Connector for the asynchronous task API of the platform simulator (docs/simulator.md).

It is also the template for any real platform with a task API: submit with an idempotency key,
poll, fetch the result and the screenshot separately, look up by key, cancel, daily statements.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

import httpx

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
    Attachment,
    CancelResult,
    Citation,
    ConnectorError,
    Evidence,
    FeeLine,
    FeeStatement,
    NotFound,
    PollResult,
    SubmitRequest,
    TransientError,
    Unparseable,
    UpstreamFailed,
    check_request,
)
from geo_pipeline.connectors.http import (
    exchange_of,
    new_client,
    status_error,
    timeout_from,
    transport_error,
)
from geo_pipeline.connectors.registry import api_key
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.domain.usage import Usage

_POLL_STATES = ("pending", "running", "completed", "failed")
# Results that came with a poll and wait for fetch_evidence (normally the very next call). A
# bound, not a store: a result that fell out (the sample was let go in between) is fetched again.
_HELD_RESULTS = 2048


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


class SimulatorConnector:
    """All HTTP goes through the shared pooled ``httpx.AsyncClient``; each call has its own
    timeout (``options.submit_timeout_s``, ``options.read_timeout_s``). The API key, when the
    registry names ``api_key_env``, is read from the environment per request and never logged."""

    def __init__(self, entry: PlatformEntry, client: httpx.AsyncClient | None = None):
        self.platform = entry.platform
        self.entry = entry
        self._own_client = client is None
        self.client = client or new_client()
        base = entry.base_url.rstrip("/")
        self.base = f"{base}/v1/{entry.platform}"
        self.submit_timeout = timeout_from(entry.options, "submit_timeout_s", 10.0)
        self.read_timeout = timeout_from(entry.options, "read_timeout_s", 10.0)
        # Poll with ``?include=result``: a finished task's poll carries the result, so a sample
        # costs submit + poll instead of submit + poll + result (options.poll_includes_result).
        self.poll_includes_result = bool(entry.options.get("poll_includes_result", True))
        self._held: OrderedDict[str, tuple[bytes, str]] = OrderedDict()

    def capabilities(self) -> Capabilities:
        return self.entry.capabilities

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        key = api_key(self.entry)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def _get(self, path: str, what: str) -> httpx.Response:
        try:
            return await self.client.get(
                self.base + path, headers=self._headers(), timeout=self.read_timeout
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=False, what=what) from exc

    @staticmethod
    def _json(resp: httpx.Response, what: str) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise TransientError(f"{what}: the response is not a JSON object", raw=resp.content)
        return body

    # ------------------------------------------------------------------ contract
    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self.entry.capabilities, request)
        what = f"{self.platform} submit {request.idempotency_key}"
        body = {
            "question": request.question,
            "device": request.device,
            "region": request.region,
            "mode": request.mode,
            "screenshot": request.screenshot,
            "tenant": request.tenant_id,
        }
        try:
            resp = await self.client.post(
                self.base + "/tasks",
                json=body,
                headers=self._headers({"Idempotency-Key": request.idempotency_key}),
                timeout=self.submit_timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=True, what=what) from exc
        if resp.status_code not in (200, 201, 202):
            raise status_error(resp, what=what)
        try:
            data = resp.json()
            task_id = str(data["task_id"])
        except (ValueError, KeyError, TypeError) as exc:
            # A success status without a readable id: accepted or not, we cannot tell (R12).
            raise AcceptanceUnknown(f"{what}: unreadable acceptance", raw=resp.content) from exc
        return Acceptance(upstream_id=task_id, accepted_at=parse_time(data.get("accepted_at")))

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        what = f"{self.platform} lookup {idempotency_key}"
        try:
            resp = await self.client.get(
                self.base + "/tasks",
                params={"idempotency_key": idempotency_key},
                headers=self._headers(),
                timeout=self.read_timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=False, what=what) from exc
        if resp.status_code == 404:
            return None  # verified absent: safe to submit this attempt (again)
        if resp.status_code != 200:
            raise status_error(resp, what=what)
        data = self._json(resp, what)
        if "task_id" not in data:
            raise TransientError(f"{what}: no task_id in the lookup answer", raw=resp.content)
        return Acceptance(str(data["task_id"]), parse_time(data.get("accepted_at")))

    async def poll(self, upstream_id: str) -> PollResult:
        what = f"{self.platform} poll {upstream_id}"
        if self.poll_includes_result:
            resp = await self._get(f"/tasks/{upstream_id}?include=result", what)
            if resp.status_code != 200:
                raise status_error(resp, what=what, not_found_is_missing=True)
            try:
                data = resp.json()
            except ValueError:
                data = None
            if isinstance(data, dict):
                state = data.get("status")
                if state not in _POLL_STATES:
                    raise TransientError(f"{what}: unknown status {state!r}", raw=resp.content)
                if state == "completed":
                    self._hold(upstream_id, resp)
                return PollResult(state=state, upstream_id=upstream_id, error=data.get("error"))
            # Not JSON: a finished task whose result is broken reads the same as a broken poll.
            # The plain status poll tells them apart; the result is then fetched (and kept raw
            # if it is unparseable, R13) as without this option.
        resp = await self._get(f"/tasks/{upstream_id}", what)
        if resp.status_code != 200:
            raise status_error(resp, what=what, not_found_is_missing=True)
        data = self._json(resp, what)
        state = data.get("status")
        if state not in _POLL_STATES:
            raise TransientError(f"{what}: unknown status {state!r}", raw=resp.content)
        return PollResult(state=state, upstream_id=upstream_id, error=data.get("error"))

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        """The answer with its raw body exactly as received (R17, R19). The screenshot is
        reported by status only; its bytes come from ``fetch_screenshot`` on the screenshot
        stream, so a slow picture never holds up the text (R10, R21)."""
        held = self._held.pop(upstream_id, None)
        if held is not None:
            return self.parse_result(upstream_id, request, *held)
        what = f"{self.platform} result {upstream_id}"
        resp = await self._get(f"/tasks/{upstream_id}/result", what)
        if resp.status_code == 409:
            status = None
            try:
                status = resp.json()["error"].get("status")
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
            if status == "failed":
                raise UpstreamFailed(f"{what}: the task failed upstream", status=409)
            raise TransientError(f"{what}: not completed yet ({status})", status=409)
        if resp.status_code != 200:
            raise status_error(resp, what=what, not_found_is_missing=True)
        evidence = self.parse_result(
            upstream_id, request, resp.content, resp.headers.get("content-type", "")
        )
        return replace(evidence, exchange=exchange_of(resp))  # kept as WARC request/response

    def _hold(self, upstream_id: str, resp: httpx.Response) -> None:
        self._held[upstream_id] = (resp.content, resp.headers.get("content-type", ""))
        self._held.move_to_end(upstream_id)
        while len(self._held) > _HELD_RESULTS:
            self._held.popitem(last=False)

    def parse_result(
        self, upstream_id: str, request: SubmitRequest, raw: bytes, content_type: str = ""
    ) -> Evidence:
        """A result body as ``fetch_evidence`` reads it, from bytes alone: also how archived raw
        bodies are re-parsed after a parser fix, without asking the platform again (R13)."""
        what = f"{self.platform} result {upstream_id}"
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise TypeError("not an object")
            answer = data["answer"]
            if not isinstance(answer, str):
                raise TypeError("answer is not text")
            citations = [
                Citation(
                    url=str(c["url"]),
                    relation="cited",
                    id=None if c.get("id") is None else str(c["id"]),
                    title=c.get("title"),
                )
                for c in data.get("citations") or []
            ]
            citations += [
                Citation(url=str(c["url"]), relation="retrieved", title=c.get("title"))
                for c in data.get("search_results") or []
            ]
            usage = data.get("usage") or {}
            tokens_used = (
                Usage(
                    input_tokens=usage["input_tokens"],
                    output_tokens=usage["output_tokens"],
                    total_tokens=usage["input_tokens"] + usage["output_tokens"],
                    web_search_requests=usage.get("web_search_requests"),
                    source="usage",
                )
                if "input_tokens" in usage
                else None
            )
            shot = data.get("screenshot") or {"status": "unavailable", "reason": "not_reported"}
        except (ValueError, KeyError, TypeError) as exc:
            raise Unparseable(f"{what}: {exc}", status=200, raw=raw) from exc
        warnings: list[str] = []
        attachment = None
        if request.screenshot:
            reported = shot.get("status")
            shot_status: Literal["available", "pending", "unavailable"] = (
                reported if reported in ("available", "pending") else "unavailable"
            )
            attachment = Attachment("screenshot", shot_status, reason=shot.get("reason"))
            if shot_status == "pending":
                warnings.append("SCREENSHOT_PENDING")
            elif shot_status == "unavailable":
                warnings.append("SCREENSHOT_UNAVAILABLE")
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=answer,
            raw_body=raw,
            raw_mime_type=(content_type or "application/json").split(";")[0],
            captured_at=parse_time(data.get("completed_at")) or datetime.now(UTC),
            citations=tuple(citations),
            screenshot=attachment,
            warnings=tuple(warnings),
            provider_truncated=bool(data.get("truncated")),
            deep_thinking_used=bool(usage.get("deep_thinking")),
            web_search_used=bool(usage.get("web_search")),
            screenshot_used=attachment is not None and attachment.status != "unavailable",
            usage=tokens_used,
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        what = f"{self.platform} screenshot {upstream_id}"
        resp = await self._get(f"/tasks/{upstream_id}/screenshot", what)
        if resp.status_code == 200:
            mime = resp.headers.get("content-type", "").split(";")[0]
            if mime != "image/png" or not resp.content.startswith(b"\x89PNG"):
                raise TransientError(f"{what}: not a PNG ({mime})", raw=resp.content[:256])
            return Attachment("screenshot", "available", data=resp.content, mime_type=mime)
        if resp.status_code == 202:
            return Attachment("screenshot", "pending")
        if resp.status_code in (404, 410):
            reason = "gone" if resp.status_code == 410 else "not_found"
            try:
                reason = resp.json()["error"].get("reason") or reason
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
            return Attachment("screenshot", "unavailable", reason=reason)
        raise status_error(resp, what=what)

    async def cancel(self, upstream_id: str) -> CancelResult:
        """Local intent is what counts (R16, R24); upstream may or may not stop."""
        what = f"{self.platform} cancel {upstream_id}"
        try:
            resp = await self.client.post(
                self.base + f"/tasks/{upstream_id}/cancel",
                headers=self._headers(),
                timeout=self.read_timeout,
            )
        except httpx.HTTPError as exc:
            err = transport_error(exc, sent_means_unknown=False, what=what)
            return CancelResult(upstream_cancelled=False, detail=str(err))
        if resp.status_code != 200:
            return CancelResult(upstream_cancelled=False, detail=str(status_error(resp, what=what)))
        try:
            data = resp.json()
        except ValueError:
            return CancelResult(upstream_cancelled=False, detail=f"{what}: unreadable answer")
        return CancelResult(
            upstream_cancelled=bool(data.get("cancelled")), detail=str(data.get("reason") or "")
        )

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        what = f"{self.platform} statement {statement_date}"
        resp = await self._get(f"/statements/{statement_date}", what)
        if resp.status_code != 200:
            raise status_error(resp, what=what)
        try:
            data = resp.json()
            lines = tuple(
                FeeLine(
                    upstream_id=str(line["upstream_id"]),
                    item=str(line["item"]),
                    amount_minor=_int(line["amount_minor"]),
                    currency=str(line["currency"]),
                    price_version=line.get("price_version"),
                    charged_at=parse_time(line.get("charged_at")),
                )
                for line in data["lines"]
            )
            return FeeStatement(
                platform=self.platform,
                statement_date=str(data.get("date") or statement_date),
                currency=str(data["currency"]),
                lines=lines,
                raw=resp.content,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise Unparseable(f"{what}: {exc}", raw=resp.content) from exc

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()


def _int(value: Any) -> int:
    # Money is integer minor units (R23): a float or a string amount is a broken statement.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"amount_minor must be an integer, got {value!r}")
    return value


__all__ = ["ConnectorError", "NotFound", "SimulatorConnector", "parse_time"]
