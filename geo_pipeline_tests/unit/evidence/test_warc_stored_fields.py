"""Every stored byte of the WARC evidence path is fixed by its input (issue 33, CPU work on
``prepare_warc_evidence`` and the batch store): for simulator answers as the worker fetches them
(the exchange with its credentials, Chinese and English answers, tracking parameters, bad pages,
unparseable bodies, screenshots, browser captures), the digest of everything the path stores --
each record's gzip member and index fields, the batch object and its key, the
``geo.warc_records``, ``geo.evidence_objects``, ``geo.answers`` and ``geo.citations`` rows -- is
the one the code wrote before its CPU was cut. A change to any stored byte fails here; a
deliberate format change updates ``STORED_DIGEST`` and says why in its commit.

``simulator_evidence`` is also the input of ``bench/warc_prepare.py`` (the microbench)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.base import Attachment, Evidence, SubmitRequest
from geo_pipeline.connectors.http import exchange_of
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.connectors.simulator import SimulatorConnector
from geo_pipeline.evidence import recording, warc
from geo_pipeline.evidence import rows as evidence_rows
from geo_pipeline.evidence.recording import SampleRef, prepare_warc_evidence
from geo_pipeline.evidence.thumbnails import ImageInfo
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline.simulator.answers import generate_answer
from geo_pipeline.simulator.profiles import load_profiles

PLATFORMS = ("deepseek", "doubao", "qwen", "kimi")  # bench/throughput.py's
QUESTIONS = ("国内性价比最高的连锁咖啡品牌有哪些？", "Which coffee chain has the best value?")
AT = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)
N = 64
STORED_DIGEST = "2e399ae3ea5c309a91efd15ddcdeb0d2250f367c3dca4b26c5e0db4237207438"  # gzip level 0
# The same answers with every record deflated at ISA-L level 1, as before the gzip level went
# to 0 (issue 33, the worker's CPU): the digest the code wrote before its CPU was cut. It still
# holds with the level set back to 1, so the level is the only change to the stored bytes.
STORED_DIGEST_LEVEL_1 = "6563c3549b154bb3b97dee1204369049ac1fed390a4359a723cd88b7922c6b0d"


@lru_cache(maxsize=1)
def _profiles() -> dict[str, Any]:
    return load_profiles(registry=load_registry(), seed=7).profiles


def _body(i: int, platform: str) -> bytes:
    """A result body as the simulator serves it (simulator.server._result_core), serialised
    with the stdlib so the bytes do not depend on orjson being installed."""
    prof = _profiles()[platform]
    ans = generate_answer(7, f"k{i}", QUESTIONS[i % 2], prof)
    body = {
        "task_id": f"{platform}-{i}",
        "status": "completed",
        "answer": ans.answer,
        "citations": [{"id": c.id, "url": c.url, "title": c.title} for c in ans.citations],
        "search_results": [{"url": c.url, "title": c.title} for c in ans.search_results],
        "truncated": ans.truncated,
        "usage": {"web_search": i % 3 == 0, "input_tokens": 20 + i, "output_tokens": 300 + i},
        "completed_at": (AT + timedelta(seconds=i)).isoformat(),
        "screenshot": {"status": ("available", "pending", "unavailable")[i % 3]},
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def simulator_evidence(n: int = N) -> list[tuple[SampleRef, int, Evidence, str]]:
    """``n`` answers as the simulator connector returns them, with the HTTP exchange they came
    in (an Authorization header and a credential query parameter to redact): (sample, attempt,
    evidence, screenshot policy), the arguments of ``prepare_warc_evidence``."""
    registry = load_registry()
    out = []
    for i in range(n):
        platform = PLATFORMS[i % len(PLATFORMS)]
        conn = SimulatorConnector(registry.entry(platform), httpx.AsyncClient())
        caps = conn.capabilities()
        sid = f"s{i:05d}"
        request = SubmitRequest(
            sample_id=sid, attempt_no=1 + i % 2, tenant_id="acme", question=QUESTIONS[i % 2],
            platform=platform, device=caps.devices[0], region=caps.regions[0],
            mode=caps.modes[0], screenshot=i % 5 != 0,
        )  # fmt: skip
        raw = _body(i, platform)
        url = f"http://127.0.0.1:8765/{platform}/tasks/{platform}-{i}?include=result"
        if i % 7 == 0:
            url += "&key=QUERYSECRET"
        resp = httpx.Response(
            200,
            headers=[("Content-Type", "application/json; charset=utf-8"),
                     ("Content-Length", str(len(raw))), ("Date", "Mon, 07 Dec 2026 04:00:00 GMT"),
                     ("Server", "Python/3.12 aiohttp/3.11")],
            content=raw,
            request=httpx.Request("GET", url, headers=[("Authorization", "Bearer sk-SECRET")]),
        )  # fmt: skip
        ev = conn.parse_result(f"{platform}-{i}", request, raw, "application/json")
        ev = replace(ev, exchange=exchange_of(resp))
        if i % 11 == 3:  # a browser capture: the page and how it was captured
            ev = replace(
                ev,
                page_html=b"<html><body>" + ev.answer_text.encode() + b"</body></html>",
                capture={"device": "desktop", "page_url": f"https://chat.example/c/{i}?token=T"},
                search_queries=("coffee value", "咖啡 性价比"),
            )
        if i % 3 == 0 and ev.screenshot is not None:  # the bytes came with the result
            ev = replace(ev, screenshot=Attachment(
                "screenshot", "available", data=b"\x89PNG\r\n\x1a\n" + bytes([i % 256]) * 300,
                mime_type="image/png"))  # fmt: skip
        policy = ("required", "optional", "off")[i % 3]
        ref = SampleRef(sample_id=sid, run_id=f"run-{i % 2}", tenant_id="acme")
        out.append((ref, request.attempt_no, ev, policy))
    return out


def fixed_thumbnails(data: bytes) -> tuple[ImageInfo, bytes]:
    """Screenshot derivatives without Pillow, so the digest does not follow its encoder."""
    return ImageInfo("image/png", 1280, 4000), b"RIFF" + hashlib.sha256(data).digest()


class _Puts:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes, *, mime_type: str) -> Any:
        self.objects[key] = data


def stored_digest(inputs: list[tuple[SampleRef, int, Evidence, str]]) -> str:
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        h.update(json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False).encode())

    items = [prepare_warc_evidence(*args, max_record_bytes=1 << 20) for args in inputs]
    # The unparseable path: the raw body alone.
    items += [
        recording.prepare_warc_unparseable(ref, n, ev.upstream_id, ev.raw_body[:50],
                                           "application/json", "UNPARSEABLE: cut", ev.exchange)
        for ref, n, ev, _ in inputs[:8]
    ]  # fmt: skip
    for item in items:
        for r in item.warc_pending:
            feed([r.kind, r.record_type, r.record_id, r.target_uri, r.mime_type,
                  r.block_sha256, r.payload_sha256, r.payload_size])  # fmt: skip
            h.update(r.data)
    archive = _Puts()
    placed = store_batch(archive, items)  # type: ignore[arg-type]
    for key in sorted(archive.objects):
        feed(key)
        h.update(archive.objects[key])
    fresh = {"revision": 0, "validity": None, "content_sha256": None, "has_screenshot": False,
             "tenant_id": "acme"}  # fmt: skip

    def named(columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        # The rows by column name, as the digest was taken of them when they were dicts.
        return [dict(zip(columns, r, strict=True)) for r in rows]

    for item in placed:
        feed(named(evidence_rows.WARC_COLUMNS, recording._warc_rows(item)))
        feed(named(evidence_rows.OBJECT_COLUMNS, recording._object_rows(
            item.ref, item.objects, item.attempt_no, item.captured_at)))  # fmt: skip
        answers: list[tuple[Any, ...]] = []
        citations: list[tuple[Any, ...]] = []
        outcome = recording._decide(fresh, item, answers, citations)
        feed([named(evidence_rows.ANSWER_COLUMNS, answers),
              named(evidence_rows.CITATION_COLUMNS, citations), outcome.__dict__, item.content_sha256, item.warnings,
              item.screenshot_status, item.screenshot_detail, item.failure, item.unparseable])  # fmt: skip
    return h.hexdigest()


@pytest.fixture(autouse=True)
def _fixed(monkeypatch) -> None:
    """Thumbnails without Pillow; an unparseable answer's capture time is the clock's."""
    monkeypatch.setattr(recording, "screenshot_derivatives", fixed_thumbnails)
    monkeypatch.setattr(recording, "_now", lambda: AT)


def test_every_stored_field_of_simulator_answers_is_unchanged() -> None:
    assert stored_digest(simulator_evidence()) == STORED_DIGEST


def test_only_the_gzip_level_changed_the_stored_bytes(monkeypatch) -> None:
    monkeypatch.setattr(warc, "GZIP_LEVEL", 1)
    assert stored_digest(simulator_evidence()) == STORED_DIGEST_LEVEL_1


def test_the_digest_sees_a_changed_byte() -> None:
    """The digest is not blind: one changed header value in one exchange changes it."""
    inputs = simulator_evidence(8)
    ref, n, ev, policy = inputs[5]
    assert ev.exchange is not None
    changed = replace(ev.exchange, response_headers=(*ev.exchange.response_headers[:-1],
                                                     ("Server", "Python/3.12 aiohttp/3.12")))  # fmt: skip
    other = [*inputs[:5], (ref, n, replace(ev, exchange=changed), policy), *inputs[6:]]
    assert stored_digest(other) != stored_digest(inputs)


@pytest.mark.parametrize("i", [0, 3, 14])
def test_records_redact_the_exchange_credentials(i: int) -> None:
    import gzip

    ref, n, ev, policy = simulator_evidence(i + 1)[i]
    item = prepare_warc_evidence(ref, n, ev, policy)
    data = gzip.decompress(b"".join(r.data for r in item.warc_pending))
    assert b"sk-SECRET" not in data and b"QUERYSECRET" not in data


def test_prepared_and_placed_evidence_is_the_dataclasses_with_every_field() -> None:
    """``prepare_warc_evidence`` builds ``ArchivedEvidence``, and warc_store ``ArchivedObject``
    (and ``Placement``, a named tuple, as a tuple), without their ``__init__`` (CPU, issue 33): a field added to one of
    them must be set there too."""
    items = [
        prepare_warc_evidence(*args, max_record_bytes=1 << 20) for args in simulator_evidence(8)
    ]
    for item in store_batch(_Puts(), items):  # type: ignore[arg-type]
        for placed in item.warc_placed:  # a named tuple, made as the tuple it is
            assert placed == warc.Placement(*placed) and type(placed) is warc.Placement
        for made in (item, *item.objects):
            assert set(vars(made)) == {f.name for f in fields(type(made))}
            assert made == type(made)(**vars(made))
