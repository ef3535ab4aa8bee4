"""DataForSEO LLM Scraper (ChatGPT): ``task_post`` -> ``tasks_ready`` -> ``task_get/advanced``
(``access: scraped``; research on answer services §2.2).

Truths this connector keeps (docs/design.md section 9):
- **Errors inside HTTP 200, at two levels (R13).** Every answer has a ``status_code`` at the top
  and one per task; both are classified: 20000/20100 ok, 40601/40602 pending, 40103 failed,
  40102 no results, 40202/40209 rate limited, 40205/40206 duplicate-task limits, 401xx/40200
  no permission, 40501 invalid field, 40401/40403 not found / expired, 5xxxx transient.
- **No idempotency key.** Our key (``sample_id:attempt_no``) travels as the task's ``tag``. After
  an unknown outcome the worker looks the tag up (``lookup``): first ``tasks_ready`` (done, not
  collected), then ``id_list`` (every task created in a time window, with its POST metadata). A
  look-up that cannot prove absence raises (``LookupInconclusive``, or the rate limit of
  ``id_list``) and the sample stays ``uncertain``: never a blind re-send. The worker believes
  "absent" only after the quiet period since the send (docs/design.md section 8).
- **Billed at task_post** (``retry_fee_rule: charged``); results kept 30 days.
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from geo_pipeline.connectors.base import (
    Acceptance,
    AcceptanceUnknown,
    Attachment,
    CancelResult,
    Citation,
    ConnectorError,
    Evidence,
    FeeStatement,
    InvalidParams,
    NoPermission,
    NoStatementApi,
    NotFound,
    PollResult,
    RateLimited,
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

SCRAPER = "/v3/ai_optimization/chat_gpt/llm_scraper"
ID_LIST = "/v3/ai_optimization/id_list"
_HELD = 2048
_STAMP = "%Y-%m-%d %H:%M:%S +00:00"


class LookupInconclusive(TransientError):
    """The tag was not found, and what was searched cannot prove the task does not exist."""


def classify(code: int, message: str, what: str, raw: bytes) -> ConnectorError | None:
    """A DataForSEO status code (top level or per task) as a typed error; None when it is a
    success (20000 ok, 20100 task created)."""
    text = f"{what}: {code} {message}"
    if code in (20000, 20100):
        return None
    if code in (40202, 40209):  # per-minute rate, simultaneous requests
        return RateLimited(text, status=200, retry_after_s=60.0, raw=raw)
    if code in (40205, 40206):  # duplicate-task limits per hour / per day
        return RateLimited(text, status=200, retry_after_s=3600.0, raw=raw)
    # 40102 no results and 40103 failed share the 401xx range with the authentication codes.
    if code in (40102, 40103):
        return UpstreamFailed(text, status=200, raw=raw)
    if code in (40100, 40101, 40104, 40200, 40201, 40210):  # auth, payment, balance
        return NoPermission(text, status=200, raw=raw)
    if code in (40401, 40403):
        return NotFound(text, status=200, raw=raw)
    if 40500 <= code < 40600 or 40000 <= code < 40100:
        return InvalidParams(text, status=200, raw=raw)
    return TransientError(text, status=200, raw=raw)


def envelope(resp: httpx.Response, what: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The body and its tasks after the top-level status (an error inside HTTP 200 raises)."""
    if resp.status_code != 200:
        raise status_error(resp, what=what)
    try:
        body = resp.json()
        code = int(body["status_code"])
        message = str(body.get("status_message") or "")
    except (ValueError, KeyError, TypeError) as exc:
        raise TransientError(f"{what}: not a DataForSEO envelope", raw=resp.content) from exc
    err = classify(code, message, what, resp.content)
    if err is not None:
        raise err
    tasks = body.get("tasks") or []
    if not isinstance(tasks, list):
        raise TransientError(f"{what}: 'tasks' is not a list", raw=resp.content)
    return body, tasks


class DataForSeoConnector:
    def __init__(self, entry: PlatformEntry, client: httpx.AsyncClient | None = None):
        self.platform = entry.platform
        self.entry = entry
        self._own_client = client is None
        self.client = client or new_client()
        self.base = entry.base_url.rstrip("/")
        opts = entry.options
        self.locations: dict[str, int] = {
            k: int(v) for k, v in (opts.get("locations") or {}).items()
        }
        self.languages: dict[str, str] = dict(opts.get("languages") or {})
        self.force_web_search = bool(opts.get("force_web_search", False))
        # How far back an id_list look-up searches (an unknown outcome is looked up within the
        # worker's quiet period; a day is generous) and whether it may use id_list at all.
        self.lookup_window = timedelta(hours=float(opts.get("lookup_window_h", 24)))
        self.id_list_lookup = bool(opts.get("id_list_lookup", True))
        self.submit_timeout = timeout_from(opts, "submit_timeout_s", 30.0)
        self.read_timeout = timeout_from(opts, "read_timeout_s", 30.0)
        self._held: OrderedDict[str, bytes] = OrderedDict()
        # research §2.2 "Submit": pingback_url, a GET when the task is done, with `$id` and
        # `$tag` replaced by the task's id and tag (docs.dataforseo.com task_post). The
        # deployment's receiver URL (it carries its secret: from the environment, never
        # logged); empty = no callbacks, polling only.
        self.pingback_url = str(opts.get("pingback_url") or "")

    @property
    def callbacks_on(self) -> bool:
        """A completion callback is asked for with every task (polling is the safety net)."""
        return bool(self.pingback_url)

    def capabilities(self) -> Capabilities:
        return self.entry.capabilities

    def _headers(self) -> dict[str, str]:
        creds = api_key(self.entry)  # "login:password" (research §2.2 "Auth": HTTP Basic)
        if not creds:
            return {}
        return {"Authorization": "Basic " + base64.b64encode(creds.encode()).decode()}

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
        key = request.idempotency_key
        what = f"{self.platform} dataforseo task_post {key}"
        task = {
            "keyword": request.question,
            "location_code": self.locations.get(request.region, 2840),
            "language_code": self.languages.get(request.region, "en"),
            "tag": key,  # no idempotency key: our key is the tag we look up by
        }
        if self.force_web_search:
            task["force_web_search"] = True
        if self.pingback_url:
            sep = "&" if "?" in self.pingback_url else "?"
            task["pingback_url"] = f"{self.pingback_url}{sep}id=$id&tag=$tag"
        try:
            resp = await self.client.post(
                self.base + SCRAPER + "/task_post",
                json=[task],
                headers=self._headers(),
                timeout=self.submit_timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, sent_means_unknown=True, what=what) from exc
        _, tasks = envelope(resp, what)
        try:
            entry = tasks[0]
            code = int(entry["status_code"])
            task_id = str(entry["id"])
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            # 200 without a readable task: it may have been created (and billed) (R12).
            raise AcceptanceUnknown(f"{what}: unreadable task entry", raw=resp.content) from exc
        err = classify(code, str(entry.get("status_message") or ""), what, resp.content)
        if err is not None:
            raise err  # a per-task error at post: the task was not set, nothing billed
        return Acceptance(upstream_id=task_id, accepted_at=datetime.now(UTC))

    async def lookup(self, idempotency_key: str) -> Acceptance | None:
        """The task posted with tag ``idempotency_key``: tasks_ready first (cheap), then id_list
        over ``lookup_window_h``. None only when id_list answered in full and does not list it."""
        what = f"{self.platform} dataforseo lookup {idempotency_key}"
        resp = await self._call("GET", SCRAPER + "/tasks_ready", what)
        _, tasks = envelope(resp, what)
        for entry in tasks:
            for item in entry.get("result") or []:
                if item.get("tag") == idempotency_key:
                    return Acceptance(upstream_id=str(item["id"]))
        if not self.id_list_lookup:
            raise LookupInconclusive(
                f"{what}: not in tasks_ready, which lists only finished, uncollected tasks; "
                "id_list look-ups are off (options.id_list_lookup), so absence is unproven"
            )
        now = datetime.now(UTC)
        offset, limit = 0, 1000
        while True:
            spec = {
                "datetime_from": (now - self.lookup_window).strftime(_STAMP),
                "datetime_to": (now + timedelta(minutes=5)).strftime(_STAMP),
                "limit": limit,
                "offset": offset,
                "sort": "desc",
                "include_metadata": True,
            }
            resp = await self._call("POST", ID_LIST, what + " (id_list)", json=[spec])
            _, tasks = envelope(resp, what + " (id_list)")
            try:
                entry = tasks[0]
                err = classify(int(entry["status_code"]), "", what, resp.content)
                if err is not None:
                    raise err
                items = entry.get("result") or []
                total = int(entry.get("total_count", len(items)))
            except (IndexError, KeyError, TypeError, ValueError) as exc:
                raise LookupInconclusive(f"{what}: unreadable id_list", raw=resp.content) from exc
            for item in items:
                if (item.get("metadata") or {}).get("tag") == idempotency_key:
                    return Acceptance(upstream_id=str(item["id"]))
            offset += len(items)
            if not items or offset >= total:
                return None

    # ------------------------------------------------------------------ follow
    async def poll(self, upstream_id: str) -> PollResult:
        what = f"{self.platform} dataforseo task_get {upstream_id}"
        resp = await self._call("GET", f"{SCRAPER}/task_get/advanced/{upstream_id}", what)
        _, tasks = envelope(resp, what)
        try:
            entry = tasks[0]
            code = int(entry["status_code"])
            message = str(entry.get("status_message") or "")
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise TransientError(f"{what}: unreadable task entry", raw=resp.content) from exc
        if code in (40601, 40602):
            return PollResult("pending" if code == 40602 else "running", upstream_id)
        err = classify(code, message, what, resp.content)
        if isinstance(err, UpstreamFailed):
            # research §2.2 "Submit": billed when the task is set, whatever it ends as.
            return PollResult("failed", upstream_id, error=str(err), vendor_credits=1)
        if err is not None:
            raise err
        self._held[upstream_id] = resp.content
        self._held.move_to_end(upstream_id)
        while len(self._held) > _HELD:
            self._held.popitem(last=False)
        return PollResult("completed", upstream_id)

    async def fetch_evidence(self, upstream_id: str, request: SubmitRequest) -> Evidence:
        raw = self._held.pop(upstream_id, None)
        if raw is None:
            what = f"{self.platform} dataforseo task_get {upstream_id}"
            resp = await self._call("GET", f"{SCRAPER}/task_get/advanced/{upstream_id}", what)
            envelope(resp, what)
            raw = resp.content
        return self.parse_result(upstream_id, request, raw)

    def parse_result(self, upstream_id: str, request: SubmitRequest, raw: bytes) -> Evidence:
        what = f"{self.platform} dataforseo result {upstream_id}"
        try:
            body = json.loads(raw)
            entry = body["tasks"][0]
            code = int(entry["status_code"])
            err = classify(code, str(entry.get("status_message") or ""), what, raw)
            if err is not None:
                raise err
            result = entry["result"][0]
            text = result["markdown"]
            if not isinstance(text, str):
                raise TypeError("markdown is not text")
            cited = [
                Citation(url=str(s["url"]), relation="cited", id=str(i + 1), title=s.get("title"))
                for i, s in enumerate(result.get("sources") or [])
            ]
            retrieved = [
                Citation(url=str(s["url"]), relation="retrieved", title=s.get("title"))
                for s in result.get("search_results") or []
            ]
            fan_out = result.get("fan_out_queries") or []
        except ConnectorError:
            raise
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise Unparseable(f"{what}: {exc!r}", status=200, raw=raw) from exc
        return Evidence(
            sample_id=request.sample_id,
            upstream_id=upstream_id,
            collection_state="completed",
            answer_text=text,
            raw_body=raw,
            raw_mime_type="application/json",
            captured_at=datetime.now(UTC),
            citations=tuple(cited + retrieved),
            screenshot=(
                Attachment("screenshot", "unavailable", reason="unsupported")
                if request.screenshot
                else None
            ),
            warnings=("SCREENSHOT_UNAVAILABLE",) if request.screenshot else (),
            web_search_used=bool(fan_out) or bool(retrieved),
            # One task, billed at task_post (research §2.2 "Submit"); task_get is free.
            vendor_credits=1,
        )

    async def fetch_screenshot(self, upstream_id: str) -> Attachment:
        return Attachment("screenshot", "unavailable", reason="unsupported")

    async def cancel(self, upstream_id: str) -> CancelResult:
        return CancelResult(
            upstream_cancelled=False,
            detail="DataForSEO cannot cancel a posted task (it was billed at task_post)",
        )

    async def fee_statement(self, statement_date: str) -> FeeStatement:
        raise NoStatementApi(
            f"{self.platform}: DataForSEO bills at task_post; each task's cost is in the "
            "task_post answer and in id_list"
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()
