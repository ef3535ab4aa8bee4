"""R13 end to end: a response that cannot be parsed is kept raw, sent to review and never
re-asked; after a parser fix, `evidence reparse` turns the kept bytes into an answer revision.

Through the simulator's own fault (``unparseable_rate``: the result body cut in half, as a broken
gateway returns it), a real worker with the real connector, and both archive backends."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import httpx

from geo_pipeline.analysis.review import list_review_queue
from geo_pipeline.connectors.base import Evidence, SubmitRequest, Unparseable
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.evidence.access import fetch_evidence_for
from geo_pipeline.evidence.archive import LocalArchive
from geo_pipeline.evidence.s3_async import ObjectStoreArchive
from geo_pipeline.flows.reparse import reparse
from geo_pipeline.store import db as dbmod
from geo_pipeline_tests.fixtures.simulator import registry_for, running_simulator
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until
from geo_pipeline_tests.processes import outcome

PROFILE = {"defaults": {"completion_s": [0, 0], "accept_delay_s": [0, 0], "unparseable_rate": 1.0}}


def _collect(db_url, redis_url, redis_ns, archive, sim) -> list[str]:
    ids = make_run(db_url, "r-bad", questions=3)
    client = httpx.AsyncClient()
    connector = build_connector(registry_for(sim.url).entry("deepseek"), client)

    def done() -> bool:
        rows = fetch(db_url, "SELECT collection_state FROM geo.samples")
        return bool(rows) and all(r["collection_state"] == "completed" for r in rows)

    async def go() -> None:
        try:
            await run_worker_until(
                db_url, redis_url, redis_ns, {"deepseek": connector}, done, timeout_s=40,
                archive=archive,
            )  # fmt: skip
        finally:
            await client.aclose()

    asyncio.run(go())
    assert done()
    return ids


def _lenient(upstream_id: str, req: SubmitRequest, raw: bytes, mime: str) -> Evidence:
    """A 'fixed' parser: reads the answer out of a body cut short (the shipped one cannot)."""
    m = re.search(rb'"answer":\s*"((?:[^"\\]|\\.)*)', raw)  # may be cut off mid-string
    if m is None:
        raise Unparseable("still no answer in the body", raw=raw)
    text = m.group(1).decode("utf-8", errors="ignore")
    text = re.sub(r"\\u[0-9a-fA-F]{0,3}$|\\$", "", text)  # an escape cut in half
    from datetime import UTC, datetime

    return Evidence(
        sample_id=req.sample_id, upstream_id=upstream_id, collection_state="completed",
        answer_text=json.loads(f'"{text}"'), raw_body=raw, raw_mime_type=mime,
        captured_at=datetime.now(UTC),
    )  # fmt: skip


def test_unparseable_answer_is_kept_raw_reviewed_and_reparsed(
    db_url, redis_url, redis_ns, archive, monkeypatch
):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    with running_simulator(PROFILE) as sim:
        ids = _collect(db_url, redis_url, redis_ns, archive, sim)
        asked = sim.stats()
        samples = fetch(
            db_url,
            "SELECT sample_id, tenant_id, evidence_state, evidence_reason, upstream_id"
            " FROM geo.samples ORDER BY sample_id",
        )
        # Collected, charged once, kept raw: evidence partial with the parse failure as reason.
        for s in samples:
            assert s["evidence_state"] == "partial", s
            assert s["evidence_reason"].startswith("UNPARSEABLE"), s
        with dbmod.connect(db_url) as conn:
            for s in samples:
                raw = fetch_evidence_for(
                    conn, archive, s["tenant_id"], s["sample_id"], "response_raw"
                )
                assert raw.startswith(b"{") and s["upstream_id"].encode() in raw
                try:
                    json.loads(raw)
                    raise AssertionError("the kept body should be the cut one")
                except ValueError:
                    pass
            queue = {r["sample_id"]: r for r in list_review_queue(conn, "r-bad")}
        assert set(queue) == set(ids)
        assert all(r["evidence_key"] and "UNPARSEABLE" in r["reason"] for r in queue.values())
        charges = fetch(
            db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge'"
        )
        assert charges[0]["n"] == len(ids)

        # The CLI lists them with the raw body shown (sanitised for a terminal).
        env = {**os.environ, "GEO_DATABASE_URL": db_url, "GEO_EVIDENCE_URL": _url(archive)}
        listed = subprocess.run(
            [sys.executable, "-m", "geo_pipeline.cli.main", "review", "list", "--run", "r-bad",
             "--raw", "--json"],
            capture_output=True, env=env, timeout=120, text=True,
        )  # fmt: skip
        assert listed.returncode == 0, outcome(listed)
        rows = json.loads(listed.stdout)
        assert {r["sample_id"] for r in rows} == set(ids)
        assert all(r["raw_preview"].startswith("{") for r in rows)

        # The shipped parser still fails: the CLI says so and changes nothing.
        same = subprocess.run(
            [sys.executable, "-m", "geo_pipeline.cli.main", "evidence", "reparse", "--run",
             "r-bad", "--json"],
            capture_output=True, env=env, timeout=120, text=True,
        )  # fmt: skip
        assert same.returncode == 1, outcome(same)
        assert {r["outcome"] for r in json.loads(same.stdout)} == {"unparseable"}

        # A fixed parser: new answer revision, validity judged, evidence stored, analysed.
        with dbmod.connect(db_url) as conn:
            done = reparse(conn, archive, run_id="r-bad", parsers={"deepseek": _lenient})
        assert {d.outcome for d in done} == {"reparsed"} and len(done) == len(ids)
        assert all(d.answer_revision == 1 and d.evidence_state == "stored" for d in done)
        after = fetch(
            db_url,
            "SELECT s.evidence_state, s.evidence_reason, s.analysis_state, a.validity"
            " FROM geo.samples s JOIN geo.answers a USING (sample_id)",
        )
        assert len(after) == len(ids)
        assert all(r["evidence_state"] == "stored" and r["evidence_reason"] is None for r in after)
        assert all(r["analysis_state"] != "pending" for r in after)
        with dbmod.connect(db_url) as conn:
            # Out of the parse-failure queue (a cut answer may still go to analysis review).
            left = list_review_queue(conn, "r-bad")
            assert not [r for r in left if r["subject"] == "parse_failure"], left
        # Never re-asked: the platform saw exactly the requests it saw before the re-parse.
        assert sim.stats() == asked
    charges = fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge'")
    assert charges[0]["n"] == len(ids)


def _url(archive) -> str:
    if isinstance(archive, LocalArchive):
        return archive.root.as_uri()
    assert isinstance(archive, ObjectStoreArchive)
    return f"s3://{archive.bucket}/{archive.prefix}"
