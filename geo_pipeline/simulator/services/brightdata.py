"""Bright Data's Web Scraper API (datasets v3) as the simulator imitates it, for the consumer
answer engines it scrapes (ChatGPT, Perplexity, Copilot, Gemini, Google AI Mode): ``trigger`` ->
``progress`` -> ``snapshot``, ``cancel``.

Every behaviour names its source. "research §2.3 <bullet>" is the project's research note on
answer services (section 2.3, Bright Data: elmo's registry/brightdata.ts, github.com/brightdata/
sdk-python, docs.brightdata.com); "docs <page>" is a docs.brightdata.com page re-read for this
profile (2026-12): api-reference/web-scraper-api/management-apis/cancel-snapshot (``POST
/datasets/v3/snapshot/{id}/cancel`` answers ``OK`` as text/plain), .../management-apis/get-snapshots
(``GET /datasets/v3/snapshots?dataset_id=&status=&skip=&limit=&from_date=&to_date=``),
api-reference/errors (the "building" and "failed" bodies, "Account is suspended"),
products/scrapers/scrapers-library/async-requests (snapshots downloadable 30 days after the
collection finished) and datasets/scrapers/concepts/sync-vs-async (async concurrency: 100).

Reproduced: ``Authorization: Bearer``; ``POST /datasets/v3/trigger?dataset_id=&format=json&
include_errors=true`` with a JSON list of inputs ``{url, prompt, country, web_search,
additional_prompt, index}`` answering ``{snapshot_id}``; 400 ``{validation_errors}`` and "dataset
missing"; a per-dataset cap on snapshots still collecting (starting/running), released only when
a snapshot ends or is cancelled, answering 429 beyond it (research §2.3 "Cancel is required");
``GET /datasets/v3/progress/{id}`` with starting / running / ready / failed (+ ``error_message``);
``GET /datasets/v3/snapshot/{id}`` answering HTTP 200 ``{status:"building", message}`` until
ready (research §2.6 "Per-vendor envelopes"), then the records, each possibly carrying its own
``error``; billing per record when the collection finishes (research §2.3 "Price": every record
is billed; none for a record with ``error``, nor when the snapshot failed or was cancelled
before it finished, inf.); snapshots
that never finish unless cancelled ("stuck"); ``web_search_triggered`` false on answers that did
search (research §2.3 "Search flags are unreliable"); canned refusals; answers lost after the
snapshot was created; 30 days of retention, then 404.
``notify`` (docs api-reference trigger: a URL POSTed ``{snapshot_id, status}`` when the collection
ends): sent once on the service clock, sometimes lost or duplicated (``notify_lost_rate``,
``notify_duplicate_rate``; simulator.services.callbacks); a stuck snapshot never notifies.
Not reproduced: the sync ``/scrape`` endpoint, ``endpoint`` (data delivered by webhook),
``/input`` and ``rerun``, another session's search metadata in a record, CSV/NDJSON formats,
the SERP API.

Bright Data takes no idempotency key (research §2.3 "Price": no idempotency or dedupe feature
found, inf.), so the simulator counts per *input* (``country|prompt``): tests give every sample
its own prompt and judge "never triggered twice" from these counts, not from our database.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from geo_pipeline.domain.platforms import PriceList
from geo_pipeline.simulator.answers import generate_answer, unit
from geo_pipeline.simulator.profiles import Profile
from geo_pipeline.simulator.services import persist
from geo_pipeline.simulator.services.callbacks import CallbackLoop, Delivery

PREFIX = "/brightdata"
V3 = PREFIX + "/datasets/v3"
MONTH_S = 30 * 24 * 3600.0  # docs async-requests: snapshots downloadable for 30 days
# research §2.3 "Dataset ids".
DATASETS = {
    "gd_m7aof0k82r803d5bjm": ("chatgpt", "https://chatgpt.com/"),
    "gd_m7dhdot1vw9a7gc1n": ("perplexity", "https://www.perplexity.ai/"),
    "gd_m7di5jy6s9geokz8w": ("copilot", "https://copilot.microsoft.com/"),
    "gd_mbz66arm2mf9cu856y": ("gemini", "https://gemini.google.com/"),
    "gd_mcswdt6z2elth3zqr2": ("google_ai_mode", "https://www.google.com/"),
}
# research §2.3 "Search flags are unreliable": web_search exists for ChatGPT and Grok only.
WEB_SEARCH_SURFACES = ("chatgpt",)
_INPUT_FIELDS = {"url", "prompt", "country", "web_search", "additional_prompt", "index"}
MODELS = {"chatgpt": "gpt-5", "perplexity": "sonar", "gemini": "gemini-2.5-flash"}


@dataclass(frozen=True)
class BrightDataProfile:
    """What the imitated Bright Data account does. Rates are probabilities, durations seconds."""

    api_key: str = "sim-brightdata-key"
    starting_s: tuple[float, float] = (0.02, 0.08)  # status 'starting'
    running_s: tuple[float, float] = (0.05, 0.2)  # then 'running' until 'ready'
    fail_rate: float = 0.0  # the snapshot ends 'failed' with an error_message (nothing billed)
    record_error_rate: float = 0.0  # a record carries its own `error` (not billed, inf.)
    refusal_rate: float = 0.0  # a canned refusal: short answer, no citations
    stuck_rate: float = 0.0  # the snapshot stays 'running' until cancelled
    lost_rate: float = 0.0  # the snapshot is created but the trigger's answer never arrives
    search_flag_wrong_rate: float = 0.0  # searched, yet web_search_triggered: false
    concurrency_cap: int = 100  # docs sync-vs-async: 100 concurrent async requests
    retention_s: float = MONTH_S
    # docs trigger `notify`: a notification that never arrives, and one that arrives twice
    # (inf.: delivery is not guaranteed; the client's polling is the safety net).
    notify_lost_rate: float = 0.0
    notify_duplicate_rate: float = 0.0

    def with_overrides(self, overrides: Mapping[str, Any]) -> BrightDataProfile:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(
                f"brightdata: unknown profile key(s) {sorted(unknown)}; known: {sorted(known)}"
            )
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            current = getattr(self, key)
            if isinstance(current, tuple):
                lo, hi = (float(v) for v in value)
                if not 0 <= lo <= hi:
                    raise ValueError(
                        f"brightdata.{key}: {value!r} is not a range [lo, hi] with 0 <= lo <= hi"
                    )
                changes[key] = (lo, hi)
            elif isinstance(current, bool) or isinstance(current, str):
                changes[key] = type(current)(value)
            elif isinstance(current, int):
                whole = int(value)
                if whole < 0:
                    raise ValueError(f"brightdata.{key}: {value!r} must be >= 0")
                changes[key] = whole
            else:
                number = float(value)
                if key.endswith("_rate") and not 0.0 <= number <= 1.0:
                    raise ValueError(f"brightdata.{key}: {value!r} is not a probability in [0, 1]")
                changes[key] = number
        return dataclasses.replace(self, **changes)


@dataclass
class Snapshot:
    id: str
    dataset_id: str
    surface: str
    inputs: list[dict[str, Any]]
    created_wall: datetime
    created: float
    running_at: float
    ready_at: float | None  # None: stuck, never finishes unless cancelled
    fails: bool
    cancelled_at: float | None = None
    fetched: int = 0  # record bodies served
    salt: str = ""
    errors_at: set[int] = field(default_factory=set)
    notify_url: str | None = None
    notified: bool = False

    def status(self, now: float) -> str:
        if self.cancelled_at is not None and (
            self.ready_at is None or self.cancelled_at < self.ready_at
        ):
            # docs cancel-snapshot: "cancel the running collection" (inf.: it then reads failed).
            return "cancelled"
        if now < self.running_at:
            return "starting"
        if self.ready_at is None or now < self.ready_at:
            return "running"
        return "failed" if self.fails else "ready"

    def collecting(self, now: float) -> bool:
        return self.status(now) in ("starting", "running")

    def billed_records(self, now: float) -> int:
        # research §2.3 "Price": every record is billed, when the collection has produced it.
        # A record carrying `error` is a failed input, not a collected record: not billed (inf.;
        # the sources name no charge for it -- check against a real invoice).
        if self.status(now) != "ready":
            return 0
        return len(self.inputs) - len(self.errors_at)


_SNAP_CLOCKS = ("running_at", "ready_at", "cancelled_at")
_SNAP_TIMES = ("created", "created_wall", _SNAP_CLOCKS)
_SNAP_KW: dict[str, Any] = {
    "anchor": "created",
    "anchor_wall": "created_wall",
    "clocks": _SNAP_CLOCKS,
}


def _iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def input_key(item: Mapping[str, Any]) -> str:
    """How the simulator counts an input: Bright Data takes no key of ours."""
    return f"{str(item.get('country') or '').upper()}|{item.get('prompt')}"


class BrightDataService:
    def __init__(self, seed: int, profile: Mapping[str, Any] | None = None) -> None:
        self.seed = seed
        self.initial = BrightDataProfile().with_overrides(profile or {})
        self.write: persist.Write | None = None  # the --state-file journal, when there is one
        self.callbacks = CallbackLoop(seed, self._due_callbacks, self._callback_rates)
        self.reset()

    def reset(self) -> None:
        self.profile = self.initial
        self.offset = 0.0
        self.snapshots: dict[str, Snapshot] = {}
        self.expired: dict[str, Snapshot] = {}
        self.triggers: Counter[str] = Counter()  # input key -> trigger calls carrying it
        self.created: dict[str, list[str]] = defaultdict(list)  # input key -> snapshot ids
        self.cancels: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.seq = 0
        if hasattr(self, "callbacks"):
            self.callbacks.reset()

    def now(self) -> float:
        return time.monotonic() + self.offset

    def wall(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    # ------------------------------------------------------------------ wiring
    def mount(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.post(V3 + "/trigger", self.trigger),
                web.get(V3 + "/progress/{sid}", self.progress),
                web.get(V3 + "/snapshot/{sid}", self.snapshot),
                web.post(V3 + "/snapshot/{sid}/cancel", self.cancel),
                web.get(V3 + "/snapshots", self.list_snapshots),
                web.post("/_control/services/brightdata/profile", self.control_profile),
                web.post("/_control/services/brightdata/advance", self.control_advance),
                web.get("/_control/services/brightdata/stats", self.control_stats),
                web.post("/_control/services/brightdata/reset", self.control_reset),
            ]
        )
        self.callbacks.mount(app)

    def _callback_rates(self) -> tuple[float, float]:
        return self.profile.notify_lost_rate, self.profile.notify_duplicate_rate

    def _due_callbacks(self) -> list[Delivery]:
        """Snapshots that ended (ready or failed; not cancelled) and asked for ``notify``."""
        now = self.now()
        out: list[Delivery] = []
        for snap in list(self.snapshots.values()):
            if snap.notified or not snap.notify_url:
                continue
            status = snap.status(now)
            if status not in ("ready", "failed"):
                continue
            snap.notified = True
            body = {"snapshot_id": snap.id, "status": status}
            out.append(Delivery(snap.id, "POST", snap.notify_url, body))
        return out

    def _fail(self, status: int, body: Any, kind: str) -> web.Response:
        self.requests[f"{kind}:{status}"] += 1
        if isinstance(body, str):
            return web.Response(status=status, text=body)
        return web.json_response(body, status=status)

    def _auth(self, request: web.Request, kind: str) -> web.Response | None:
        # research §2.3 "Submit": a Bearer token.
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or header[7:].strip() != self.profile.api_key:
            return self._fail(401, {"error": "Unauthorized"}, kind)
        return None

    def _expire(self, now: float) -> None:
        # docs async-requests: a finished snapshot can be downloaded for 30 days.
        for sid in [
            s.id
            for s in self.snapshots.values()
            if s.ready_at is not None and now >= s.ready_at + self.profile.retention_s
        ]:
            self.expired[sid] = self.snapshots.pop(sid)

    def _find(self, request: web.Request, kind: str) -> Snapshot | web.Response:
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        self._expire(self.now())
        snap = self.snapshots.get(request.match_info["sid"])
        if snap is None:
            return self._fail(404, "Snapshot not found", kind)
        return snap

    # ------------------------------------------------------------------ vendor API
    async def trigger(self, request: web.Request) -> web.Response:
        kind = "trigger"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        dataset_id = request.query.get("dataset_id", "")
        if dataset_id not in DATASETS:
            # research §2.3 "Errors": "dataset missing".
            return self._fail(400, {"error": "dataset missing"}, kind)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return self._fail(400, {"validation_errors": ["body is not JSON"]}, kind)
        problems = self._validate(body, DATASETS[dataset_id][0])
        if problems:
            # research §2.3 "Errors": 400 {validation_errors}.
            return self._fail(400, {"validation_errors": problems}, kind)
        now = self.now()
        self._expire(now)
        keys = [input_key(item) for item in body]
        for key in keys:
            self.triggers[key] += 1
        busy = sum(
            1 for s in self.snapshots.values() if s.dataset_id == dataset_id and s.collecting(now)
        )
        if busy >= self.profile.concurrency_cap:
            # research §2.3 "Cancel is required": abandoned snapshots hold the per-dataset cap,
            # "which eventually 429s even healthy triggers".
            return self._fail(
                429,
                {"error": "Too many running jobs", "running": busy},
                kind,
            )
        snap = self._new(dataset_id, body, now)
        snap.notify_url = request.query.get("notify") or None
        self._index(snap)
        self.journal({"op": "snapshot", **persist.dump(snap, *_SNAP_TIMES)})
        self.requests[f"{kind}:200"] += 1
        draw = f"{keys[0]}#{self.triggers[keys[0]]}"
        if unit(self.seed, draw, "bd-lost") < self.profile.lost_rate:
            # Created upstream, but the client never hears so (R12's "uncertain").
            self.requests[f"{kind}:lost"] += 1
            await asyncio.sleep(0)
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=599)
        # research §2.3 "Submit": it returns {snapshot_id}.
        return web.json_response({"snapshot_id": snap.id})

    def _validate(self, body: Any, surface: str) -> list[str]:
        if not isinstance(body, list) or not body:
            return ["body: expected a non-empty JSON list of inputs"]
        problems: list[str] = []
        for i, item in enumerate(body):
            if not isinstance(item, dict):
                problems.append(f"[{i}]: expected an object")
                continue
            for name in sorted(set(item) - _INPUT_FIELDS):
                problems.append(f"[{i}].{name}: unknown input field")
            if not isinstance(item.get("url"), str) or not item["url"].startswith("https://"):
                problems.append(f"[{i}].url: required, the engine's URL")
            if not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
                problems.append(f"[{i}].prompt: required")
            country = item.get("country", "")
            if country and (not isinstance(country, str) or len(country) != 2):
                problems.append(f"[{i}].country: an ISO-2 code")
            if "web_search" in item and surface not in WEB_SEARCH_SURFACES:
                # research §2.3 "Submit": web_search is for ChatGPT and Grok only.
                problems.append(f"[{i}].web_search: not an input of this dataset")
        return problems

    def _new(self, dataset_id: str, inputs: list[dict[str, Any]], now: float) -> Snapshot:
        self.seq += 1
        # docs get-snapshot-input: ids look like s_m4x7enmven8djfqak.
        sid = "s_" + secrets.token_hex(9)
        salt = f"{input_key(inputs[0])}|{self.seq}"
        prof = self.profile
        slo, shi = prof.starting_s
        rlo, rhi = prof.running_s
        running_at = now + slo + (shi - slo) * unit(self.seed, salt, "starting")
        stuck = unit(self.seed, salt, "stuck") < prof.stuck_rate
        snap = Snapshot(
            id=sid,
            dataset_id=dataset_id,
            surface=DATASETS[dataset_id][0],
            inputs=[dict(item) for item in inputs],
            created_wall=self.wall(),
            created=now,
            running_at=running_at,
            ready_at=(
                None if stuck else running_at + rlo + (rhi - rlo) * unit(self.seed, salt, "run")
            ),
            fails=unit(self.seed, salt, "fail") < prof.fail_rate,
            salt=salt,
            errors_at={
                i
                for i in range(len(inputs))
                if unit(self.seed, f"{salt}#{i}", "rec-error") < prof.record_error_rate
            },
        )
        self.snapshots[sid] = snap
        return snap

    async def progress(self, request: web.Request) -> web.Response:
        kind = "progress"
        snap = self._find(request, kind)
        if isinstance(snap, web.Response):
            return snap
        status = snap.status(self.now())
        # docs monitor-progress (research §2.3 "Poll"): starting, running, ready, failed.
        out: dict[str, Any] = {
            "snapshot_id": snap.id,
            "dataset_id": snap.dataset_id,
            "status": "failed" if status == "cancelled" else status,
        }
        if status == "ready":
            out["records"] = len(snap.inputs)
            out["errors"] = len(snap.errors_at)
        elif status == "failed":
            # docs errors: {status: "failed", error_message}.
            out["error_message"] = "Collection failed: the target did not respond"
        elif status == "cancelled":
            out["error_message"] = "Snapshot was cancelled"
        self.requests[f"{kind}:200"] += 1
        return web.json_response(out)

    async def snapshot(self, request: web.Request) -> web.Response:
        kind = "snapshot"
        snap = self._find(request, kind)
        if isinstance(snap, web.Response):
            return snap
        status = snap.status(self.now())
        if status in ("starting", "running"):
            # research §2.3 "Fetch" / docs errors: 200 {status:"building", message} until ready.
            self.requests[f"{kind}:building"] += 1
            return web.json_response(
                {"status": "building", "message": "Snapshot is building, try again in 10s"}
            )
        if status in ("failed", "cancelled"):
            self.requests[f"{kind}:400"] += 1
            return web.json_response(
                {"status": "failed", "error_message": "Snapshot failed, no data"}, status=400
            )
        snap.fetched += 1
        self.requests[f"{kind}:200"] += 1
        return web.json_response([self._record(snap, i) for i in range(len(snap.inputs))])

    def _record(self, snap: Snapshot, i: int) -> dict[str, Any]:
        """research §2.3 "Record fields": answer_text, answer_text_markdown, model,
        citations[{title, url, position}], web_search_query[], web_search_triggered, and a
        per-record error (with include_errors=true)."""
        item = snap.inputs[i]
        base = {"url": item.get("url"), "prompt": item.get("prompt"), "index": item.get("index")}
        if i in snap.errors_at:
            return {
                "input": base,
                "error": "Failed to load the answer page",
                "error_code": "dead_page",
                "timestamp": _iso(snap.created_wall),
            }
        salt = f"{snap.salt}#{i}"
        model = MODELS.get(snap.surface, snap.surface)
        if unit(self.seed, salt, "refusal") < self.profile.refusal_rate:
            return {
                "input": base,
                "answer_text": "I'm sorry, but I can't help with that.",
                "answer_text_markdown": "I'm sorry, but I can't help with that.",
                "model": model,
                "citations": [],
                "web_search_query": [],
                "web_search_triggered": False,
                "timestamp": _iso(snap.created_wall),
            }
        region = str(item.get("country") or "us").lower()
        prof = Profile(
            platform=f"brightdata-{snap.surface}",
            devices=("web",),
            regions=(region,),
            modes=("standard",),
            screenshot_supported=False,
            cancellable=True,
            prices=PriceList("brightdata-sim", "USD", {"standard": 1}),
        )
        prompt = str(item.get("prompt"))
        ans = generate_answer(self.seed, salt, prompt, prof)
        queries = [prompt[:80], f"{prompt[:60]} {region} 2026"]
        searched = bool(ans.citations)
        wrong_flag = unit(self.seed, salt, "flag") < self.profile.search_flag_wrong_rate
        return {
            "input": base,
            "url": item.get("url"),
            "prompt": prompt,
            "answer_text": ans.answer,
            "answer_text_markdown": ans.answer,
            "answer_html": f"<div class='markdown'><p>{ans.answer}</p></div>",
            "model": model,
            "citations": [
                {"title": c.title, "url": c.url, "position": n + 1}
                for n, c in enumerate(ans.citations)
            ],
            "links_attached": [{"url": c.url} for c in ans.citations],
            "web_search_query": queries if searched else [],
            # research §2.3 "Search flags are unreliable": false on runs that did search.
            "web_search_triggered": searched and not wrong_flag,
            "country": item.get("country"),
            "timestamp": _iso(snap.created_wall),
        }

    async def cancel(self, request: web.Request) -> web.Response:
        """docs cancel-snapshot: ``POST /datasets/v3/snapshot/{id}/cancel`` -> 200 ``OK``."""
        kind = "cancel"
        snap = self._find(request, kind)
        if isinstance(snap, web.Response):
            return snap
        now = self.now()
        self.cancels[snap.id] += 1
        if snap.collecting(now) and snap.cancelled_at is None:
            snap.cancelled_at = now
            self.journal({"op": "cancel", "id": snap.id, "after": now - snap.created})
        self.requests[f"{kind}:200"] += 1
        return web.Response(text="OK", content_type="text/plain")

    async def list_snapshots(self, request: web.Request) -> web.Response:
        """docs get-snapshots: the snapshots of one dataset, filtered by status."""
        kind = "list"
        denied = self._auth(request, kind)
        if denied is not None:
            return denied
        now = self.now()
        self._expire(now)
        dataset_id = request.query.get("dataset_id")
        if dataset_id not in DATASETS:
            return self._fail(400, {"error": "dataset missing"}, kind)
        want = request.query.get("status")
        rows = []
        for s in self.snapshots.values():
            status = s.status(now)
            status = "failed" if status == "cancelled" else status
            if s.dataset_id != dataset_id or (want and status != want):
                continue
            rows.append(
                {
                    "id": s.id,
                    "dataset_id": s.dataset_id,
                    "status": status,
                    "created": _iso(s.created_wall),
                    "dataset_size": len(s.inputs),
                }
            )
        skip = int(request.query.get("skip", 0))
        limit = int(request.query.get("limit", 1000))
        self.requests[f"{kind}:200"] += 1
        return web.json_response(rows[skip : skip + limit])

    # ------------------------------------------------------------------ control
    def stats(self) -> dict[str, Any]:
        """Per input (``COUNTRY|prompt``): trigger calls, snapshots created, records billed,
        bodies fetched; plus snapshots still collecting and cancelled, per dataset."""
        now = self.now()
        every = {**self.expired, **self.snapshots}
        keys: dict[str, dict[str, int]] = {}
        for key, calls in self.triggers.items():
            snaps = [every[i] for i in self.created.get(key, []) if i in every]
            keys[key] = {
                "trigger_calls": calls,
                "snapshots_created": len(snaps),
                "records_billed": sum(
                    1
                    for s in snaps
                    for i, item in enumerate(s.inputs)
                    if input_key(item) == key and s.billed_records(now) and i not in s.errors_at
                ),
                "results_fetched": sum(s.fetched for s in snaps),
                "cancelled": sum(1 for s in snaps if s.status(now) == "cancelled"),
            }
        collecting = Counter(s.dataset_id for s in self.snapshots.values() if s.collecting(now))
        return {
            "keys": keys,
            "snapshots": len(every),
            "max_snapshots_per_input": max(
                (v["snapshots_created"] for v in keys.values()), default=0
            ),
            "records_billed": sum(s.billed_records(now) for s in every.values()),
            "collecting": dict(collecting),
            "cancelled": sum(1 for s in every.values() if s.status(now) == "cancelled"),
            "cancel_calls": sum(self.cancels.values()),
            "requests": dict(sorted(self.requests.items())),
            "expired": len(self.expired),
            "callbacks": self.callbacks.stats(),
        }

    async def control_profile(self, request: web.Request) -> web.Response:
        try:
            overrides = json.loads(await request.read() or b"{}")
            if not isinstance(overrides, dict):
                raise ValueError("the body must be a JSON object of profile keys")
            self.profile = self.profile.with_overrides(overrides)
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        out = dataclasses.asdict(self.profile)
        out.pop("api_key")
        return web.json_response(out)

    async def control_advance(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read() or b"{}")
        seconds = float(body.get("seconds", 0))
        if seconds < 0:
            return web.json_response({"error": {"message": "seconds must be >= 0"}}, status=400)
        self.offset += seconds
        self.journal({"op": "advance", "seconds": seconds})
        return web.json_response({"offset_s": self.offset})

    async def control_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        self.journal({"op": "reset"})
        return web.json_response({"reset": True})

    def _index(self, snap: Snapshot) -> None:
        self.snapshots[snap.id] = snap
        for item in snap.inputs:
            self.created[input_key(item)].append(snap.id)

    # ------------------------------------------------------------------ --state-file
    def journal(self, record: dict[str, Any]) -> None:
        if self.write is not None:
            self.write(record)

    def restore(self, record: dict[str, Any]) -> None:
        """Replay one journal record (simulator.services.persist) on a fresh service."""
        op = record.get("op")
        if op == "reset":
            self.reset()
        elif op == "advance":
            self.offset += float(record["seconds"])
        elif op == "snapshot":
            snap = persist.load(Snapshot, record, **_SNAP_KW, now=self.now(), wall=self.wall())
            self._index(snap)
            for item in snap.inputs:
                self.triggers[input_key(item)] += 1
        elif op == "cancel":
            found = self.snapshots.get(record["id"])
            if found is not None:
                found.cancelled_at = found.created + float(record["after"])


__all__ = ["DATASETS", "BrightDataProfile", "BrightDataService", "Snapshot", "input_key"]
