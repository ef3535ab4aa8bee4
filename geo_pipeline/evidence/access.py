"""Authorised access to archived evidence (R20): a path or key alone grants nothing.

Every read goes through these functions. Each first asks PostgreSQL whose sample it is and
refuses (``EvidenceAccessDenied``) unless it is the caller's tenant; only then does it look up the
object's key and digest in ``geo.evidence_objects`` and stream the object (verified against the
recorded sha256) or hand out a short-lived presigned URL. An answer's text parts live in one
bundle object (evidence.bundle); a read serves the part asked for, verified against its own
digest. A sample that does not exist and a sample of another tenant get the same answer, so ids
cannot be probed across tenants.

``answer_html`` of an answer recorded since issue #14 is derived, not stored (evidence.display):
it is rendered from the ``answer_raw`` part after that part is verified against its recorded
digest, with the same renderer and sanitiser, so it equals what used to be stored. Bundles that
hold an ``answer_html`` part (and the objects before bundles) are served as stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from geo_pipeline.domain.vocabulary import EVIDENCE_KINDS
from geo_pipeline.evidence.archive import Archive, ArchiveError, PresignUnsupported, verify
from geo_pipeline.evidence.bundle import (
    BundleCorrupt,
    digest_in_key,
    index,
    is_bundle_key,
    read_part,
)
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline.evidence.warc import is_record_key
from geo_pipeline.evidence.warc_store import read_record
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

KINDS = EVIDENCE_KINDS
DERIVED_KIND, SOURCE_KIND = "answer_html", "answer_raw"  # the display, made from the text
HTML_MIME = "text/html; charset=utf-8"
PRESIGN_MAX_S = 3600


class EvidenceAccessDenied(PermissionError):
    """The caller's tenant may not read this evidence (or it does not exist for that tenant)."""


class EvidenceNotFound(LookupError):
    """The caller's sample has no archived object of that kind/revision."""


@dataclass(frozen=True)
class EvidenceObject:
    object_id: int
    sample_id: str
    tenant_id: str
    run_id: str
    revision: int
    kind: str
    storage_key: str
    sha256: str
    size_bytes: int
    mime_type: str
    attempt_no: int | None
    captured_at: datetime
    stored_at: datetime
    # Set when this kind is not stored but made from the named kind's object (``answer_html``
    # from ``answer_raw``): key, digest and size are the source's, verified before rendering.
    derived_from: str | None = None
    # A WARC-stored kind (issue 33): the record's block digest from geo.warc_records, checked
    # on every read with the payload's ``sha256``.
    block_sha256: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EvidenceObject:
        values: dict[str, Any] = {k: row.get(k) for k in cls.__dataclass_fields__}
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def authorise(conn: Conn, tenant_id: str, sample_id: str) -> None:
    """Raise EvidenceAccessDenied unless the sample exists and belongs to ``tenant_id``."""
    row = conn.execute(Q("evidence.sample_tenant"), {"sample_id": sample_id}).fetchone()
    if row is None or row["tenant_id"] != tenant_id:
        raise EvidenceAccessDenied(
            f"no evidence of sample {sample_id} is visible to tenant {tenant_id}"
        )


def find_object(
    conn: Conn, tenant_id: str, sample_id: str, kind: str, revision: int | None = None
) -> EvidenceObject:
    """The metadata of one object after the tenant check; newest revision when none given."""
    if kind not in KINDS:
        raise ValueError(f"unknown evidence kind {kind!r}; one of {', '.join(KINDS)}")
    authorise(conn, tenant_id, sample_id)
    row = conn.execute(
        Q("evidence.object_for"),
        {"sample_id": sample_id, "tenant_id": tenant_id, "kind": kind, "revision": revision},
    ).fetchone()
    if kind == DERIVED_KIND:
        # The display goes with its text: revision N of answer_html is made from revision N of
        # answer_raw. Stored (answers before issue #14) when there is a row, else derived.
        source = conn.execute(
            Q("evidence.object_for"),
            {"sample_id": sample_id, "tenant_id": tenant_id, "kind": SOURCE_KIND,
             "revision": revision},
        ).fetchone()  # fmt: skip
        if source is not None and (row is None or row["revision"] < source["revision"]):
            row = {**source, "kind": DERIVED_KIND, "mime_type": HTML_MIME,
                   "derived_from": SOURCE_KIND}  # fmt: skip
    if row is None:
        which = f"revision {revision}" if revision is not None else "any revision"
        raise EvidenceNotFound(f"sample {sample_id} has no archived {kind} ({which})")
    return EvidenceObject.from_row(row)


def list_objects(conn: Conn, tenant_id: str, sample_id: str) -> list[EvidenceObject]:
    authorise(conn, tenant_id, sample_id)
    rows = conn.execute(
        Q("evidence.objects_of_sample"), {"sample_id": sample_id, "tenant_id": tenant_id}
    ).fetchall()
    return [EvidenceObject.from_row(r) for r in rows]


def fetch_evidence_for(
    conn: Conn,
    archive: Archive,
    tenant_id: str,
    sample_id: str,
    kind: str,
    revision: int | None = None,
) -> bytes:
    """The object's bytes for an authorised tenant, verified against the recorded digest
    (raises DigestMismatch when the stored bytes changed)."""
    obj = find_object(conn, tenant_id, sample_id, kind, revision)
    return read_object(archive, obj.storage_key, obj.kind, obj.sha256, obj.block_sha256)


def read_object(
    archive: Archive, storage_key: str, kind: str, sha256: str, block_sha256: str | None = None
) -> bytes:
    """The bytes of one recorded object, verified: a WARC record in a batch object (one ranged
    GET; block and payload digests checked, evidence.warc_store), a part of an answer's bundle
    (the bundle is checked against the digest its key names, the part against the part's
    recorded digest) or a whole object (screenshots, thumbnails, evidence archived before
    bundles).

    ``answer_html`` where only the text is stored (``find_object`` says ``derived_from``: the
    key and ``sha256`` are the ``answer_raw`` object's) is rendered from the verified text."""
    if is_record_key(storage_key):
        payload = read_record(archive, storage_key, sha256, block_sha256)
        # WARC evidence never stores the display: answer_html is made from the answer text.
        return _render(payload) if kind == DERIVED_KIND else payload
    if not is_bundle_key(storage_key):
        if kind == DERIVED_KIND and storage_key.rsplit("/", 1)[-1] == SOURCE_KIND:
            return _render(archive.get(storage_key, sha256=sha256))
        return archive.get(storage_key, sha256=sha256)
    bundle = archive.get(storage_key, sha256=digest_in_key(storage_key))
    try:
        if kind == DERIVED_KIND and DERIVED_KIND not in index(bundle)[0]:
            source = read_part(bundle, SOURCE_KIND)
            return _render(verify(f"{storage_key}#{SOURCE_KIND}", source, sha256))
        part = read_part(bundle, kind)
    except BundleCorrupt as exc:
        raise ArchiveError(f"evidence bundle {storage_key!r}: {exc}") from exc
    return verify(f"{storage_key}#{kind}", part, sha256)


def _render(text: bytes) -> bytes:
    return render_answer(text.decode("utf-8")).encode("utf-8")


def fetch_by_key(
    conn: Conn, archive: Archive, tenant_id: str, storage_key: str, kind: str | None = None
) -> bytes:
    """The object under ``storage_key`` — only when the database records that key for a sample
    of ``tenant_id``. A guessed or foreign key is refused before the archive is touched. For an
    answer's bundle, ``kind`` names the part to serve; without it the whole bundle is served."""
    row = conn.execute(
        Q("evidence.object_by_key"),
        {"storage_key": storage_key, "tenant_id": tenant_id, "kind": kind},
    ).fetchone()
    if row is None and kind == DERIVED_KIND:  # a display made from the text (find_object)
        row = conn.execute(
            Q("evidence.object_by_key"),
            {"storage_key": storage_key, "tenant_id": tenant_id, "kind": SOURCE_KIND},
        ).fetchone()
        if row is not None:
            return read_object(
                archive, row["storage_key"], DERIVED_KIND, row["sha256"], row.get("block_sha256")
            )
    if row is None:
        raise EvidenceAccessDenied(
            f"no evidence object {storage_key!r} is visible to tenant {tenant_id}"
        )
    key = row["storage_key"]
    if kind is not None or not is_bundle_key(key):
        return read_object(archive, key, row["kind"], row["sha256"], row.get("block_sha256"))
    return archive.get(key, sha256=digest_in_key(key))  # the whole bundle, as its key names it


def presign(
    conn: Conn,
    archive: Archive,
    tenant_id: str,
    sample_id: str,
    kind: str,
    revision: int | None = None,
    *,
    expires_s: int = 300,
) -> str:
    """A short-lived download URL (at most an hour) for an authorised tenant. The local directory
    backend raises PresignUnsupported: stream with fetch_evidence_for instead."""
    obj = find_object(conn, tenant_id, sample_id, kind, revision)
    if is_record_key(obj.storage_key):
        # A plain presigned URL would hand out the whole batch object, other samples' records
        # included; evidence.presign_range signs the record's Range header into the URL.
        raise PresignUnsupported(
            f"the {kind} of sample {sample_id} is a record of a WARC batch object: use a "
            "ranged URL (evidence.presign_range.presign_record, `geo-pipeline evidence get "
            "... --presign`) or fetch it (`--out FILE`)"
        )
    if is_bundle_key(obj.storage_key):
        # A URL would hand out the whole bundle (every part, the raw response included), and a
        # byte range cannot be signed into a GET URL: text parts are streamed instead.
        raise PresignUnsupported(
            f"the {kind} of sample {sample_id} is a part of its evidence bundle; fetch it "
            "instead (`geo-pipeline evidence get ... --out FILE`)"
        )
    return archive.presign(obj.storage_key, expires_s=max(1, min(expires_s, PRESIGN_MAX_S)))
