"""Re-parsing archived raw responses after a parser fix (R13: keep raw, never re-ask).

A response the connector could not parse is archived exactly as received (kind
``response_raw``) and its sample waits in the review queue with evidence ``partial`` /
``UNPARSEABLE: …``. Once the parser is fixed, ``reparse`` reads those bytes back (verified
against the recorded digest), parses them with the platform's connector -- from bytes only: the
connectors are built on an HTTP client that refuses every request, so the platform is never
asked again and nothing is charged -- and records the result like a worker would: a new
answer bundle, a new answer revision, validity judged again, the evidence layer moved
(partial -> stored) and the run's analysis re-run for the new revision. A body that still does
not parse changes nothing and is reported.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from geo_pipeline.analysis.run import analyse_run
from geo_pipeline.connectors.base import ConnectorError, Evidence, SubmitRequest
from geo_pipeline.evidence.access import read_object
from geo_pipeline.evidence.archive import Archive, ArchiveError
from geo_pipeline.evidence.recording import SampleRef, archive_evidence, record_evidence_batch
from geo_pipeline.store import execution as ex
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

# A parser: (upstream_id, request, raw bytes, content type) -> Evidence, sync or async.
Parser = Callable[[str, SubmitRequest, bytes, str], Any]


@dataclass
class Reparsed:
    sample_id: str
    run_id: str
    outcome: str  # 'reparsed' | 'unparseable' | 'error'
    detail: str | None = None
    answer_revision: int | None = None
    evidence_state: str | None = None
    validity: str | None = None


class _NoNetwork(httpx.AsyncBaseTransport):
    """Any request a re-parse would make is a bug: the platform must never be asked again."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"re-parse must not call the platform ({request.method} {request.url})")


def connector_parser(platform: str, client: httpx.AsyncClient) -> Parser:
    """The platform connector's own parser, on a client that refuses the network."""
    from geo_pipeline.connectors.factory import build_connector
    from geo_pipeline.connectors.registry import load_registry

    connector = build_connector(load_registry().entry(platform), client)
    parse = getattr(connector, "parse_result", None)
    if parse is not None:
        return parse  # type: ignore[no-any-return]
    adopt = getattr(connector, "adopt_inline_result", None)
    if adopt is None:
        raise ValueError(f"the {platform} connector cannot parse a stored body")

    async def from_inline(upstream_id: str, req: SubmitRequest, raw: bytes, mime: str) -> Any:
        adopt(upstream_id, raw, mime)  # a synchronous engine's answer: parse what is held
        return await connector.fetch_evidence(upstream_id, req)

    return from_inline


def reparse(
    conn: Conn,
    archive: Archive,
    *,
    sample_ids: Sequence[str] = (),
    run_id: str | None = None,
    parsers: dict[str, Parser] | None = None,
    actor: str = "operator:reparse",
    analyse: bool = True,
) -> list[Reparsed]:
    """Re-parse the named samples (any completed sample with a kept raw response), or every
    sample of ``run_id`` whose response was unparseable. ``parsers`` (platform -> parser)
    override the connectors' own, e.g. to try a fixed parser before it ships."""
    rows = conn.execute(
        Q("evidence.reparse_candidates"), {"sample_ids": list(sample_ids), "run_id": run_id}
    ).fetchall()
    conn.commit()
    return asyncio.run(_reparse(conn, archive, rows, parsers or {}, actor, analyse))


async def _reparse(
    conn: Conn,
    archive: Archive,
    rows: list[dict[str, Any]],
    parsers: dict[str, Parser],
    actor: str,
    analyse: bool,
) -> list[Reparsed]:
    out: list[Reparsed] = []
    async with httpx.AsyncClient(transport=_NoNetwork()) as client:
        for row in rows:
            out.append(await _one(conn, archive, row, parsers, client, actor))
    if analyse:
        for run in sorted({r.run_id for r in out if r.outcome == "reparsed"}):
            analyse_run(conn, run)
    return out


async def _one(
    conn: Conn,
    archive: Archive,
    row: dict[str, Any],
    parsers: dict[str, Parser],
    client: httpx.AsyncClient,
    actor: str,
) -> Reparsed:
    sid, run = row["sample_id"], row["run_id"]
    try:
        raw = read_object(archive, row["storage_key"], "response_raw", row["sha256"])
    except ArchiveError as exc:
        return Reparsed(sid, run, "error", f"raw response unreadable: {exc}")
    parse = parsers.get(row["platform"]) or connector_parser(row["platform"], client)
    attempt_no = int(row["raw_attempt_no"] or row["attempt_no"])
    req = SubmitRequest(
        sample_id=sid, attempt_no=attempt_no, tenant_id=row["tenant_id"], question="",
        platform=row["platform"], device=row["device"], region=row["region"], mode=row["mode"],
        screenshot=False,
    )  # fmt: skip
    try:
        result = parse(row["upstream_id"] or "", req, raw, row["mime_type"])
        evidence: Evidence = await result if inspect.isawaitable(result) else result
    except ConnectorError as exc:
        return Reparsed(sid, run, "unparseable", str(exc)[:300])
    ref = SampleRef(sid, run, row["tenant_id"])
    # A new answer revision needs its own screenshot under a required policy (R21).
    policy = str(row["screenshot_policy"])
    archived = await asyncio.to_thread(archive_evidence, archive, ref, attempt_no, evidence, policy)
    if archived.failure is not None:
        return Reparsed(sid, run, "error", archived.failure)
    with conn.transaction():
        ex.set_actor(conn, actor)
        (outcome,) = record_evidence_batch(conn, [archived])
        conn.execute(
            Q("evidence.set_evidence_state"),
            {"sample_id": sid, "state": outcome.state, "reason": outcome.reason},
        )
    return Reparsed(
        sid, run, "reparsed", None, outcome.answer_revision, outcome.state, outcome.validity
    )
