"""Bright Data Web Scraper API, answer-engine datasets: ``trigger`` -> ``progress`` ->
``snapshot`` (``access: scraped``; research on answer services §2.3).

Truths this connector keeps (docs/design.md section 9):
- **No idempotency key, no look-up by key.** Bright Data takes no key of ours and offers no
  dedupe (research §2.3 "Price", inf.); nothing in its snapshot list names our sample. An unknown
  outcome of a trigger (the answer lost after the request left) therefore cannot be settled by a
  look-up and is never re-sent blindly: the worker parks the sample ``uncertain`` for review
  (``acceptance_unknown:no_lookup``), because a second trigger bills a second record.
- **"building" inside HTTP 200.** ``GET /snapshot/{id}`` answers ``{status:"building"}`` until the
  data is ready; completion is read from ``progress`` (starting / running / ready / failed), and
  any status we do not know is treated as still running (research §2.3 "Poll", as Elmo does).
- **Per-record errors.** With ``include_errors=true`` a record may carry ``error``: that input
  failed (the evidence says so, with the raw record kept).
- **Cancel releases the dataset's cap.** Snapshots still collecting hold a per-dataset
  concurrency cap that eventually refuses healthy triggers with 429 (research §2.3 "Cancel is
  required"); ``cancel`` calls ``POST /datasets/v3/snapshot/{id}/cancel`` (one snapshot:
  ``cancel_scope: task``), and the worker cancels the snapshot of a sample it gives up on.
- **Billed per record** when the collection finishes; a failed snapshot or a record with
  ``error`` costs nothing (inf.), so ``retry_fee_rule: free_after_failure``. Snapshots stay
  downloadable for 30 days.
- **Search flags are unreliable.** ``web_search_triggered`` can be false on answers that did
  search; the listed queries (``web_search_query``) decide, and the disagreement is flagged.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
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
    check_request,
)
from geo_pipeline.connectors.http import new_client, status_error, timeout_from, transport_error
from geo_pipeline.connectors.registry import api_key
from geo_pipeline.domain.catalogue import PlatformEntry
from geo_pipeline.domain.platforms import Capabilities

V3 = "/datasets/v3"
_STATES: dict[str, PollState] = {
    "starting": "pending",
    "running": "running",
    "ready": "completed",
    "failed": "failed",
}
REFUSAL_MAX_CHARS = 160  # as cloro's (research §2.1 "Gotchas"): short and without sources


class BrightDataConnector:
    def __init__(self, entry: PlatformEntry, client: httpx.AsyncClient | None = None):
        self.platform = entry.platform
        self.entry = entry
        self._own_client = client is None
        self.client = client or new_client()
        self.base = entry.base_url.rstrip("/")
        opts = entry.options
        try:
            self.dataset_id = str(opts["dataset_id"])
            self.engine_url = str(opts["url"])
        except KeyError as exc:
            raise ValueError(
                f"platforms.{entry.platform}.options.{exc.args[0]}: required for protocol "
                "brightdata (the dataset id and the engine's URL, research §2.3)"
            ) from exc
        # research §2.3 "Submit": web_search for ChatGPT (and Grok) only; None = do not send.
        ws = opts.get("web_search")
        self.web_search: bool | None = None if ws is None else bool(ws)
        self.submit_timeout = timeout_from(opts, "submit_timeout_s", 30.0)
        self.read_timeout = timeout_from(opts, "read_timeout_s", 30.0)
        # docs.brightdata.com trigger: `notify`, a URL POSTed {snapshot_id, status} when the
        # collection ends. The deployment's receiver URL (it carries its secret: from the
        # environment, never logged); empty = no callbacks, polling only.
        self.notify_url = str(opts.get("notify_url") or "")

    @property
    def callbacks_on(self) -> bool:
        """A completion callback is asked for with every trigger (polling is the safety net)."""
        return bool(self.notify_url)

    def capabilities(self) -> Capabilities:
        return self.entry.capabilities

    def _headers(self) -> dict[str, str]:
        key = api_key(self.entry)
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _call(self, method: str, path: str, what: str, **kw: Any) -> httpx.Response:
        try:
            return await self.client.request(
                method, self.base + path, headers=self._headers(), timeout=self.read_timeout, **kw
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=False, what=what) from exc

    # ------------------------------------------------------------------ submit
    async def submit(self, request: SubmitRequest) -> Acceptance:
        check_request(self.entry.capabilities, request)
        what = f"{self.platform} brightdata trigger {request.idempotency_key}"
        item: dict[str, Any] = {
            "url": self.engine_url,
            "prompt": request.question,
            "country": request.region.upper(),
        }
        if self.web_search is not None:
            item["web_search"] = self.web_search
        params = {"dataset_id": self.dataset_id, "format": "json", "include_errors": "true"}
        if self.notify_url:
            params["notify"] = self.notify_url
        try:
            resp = await self.client.post(
                self.base + V3 + "/trigger",
                params=params,
                json=[item],
                headers=self._headers(),
                timeout=self.submit_timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=True, what=what) from exc
        if resp.status_code != 200:
            # 400 validation_errors / dataset missing, 401, 429 (the dataset's cap): nothing
            # was created.
            raise status_error(resp, what=what)
        try:
            snapshot_id = str(resp.json()["snapshot_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise AcceptanceUnknown(f"{what}: unreadable acceptance", raw=resp.content) from exc
        return Acceptance(upstream_id=snapshot_id, accepted_at=datetime.now(UTC))

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        raise NotImplementedError(
            f"{self.platform}: Bright Data takes no key of ours; a snapshot cannot be found by it"
        )

    # ------------------------------------------------------------------ follow
    async def poll(self, upstream_id: str) -> PollResult:
        what = f"{self.platform} brightdata progress {upstream_id}"
        resp = await self._call("GET", f"{V3}/progress/{upstream_id}", what)
        if resp.status_code != 200:
            # 404: unknown, or past the 30 days a snapshot is kept.
            raise status_error(resp, what=what, not_found_is_missing=True)
        try:
            data = resp.json()
            status = str(data["status"])
        except (ValueError, KeyError, TypeError) as exc:
            raise TransientError(f"{what}: unreadable progress", raw=resp.content) from exc
        # research §2.3 "Poll": an unknown status is still running (Elmo does the same).
        state = _STATES.get(status, "running")
        if state == "failed":
            return PollResult("failed", upstream_id, error=str(data.get("error_message") or ""))
        return PollResult(state, upstream_id)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        what = f"{self.platform} brightdata snapshot {upstream_id}"
        resp = await self._call(
            "GET", f"{V3}/snapshot/{upstream_id}", what, params={"format": "json"}
        )
        if resp.status_code != 200:
            raise status_error(resp, what=what, not_found_is_missing=True)
        try:
            body = resp.json()
        except ValueError as exc:
            raise Unparseable(f"{what}: not JSON", status=200, raw=resp.content) from exc
        if isinstance(body, dict) and body.get("status") == "building":
            # research §2.3 "Fetch": HTTP 200 "building" until ready -- not an answer.
            raise TransientError(f"{what}: still building", retry_after_s=10.0)
        return self.parse_result(upstream_id, request, resp.content)

    def parse_result(self, upstream_id: str, request: SubmitRequest, raw: bytes) -> Evidence:
        """A snapshot body (a JSON list of one record per input) as evidence, from bytes alone:
        also how an archived raw body is re-parsed after a parser fix (R13)."""
        what = f"{self.platform} brightdata record {upstream_id}"
        try:
            records = json.loads(raw)
            if not isinstance(records, list) or not records:
                raise TypeError("a snapshot is a non-empty list of records")
            record = records[0]
            if record.get("error"):
                return self._failed(upstream_id, request, raw, str(record["error"]))
            text = record.get("answer_text_markdown") or record["answer_text"]
            if not isinstance(text, str):
                raise TypeError("answer_text is not text")
            citations = tuple(
                Citation(
                    url=str(c["url"]),
                    relation="cited",
                    id=None if c.get("position") is None else str(c["position"]),
                    title=c.get("title"),
                )
                for c in record.get("citations") or []
            )
            queries = tuple(
                str(q)
                for q in (
                    record.get("web_search_query")
                    or (record.get("metadata") or {}).get("search_model_queries")
                    or []
                )
            )
            flag = record.get("web_search_triggered")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Unparseable(f"{what}: {exc!r}", status=200, raw=raw) from exc
        warnings: list[str] = []
        if queries and flag is False:
            # research §2.3 "Search flags are unreliable": the queries decide.
            warnings.append("SEARCH_FLAG_DISAGREES")
        if not citations and len(str(record.get("answer_text") or text)) < REFUSAL_MAX_CHARS:
            warnings.append("REFUSAL_SUSPECTED")
        if request.screenshot:
            warnings.append("SCREENSHOT_UNAVAILABLE")
        html = record.get("answer_html")
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
            web_search_used=bool(queries) or flag is True,
            search_queries=queries,
            page_html=html.encode("utf-8") if isinstance(html, str) and html else None,
            vendor_credits=1,  # research §2.3 "Price": billed per record
        )

    def _failed(self, upstream_id: str, request: SubmitRequest, raw: bytes, error: str) -> Evidence:
        """A record with ``error``: the input failed upstream (R13 upstream_failed)."""
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="failed",
            answer_text="",
            raw_body=raw,
            raw_mime_type="application/json",
            captured_at=datetime.now(UTC),
            warnings=(f"RECORD_ERROR:{error[:120]}",),
            vendor_credits=0,  # an errored input is not a collected record (inf.)
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "unavailable", reason="unsupported")

    async def cancel(self, upstream_id: str) -> CancelResult:
        """``POST /datasets/v3/snapshot/{id}/cancel`` (docs.brightdata.com, cancel-snapshot):
        releases the dataset's concurrency slot the snapshot holds."""
        what = f"{self.platform} brightdata cancel {upstream_id}"
        resp = await self._call("POST", f"{V3}/snapshot/{upstream_id}/cancel", what)
        if resp.status_code != 200:
            raise status_error(resp, what=what, not_found_is_missing=True)
        return CancelResult(upstream_cancelled=True, detail="snapshot cancelled")

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        raise NoStatementApi(
            f"{self.platform}: Bright Data bills per record from the account balance; no "
            "per-snapshot fee statement is read through this API"
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()
