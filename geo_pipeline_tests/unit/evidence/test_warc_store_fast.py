"""The batch store's placing (evidence.warc_store: ``plan_batch``, ``_placed``) makes what the
general path makes -- ``warc.pack``'s object and spans, ``dataclasses.replace`` and the
dataclasses' own constructors -- for every item: the same objects, keys, offsets and fields,
in the same order (issue 33: the worker's CPU on the event loop)."""

from __future__ import annotations

import asyncio
from dataclasses import fields, replace
from typing import Any

import pytest

from geo_pipeline.evidence import recording, warc
from geo_pipeline.evidence.archive import ArchiveUnavailable
from geo_pipeline.evidence.recording import (
    ArchivedEvidence,
    ArchivedObject,
    ArchivedScreenshot,
    SampleRef,
    prepare_warc_evidence,
)
from geo_pipeline.evidence.warc import Placement, record_key
from geo_pipeline.evidence.warc_store import (
    INDEX_ONLY_KINDS,
    WARC_MIME,
    astore_batch,
    batch_object_key,
    store_batch,
)
from geo_pipeline_tests.unit.evidence.test_warc_stored_fields import (
    AT,
    fixed_thumbnails,
    simulator_evidence,
)

Item = ArchivedEvidence | ArchivedScreenshot


def general_store(items: list[Item]) -> tuple[dict[str, bytes], list[Item]]:
    """The general path: per tenant and run in order of first appearance, ``warc.pack`` of
    the records, the content-addressed key, and each item ``replace``d with dataclasses made
    by their constructors."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, item in enumerate(items):
        if item.warc_pending:
            groups.setdefault((item.ref.tenant_id, item.ref.run_id), []).append(i)
    objects: dict[str, bytes] = {}
    out = list(items)
    for (tenant, run), idx in groups.items():
        records = [r for i in idx for r in items[i].warc_pending]
        data, spans = warc.pack(records)
        key = batch_object_key(tenant, run, data)
        objects[key] = data
        it = iter(spans)
        for i in idx:
            placements, made = [], []
            for r in items[i].warc_pending:
                offset, length = next(it)
                placements.append(Placement(r, key, offset))
                if r.kind not in INDEX_ONLY_KINDS:
                    made.append(ArchivedObject(r.kind, record_key(key, offset, length),
                                               r.payload_sha256, r.payload_size, r.mime_type))  # fmt: skip
            out[i] = replace(items[i], objects=tuple(made), warc_pending=(),
                             warc_placed=tuple(placements))  # fmt: skip
    return objects, out


class Puts:
    def __init__(self, refuse: str | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.refuse = refuse  # a run whose objects the store refuses

    def put(self, key: str, data: bytes, *, mime_type: str) -> Any:
        assert mime_type == WARC_MIME
        if self.refuse is not None and f"/{self.refuse}/" in key:
            raise ArchiveUnavailable(f"no room for {key}")
        self.objects[key] = data


def _same(a: Item, b: Item) -> None:
    assert type(a) is type(b)
    assert a == b
    assert vars(a) == vars(b)  # every field
    for x, y in zip(a.warc_placed, b.warc_placed, strict=True):  # named tuples
        assert type(x) is type(y) is Placement and x._asdict() == y._asdict()
    for x, y in zip(a.objects, b.objects, strict=True):
        assert type(x) is type(y) and vars(x) == vars(y)
        assert set(vars(x)) == {f.name for f in fields(type(x))}
    for p, r in zip(a.warc_placed, b.warc_placed, strict=True):
        assert p.record is r.record  # the records themselves, not copies


def inputs(monkeypatch: pytest.MonkeyPatch) -> list[Item]:
    """Answers with and without the exchange (request records: indexed only), of two tenants
    and three runs interleaved, unparseable ones, late screenshots, items with nothing to
    store and one whose evidence failed."""
    monkeypatch.setattr(recording, "screenshot_derivatives", fixed_thumbnails)
    monkeypatch.setattr(recording, "_now", lambda: AT)
    items: list[Item] = []
    for k, (ref, n, ev, policy) in enumerate(simulator_evidence(24)):
        ref = replace(ref, tenant_id=("acme", "b-2.x_Y")[k % 2], run_id=f"run-{k % 3}")
        if k % 4 == 1:
            ev = replace(ev, exchange=None)
        items.append(prepare_warc_evidence(ref, n, ev, policy, max_record_bytes=1 << 20))
        if k % 5 == 2:
            raw, reason = "非 JSON".encode(), "UNPARSEABLE: 坏"
            unparseable = recording.prepare_warc_unparseable
            items.append(unparseable(ref, n, ev.upstream_id, raw, "", reason, ev.exchange))
    shots = [r for it in items for r in it.warc_pending if r.kind in ("screenshot", "thumbnail")]
    assert shots
    ref = SampleRef("s-late", "run-1", "acme")
    items.insert(3, ArchivedScreenshot(ref, 2, "available", (), AT, warc_pending=tuple(shots[:2])))
    items.insert(0, ArchivedScreenshot(ref, 1, "unavailable", (), AT))  # nothing to store
    # Too large: nothing to store.
    items.append(
        prepare_warc_evidence(ref, 1, simulator_evidence(1)[0][2], "off", max_record_bytes=10)
    )
    assert not items[-1].warc_pending and items[-1].failure
    assert any(r.kind in INDEX_ONLY_KINDS for it in items for r in it.warc_pending)
    return items


def test_store_batch_places_as_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    items = inputs(monkeypatch)
    want_objects, want = general_store(items)
    archive = Puts()
    got = store_batch(archive, items)  # type: ignore[arg-type]
    assert archive.objects == want_objects and len(want_objects) == 6
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        _same(a, b)
    for i, item in enumerate(items):
        if not item.warc_pending:
            assert got[i] is item  # nothing to store: the item itself


@pytest.mark.parametrize("n", [0, 1, 2])
def test_small_batches(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    items = inputs(monkeypatch)[1 : 1 + n]
    want_objects, want = general_store(items)
    archive = Puts()
    got = store_batch(archive, items)  # type: ignore[arg-type]
    assert archive.objects == want_objects
    for a, b in zip(got, want, strict=True):
        _same(a, b)


def test_astore_batch_places_as_the_general_path_and_names_the_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = inputs(monkeypatch)
    _, want = general_store(items)
    archive = Puts(refuse="run-2")
    got, failed = asyncio.run(astore_batch(archive, items))  # type: ignore[arg-type]
    refused = {i for i, it in enumerate(items) if it.warc_pending and it.ref.run_id == "run-2"}
    assert set(failed) == refused and refused
    assert all(isinstance(exc, ArchiveUnavailable) for exc in failed.values())
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if i in refused:
            assert a is items[i]  # left as it was, its records still pending
        else:
            _same(a, b)
    assert set(archive.objects) == {
        p.object_key for i, it in enumerate(got) if i not in refused for p in it.warc_placed
    }
