"""WARC records in the archive: one object per completion batch, ranged and verified reads
(issue 33, docs/design.md section 10).

Writing: ``astore_batch`` takes the records a completion batch prepared (evidence.recording
``prepare_warc_evidence``), packs each tenant's and run's into ONE gzip-per-record WARC object
under ``{tenant}/{run}/warc/sha256-<digest of the object>/batch.warc.gz`` (content-addressed,
so nothing is ever overwritten and the key keeps tenant and run in its path, R20), PUTs it
(one request per run in the batch) and returns the evidence with every record placed. This
happens *before* the batch's fenced transaction records the rows: a failed PUT fails the batch
(its callers retry while their leases hold; nothing is recorded or charged), and a worker
killed between the PUT and the commit leaves an object no row names, which retention removes
with the run (flows.retention: it sweeps the run's ``warc/`` prefix).

Reading: ``read_record`` fetches a record's bytes with one ranged GET, parses it with warcio,
and serves its payload only when the block's sha256 matches the index (and the record's own
``WARC-Block-Digest``) and the payload's matches ``geo.evidence_objects`` (R20: a mismatch is
reported, never served).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from geo_pipeline.evidence.archive import (
    Archive,
    ArchiveError,
    DigestMismatch,
    aput,
    object_key,
    read_range,
    sha256_hex,
)
from geo_pipeline.evidence.recording import ArchivedEvidence, ArchivedObject, ArchivedScreenshot
from geo_pipeline.evidence.warc import (
    WARC_MIME,
    Placement,
    WarcCorrupt,
    digest_hex,
    parse_record,
    split_record_key,
)

WARC_DIR = "warc"  # {tenant}/{run}/warc/… : a run's WARC objects, for retention's sweep
OBJECT_NAME = "batch.warc.gz"
INDEX_ONLY_KINDS = ("request",)
# What a batch stores: an answer's evidence, or a late screenshot (evidence.warc_revisions).
Item = TypeVar("Item", ArchivedEvidence, ArchivedScreenshot)


class RecordTooLarge(ArchiveError):
    """A record larger than the configured cap: refused with its size and the cap."""


def batch_object_key(tenant_id: str, run_id: str, data: bytes) -> str:
    return object_key(tenant_id, run_id, WARC_DIR, f"sha256-{sha256_hex(data)}", OBJECT_NAME)


def run_prefix(tenant_id: str, run_id: str) -> str:
    return f"{tenant_id}/{run_id}/{WARC_DIR}/"


def digest_of_object_key(key: str) -> str | None:
    segments = key.split("/")
    if len(segments) >= 2 and segments[-2].startswith("sha256-"):
        return segments[-2][len("sha256-") :]
    return None


def _placed(item: Item, object_key_: str, offset: int) -> Item:
    """``item`` with its pending records placed in the object ``object_key_`` from ``offset``
    on (its records lie there back to back, in order, as ``plan_batch`` packed them)."""
    # Every record is indexed (geo.warc_records); the evidence kinds readers ask for get their
    # geo.evidence_objects row as well. The request (the exchange as sent) is indexed only.
    # ArchivedObject and the item are made without their frozen dataclass's __init__ (an
    # object.__setattr__ a field) or a keyword dict, a Placement as the tuple it is: a batch
    # makes ~9 objects an answer on the event loop (test_warc_store_fast checks they equal the
    # dataclasses' own).
    placements = []
    objects = []
    for r in item.warc_pending:
        size = len(r.data)
        placements.append(_tuple(Placement, (r, object_key_, offset)))
        kind = r.kind
        if kind not in INDEX_ONLY_KINDS:
            o = _new(ArchivedObject)
            _set(o, "__dict__", {
                "kind": kind, "key": f"{object_key_}#{offset}-{size}",  # warc.record_key
                "sha256": r.payload_sha256, "size_bytes": r.payload_size,
                "mime_type": r.mime_type,
            })  # fmt: skip
            objects.append(o)
        offset += size
    new = _new(type(item))
    fields_ = item.__dict__.copy()
    fields_["objects"] = tuple(objects)
    fields_["warc_pending"] = ()
    fields_["warc_placed"] = tuple(placements)
    _set(new, "__dict__", fields_)
    return new


_new = object.__new__
_set = object.__setattr__  # the frozen dataclasses' own __setattr__ refuses every name
_tuple = tuple.__new__  # a named tuple made without its Python-level __new__


class Planned(NamedTuple):
    """One object of a batch: its key, its bytes and their sha256 (hex: the key names it, and
    the store is told it rather than hashing the bytes again), and (index, offset of its first
    record) of each of its items."""

    key: str
    data: bytes
    sha256: str
    starts: list[tuple[int, int]]


def plan_batch(items: Sequence[ArchivedEvidence | ArchivedScreenshot]) -> list[Planned]:
    """Per tenant and run, the object to PUT (``Planned``). An item's records lie in its object
    back to back, in order. Pure; ``astore_batch`` PUTs the objects."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, item in enumerate(items):
        if item.warc_pending:
            ref = item.ref
            key = (ref.tenant_id, ref.run_id)
            group = groups.get(key)
            if group is None:
                groups[key] = [i]
            else:
                group.append(i)
    out = []
    for (tenant_id, run_id), idx in groups.items():
        # warc.pack's object and spans: each item's first offset, its records' after it.
        members: list[bytes] = []
        starts: list[tuple[int, int]] = []
        offset = 0
        for i in idx:
            starts.append((i, offset))
            for r in items[i].warc_pending:
                data = r.data
                offset += len(data)
                members.append(data)
        data = b"".join(members)
        digest = sha256_hex(data)
        name = object_key(tenant_id, run_id, WARC_DIR, f"sha256-{digest}", OBJECT_NAME)
        out.append(Planned(name, data, digest, starts))
    return out


async def astore_batch(
    archive: Archive, items: Sequence[Item]
) -> tuple[list[Item], dict[int, ArchiveError]]:
    """PUT the pending records of ``items`` (one object per tenant and run, the PUTs awaited
    together) and return the items with their records placed, and the indexes of items whose
    object could not be stored with the error (those must not be recorded; their callers
    retry). Items without pending records come back as they are."""
    out = list(items)
    failed: dict[int, ArchiveError] = {}
    plans = plan_batch(items)
    results = await asyncio.gather(
        *(aput(archive, p.key, p.data, mime_type=WARC_MIME, sha256=p.sha256) for p in plans),
        return_exceptions=True,
    )
    for (key, _, _, starts), result in zip(plans, results, strict=True):
        if isinstance(result, ArchiveError):
            failed.update((i, result) for i, _ in starts)
        elif isinstance(result, BaseException):
            raise result
        else:
            for i, offset in starts:
                out[i] = _placed(items[i], key, offset)
    return out, failed


def store_batch(archive: Archive, items: Sequence[Item]) -> list[Item]:
    """Blocking form of ``astore_batch`` (the CLI, re-parses, tests)."""
    out = list(items)
    for key, data, _, starts in plan_batch(items):
        archive.put(key, data, mime_type=WARC_MIME)
        for i, offset in starts:
            out[i] = _placed(items[i], key, offset)
    return out


# --------------------------------------------------------------------------- reading
def verify_record(
    where: str, member: bytes, payload_sha256: str, block_sha256: str | None = None
) -> bytes:
    """The payload of one record, once its block matches the recorded and the declared block
    digest and its payload the recorded payload digest; else ``DigestMismatch`` (a torn or
    unreadable record is a mismatch too: nothing is served)."""
    try:
        record = parse_record(member, where)
    except WarcCorrupt as exc:
        raise DigestMismatch(where, block_sha256 or payload_sha256, f"unreadable ({exc})") from exc
    actual_block = hashlib.sha256(record.block).hexdigest()
    declared = record.headers.get("WARC-Block-Digest")
    try:
        declared_hex = digest_hex(declared) if declared else None
    except (WarcCorrupt, ValueError):
        declared_hex = None
    for expected in (block_sha256, declared_hex):
        if expected is not None and actual_block != expected:
            raise DigestMismatch(where, expected, actual_block)
    if declared_hex is None:
        raise DigestMismatch(where, block_sha256 or "a sha256 WARC-Block-Digest", str(declared))
    actual_payload = hashlib.sha256(record.payload).hexdigest()
    if actual_payload != payload_sha256:
        raise DigestMismatch(where, payload_sha256, actual_payload)
    return record.payload


def read_record(
    archive: Archive, storage_key: str, payload_sha256: str, block_sha256: str | None = None
) -> bytes:
    """The verified payload of the record ``storage_key`` names (one ranged GET)."""
    address = split_record_key(storage_key)
    if address is None:
        raise ValueError(f"{storage_key!r} is not a WARC record address")
    key, offset, length = address
    member = read_range(archive, key, offset, length)
    if len(member) != length:
        raise DigestMismatch(storage_key, payload_sha256, f"torn: {len(member)} of {length} bytes")
    return verify_record(storage_key, member, payload_sha256, block_sha256)
