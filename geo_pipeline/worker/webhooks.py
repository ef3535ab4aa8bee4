"""The webhook receiver (issue 31): callbacks of answer-scraping services, verified, recorded once
per upstream task, and turned into what a poller would have learnt.

``POST /webhooks/cloro/<secret>``: cloro POSTs a task on its terminal state (research on answer
services §2.1 "Webhook") and redelivers at least once, each time with a new
``X-Cloro-Webhook-Id``; deliveries are therefore deduplicated by ``task.id``
(``geo.webhook_deliveries``, one row per task, counted) and acted on once. The secret is the
deployment's ``GEO_WEBHOOK_SECRET``, in the callback URL (cloro signs nothing): a wrong or
missing one is 401, logged, and nothing is written.

What a delivery settles: a sample waiting for review because cloro holds its task under our key
but never said which (409 RESOURCE_ALREADY_EXISTS, ``accepted_upstream:id_unknown``) learns the
task id from the callback and is queued, as an operator's ``samples resolve --accepted`` would
(``store.execution.resolve_uncertain``): a worker then follows the task. Any other sample is left
to its worker's polling. Polling stays the safety net: a lost callback delays, never loses.

DataForSEO and Bright Data call back too (issue 31): ``GET /webhooks/dataforseo/<secret>?id=&tag=``
(the pingback, research §2.2 "Submit"), ``POST /webhooks/dataforseo/<secret>`` (a postback: the
task_get body) and ``POST /webhooks/brightdata/<secret>`` (``notify``: ``{snapshot_id,
status}``). Every authenticated delivery is recorded once per task, and its first wakes the
worker following the task (``pg_notify``, worker/callbacks.py): the worker then asks the
service itself. A delivery's body is NEVER taken for the result or the state: a forged or
stale one costs one GET at most. cloro's first delivery wakes its worker the same way.

``GET /healthz`` answers ``ok``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import Any

from aiohttp import web

from geo_pipeline.settings import variable
from geo_pipeline.store import db as dbmod
from geo_pipeline.store import execution as ex
from geo_pipeline.store.queries import Q

log = logging.getLogger("geo_pipeline.webhooks")
SECRET_ENV = "GEO_WEBHOOK_SECRET"
ACTOR = "webhook:cloro"


def settle_cloro(db_url: str | None, body: dict[str, Any]) -> tuple[int, str]:
    """Record one cloro delivery and act on its first; returns (HTTP status, outcome)."""
    try:
        task = body["task"]
        upstream_id = str(task["id"])
        key = task.get("idempotencyKey")
        status = str(task.get("status") or "")
    except (KeyError, TypeError) as exc:
        return 400, f"not a cloro task body: {exc!r}"
    with dbmod.connect(db_url, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.execute(
                Q("webhooks.record_delivery"),
                {
                    "platform": "cloro",
                    "upstream_id": upstream_id,
                    "idempotency_key": key,
                    "status": status,
                },
            )
            row = cur.fetchone()
        first = row is not None and bool(row["first"])
        # Recorded once per task; acted on while its sample still waits (a delivery can come
        # before the 409 that parks the sample: the worker then reads this row instead).
        outcome = "polled by its worker" if first else "duplicate"
        sample_id, _, attempt = str(key or "").rpartition(":")
        if sample_id and attempt.isdigit():
            with conn.cursor() as cur:
                cur.execute(
                    Q("webhooks.sample_for_key"),
                    {"sample_id": sample_id, "attempt_no": int(attempt)},
                )
                sample = cur.fetchone()
            if sample is not None and sample["submission_state"] == "uncertain":
                try:
                    ex.resolve_uncertain(
                        conn,
                        sample_id,
                        accepted_upstream_id=upstream_id,
                        note=f"cloro webhook: task {upstream_id} {status}",
                        actor=ACTOR,
                    )
                    outcome = "accepted: task id learnt, sample queued"
                except ex.NotUncertain as exc:
                    outcome = f"not settled: {exc}"
        if outcome == "duplicate":
            return 200, outcome
        with conn.cursor() as cur:
            cur.execute(Q("webhooks.wake"), {"payload": f"cloro:{upstream_id}"})
            cur.execute(
                Q("webhooks.set_outcome"),
                {"platform": "cloro", "upstream_id": upstream_id, "outcome": outcome[:300]},
            )
    return 200, outcome


def settle_wake(
    db_url: str | None, protocol: str, upstream_id: str, key: str | None, status: str
) -> tuple[int, str]:
    """Record one delivery of a service that only says "this task ended" (DataForSEO,
    Bright Data); its first wakes the worker following the task. Returns (HTTP status,
    outcome). Nothing here changes a sample: the worker's own GET decides."""
    if not upstream_id or len(upstream_id) > 200:
        return 400, "no task id"
    with dbmod.connect(db_url, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(
            Q("webhooks.record_delivery"),
            {"platform": protocol, "upstream_id": upstream_id,
             "idempotency_key": (key or None) and key[:300], "status": status[:100]},
        )  # fmt: skip
        row = cur.fetchone()
        if row is None or not row["first"]:
            return 200, "duplicate"
        outcome = "fetch woken"
        cur.execute(Q("webhooks.wake"), {"payload": f"{protocol}:{upstream_id}"})
        cur.execute(
            Q("webhooks.set_outcome"),
            {"platform": protocol, "upstream_id": upstream_id, "outcome": outcome},
        )
    return 200, outcome


def _dataforseo(request: web.Request, body: Any) -> tuple[str, str | None, str]:
    """(task id, tag, status) of a pingback (query) or a postback (the task_get body)."""
    if request.method == "GET":
        return request.query.get("id", ""), request.query.get("tag"), "pingback"
    task = (body.get("tasks") or [{}])[0]
    data = task.get("data") or {}
    return str(task.get("id") or ""), data.get("tag"), str(task.get("status_code") or "")


def _brightdata(request: web.Request, body: Any) -> tuple[str, str | None, str]:
    return str(body.get("snapshot_id") or ""), None, str(body.get("status") or "")


WAKE_ONLY = {"dataforseo": _dataforseo, "brightdata": _brightdata}


def create_app(db_url: str | None = None, secret: str | None = None) -> web.Application:
    secret = secret if secret is not None else variable(SECRET_ENV)
    if not secret:
        raise ValueError(f"{SECRET_ENV} is not set: the receiver refuses to run without a secret")
    stats: dict[str, int] = {"accepted": 0, "duplicate": 0, "refused": 0, "invalid": 0}

    async def cloro(request: web.Request) -> web.Response:
        given = request.match_info["secret"]
        if not hmac.compare_digest(given.encode(), secret.encode()):
            stats["refused"] += 1
            log.warning(
                "webhook refused: wrong secret",
                extra={"path": "/webhooks/cloro/<secret>", "peer": request.remote},
            )
            return web.json_response({"error": "unauthorized"}, status=401)
        try:
            body = json.loads(await request.read())
        except ValueError:
            stats["invalid"] += 1
            return web.json_response({"error": "body is not JSON"}, status=400)
        status, outcome = await asyncio.to_thread(settle_cloro, db_url, body)
        if status != 200:
            stats["invalid"] += 1
        else:
            stats["duplicate" if outcome == "duplicate" else "accepted"] += 1
        return web.json_response({"outcome": outcome}, status=status)

    async def wake_only(request: web.Request) -> web.Response:
        protocol = request.match_info["service"]
        if not hmac.compare_digest(request.match_info["secret"].encode(), secret.encode()):
            stats["refused"] += 1
            log.warning(
                "webhook refused: wrong secret",
                extra={"path": f"/webhooks/{protocol}/<secret>", "peer": request.remote},
            )
            return web.json_response({"error": "unauthorized"}, status=401)
        body: Any = {}
        if request.method == "POST":
            try:
                body = json.loads(await request.read())
                if not isinstance(body, dict):
                    raise ValueError
            except ValueError:
                stats["invalid"] += 1
                return web.json_response({"error": "body is not a JSON object"}, status=400)
        try:
            upstream_id, key, status = WAKE_ONLY[protocol](request, body)
        except (AttributeError, IndexError, TypeError):
            upstream_id, key, status = "", None, ""
        code, outcome = await asyncio.to_thread(
            settle_wake, db_url, protocol, upstream_id, key, status
        )
        if code != 200:
            stats["invalid"] += 1
        else:
            stats["duplicate" if outcome == "duplicate" else "accepted"] += 1
        return web.json_response({"outcome": outcome}, status=code)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, **stats})

    app = web.Application(client_max_size=1024**2)
    services = "{service:" + "|".join(WAKE_ONLY) + "}"
    app.add_routes(
        [
            web.post("/webhooks/cloro/{secret}", cloro),
            web.get(f"/webhooks/{services}/{{secret}}", wake_only),
            web.post(f"/webhooks/{services}/{{secret}}", wake_only),
            web.get("/healthz", health),
        ]
    )
    return app


__all__ = ["ACTOR", "SECRET_ENV", "create_app", "settle_cloro", "settle_wake"]
