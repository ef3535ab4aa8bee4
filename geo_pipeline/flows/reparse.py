"""Re-parsing archived raw responses after a parser fix (R13: keep raw, never re-ask).

A response the connector could not parse is archived exactly as received (kind
``response_raw``) and its sample waits in the review queue with evidence ``partial`` /
``UNPARSEABLE: …``. Once the parser is fixed, ``reparse`` reads those bytes back (verified
against the recorded digest), parses them with the platform's connector -- from bytes only: the
connectors are built on an HTTP client that refuses every request, so the platform is never
asked again and nothing is charged -- and records the result like a worker would: a new
answer revision (as WARC: records in one object per run that refer to the kept response,
evidence.warc_revisions; else a bundle), validity judged again, the evidence layer moved
(partial -> stored) and the run's analysis re-run for the new revision. A body that still does
not parse changes nothing and is reported.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from geo_pipeline.analysis.run import analyse_run
from geo_pipeline.connectors.base import ConnectorError, Evidence, SubmitRequest
from geo_pipeline.evidence.access import read_object
from geo_pipeline.evidence.archive import Archive, ArchiveError
from geo_pipeline.evidence.recording import (
    ArchivedEvidence,
    SampleRef,
    archive_evidence,
    record_evidence_batch,
)
from geo_pipeline.evidence.warc_revisions import answer_record_ids, prepare_warc_revision
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline.settings import settings
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
    out: list[Reparsed | None] = [None] * len(rows)
    parsed: list[tuple[int, Evidence]] = []
    async with httpx.AsyncClient(transport=_NoNetwork()) as client:
        for i, row in enumerate(rows):
            got = await _parse(archive, row, parsers, client)
            if isinstance(got, Reparsed):
                out[i] = got
            else:
                parsed.append((i, got))
    if parsed:
        if settings().evidence_format == "warc":
            archived = await asyncio.to_thread(_store_warc, conn, archive, rows, parsed)
        else:
            archived = [
                await asyncio.to_thread(
                    archive_evidence, archive, _ref(rows[i]), _attempt_no(rows[i]), ev,
                    str(rows[i]["screenshot_policy"]),
                )
                for i, ev in parsed
            ]  # fmt: skip
        for (i, _), item in zip(parsed, archived, strict=True):
            out[i] = _record(conn, rows[i], item, actor)
    results = [r for r in out if r is not None]
    if analyse:
        for run in sorted({r.run_id for r in results if r.outcome == "reparsed"}):
            analyse_run(conn, run)
    return results


def _ref(row: dict[str, Any]) -> SampleRef:
    return SampleRef(row["sample_id"], row["run_id"], row["tenant_id"])


def _attempt_no(row: dict[str, Any]) -> int:
    return int(row["raw_attempt_no"] or row["attempt_no"])


async def _parse(
    archive: Archive,
    row: dict[str, Any],
    parsers: dict[str, Parser],
    client: httpx.AsyncClient,
) -> Reparsed | Evidence:
    """The kept response, read back verified and parsed again; or why not."""
    sid, run = row["sample_id"], row["run_id"]
    try:
        raw = read_object(archive, row["storage_key"], "response_raw", row["sha256"])
    except ArchiveError as exc:
        return Reparsed(sid, run, "error", f"raw response unreadable: {exc}")
    parse = parsers.get(row["platform"]) or connector_parser(row["platform"], client)
    req = SubmitRequest(
        sample_id=sid, attempt_no=_attempt_no(row), tenant_id=row["tenant_id"], question="",
        platform=row["platform"], device=row["device"], region=row["region"], mode=row["mode"],
        screenshot=False,
    )  # fmt: skip
    try:
        result = parse(row["upstream_id"] or "", req, raw, row["mime_type"])
        evidence: Evidence = await result if inspect.isawaitable(result) else result
    except ConnectorError as exc:
        return Reparsed(sid, run, "unparseable", str(exc)[:300])
    return evidence


def _store_warc(
    conn: Conn, archive: Archive, rows: list[dict[str, Any]], parsed: list[tuple[int, Evidence]]
) -> list[ArchivedEvidence]:
    """The revisions as WARC records referring to their kept responses (evidence
    .warc_revisions), stored in one object per run (one PUT each). A store that fails fails
    every revision of the re-parse: nothing is recorded that is not stored."""
    ids = answer_record_ids(conn, [rows[i]["sample_id"] for i, _ in parsed])
    conn.commit()  # a read: no transaction left open under the recording's own
    cap = settings().evidence_record_max_bytes
    prepared = [
        prepare_warc_revision(
            _ref(rows[i]), _attempt_no(rows[i]), ev, str(rows[i]["screenshot_policy"]),
            response_record_id=ids.get(rows[i]["sample_id"]), max_record_bytes=cap,
        )
        for i, ev in parsed
    ]  # fmt: skip
    try:
        return store_batch(archive, prepared)
    except ArchiveError as exc:
        return [replace(p, warc_pending=(), failure=f"ARCHIVE_FAILED: {exc}") for p in prepared]


def _record(conn: Conn, row: dict[str, Any], archived: ArchivedEvidence, actor: str) -> Reparsed:
    """Record one revision like a worker would (one transaction), the evidence layer moved."""
    sid, run = row["sample_id"], row["run_id"]
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
