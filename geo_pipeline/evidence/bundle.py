"""One object per answer: the evidence bundle (R19, R20).

An answer's evidence is several small parts -- the response exactly as received, the answer
text, its sanitised HTML and the normalised citations -- that are always written together and
read together. Storing them as one object makes the hot path one PUT per answer instead of four
(on S3 each request, not each byte, is what costs), and the bundle is still self-describing::

    geo-evidence-bundle/1\\n
    {"parts":[{"kind":..,"mime_type":..,"offset":..,"size":..,"sha256":..}, ...]}\\n
    <part bytes, concatenated in header order; offsets count from the first byte after the
     header line>

``head -c 2000 bundle`` shows what is inside. The encoding is deterministic (parts in the
caller's order, header JSON with sorted keys), so equal evidence gives equal bytes, hence the
same content-addressed key: a re-write is a no-op and different bytes never share a key.

Each part's sha256 is recorded in PostgreSQL (``geo.evidence_objects``, one row per part, all
with the bundle's key), and a read verifies the part it serves against that digest; the bundle
as a whole is checked against the digest its key names.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

MAGIC = b"geo-evidence-bundle/1\n"
BUNDLE_KIND = "bundle"
BUNDLE_MIME = "application/vnd.geo-pipeline.evidence-bundle"


class BundleCorrupt(ValueError):
    """The bytes are not a readable bundle, or lack the part asked for."""


@dataclass(frozen=True)
class Part:
    kind: str
    mime_type: str
    data: bytes


@dataclass(frozen=True)
class PartInfo:
    kind: str
    mime_type: str
    offset: int
    size: int
    sha256: str


def pack(parts: list[Part]) -> tuple[bytes, tuple[PartInfo, ...]]:
    """The bundle's bytes and what each part's database row records."""
    infos, offset = [], 0
    for p in parts:
        digest = hashlib.sha256(p.data).hexdigest()
        infos.append(PartInfo(p.kind, p.mime_type, offset, len(p.data), digest))
        offset += len(p.data)
    header = json.dumps(
        {"parts": [i.__dict__ for i in infos]}, sort_keys=True, separators=(",", ":")
    ).encode()
    return b"".join([MAGIC, header, b"\n", *(p.data for p in parts)]), tuple(infos)


def index(data: bytes) -> tuple[dict[str, PartInfo], int]:
    """The parts a bundle holds, by kind, and where its payload starts."""
    if not data.startswith(MAGIC):
        raise BundleCorrupt("not an evidence bundle (no geo-evidence-bundle/1 header)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise BundleCorrupt("evidence bundle header is cut off")
    try:
        header = json.loads(data[len(MAGIC) : end])
        infos = {p["kind"]: PartInfo(**p) for p in header["parts"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleCorrupt(f"evidence bundle header is unreadable: {exc}") from exc
    return infos, end + 1


def read_part(data: bytes, kind: str) -> bytes:
    """The bytes of one part (the caller verifies them against the recorded digest)."""
    infos, start = index(data)
    info = infos.get(kind)
    if info is None:
        raise BundleCorrupt(f"evidence bundle has no {kind} part (it holds {sorted(infos)})")
    part = data[start + info.offset : start + info.offset + info.size]
    if len(part) != info.size:
        raise BundleCorrupt(f"evidence bundle is cut off inside its {kind} part")
    return part


def is_bundle_key(key: str) -> bool:
    return key.rsplit("/", 1)[-1] == BUNDLE_KIND


def digest_in_key(key: str) -> str | None:
    """The sha256 a content-addressed key names (``…/sha256-<hex>/<kind>``), if any."""
    segments = key.split("/")
    if len(segments) >= 2 and segments[-2].startswith("sha256-"):
        return segments[-2][len("sha256-") :]
    return None
