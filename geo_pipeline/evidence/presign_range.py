"""A presigned URL for ONE record of a WARC batch object (issue 33, R20).

A batch object holds the records of many samples, so a plain presigned GET would hand an
auditor everyone's evidence. A SigV4 presigned URL can sign request headers as well as the
query: this one signs ``Range: bytes=<first>-<last>`` (``X-Amz-SignedHeaders=host;range``), so
the store serves the URL only to a request that sends exactly that header -- one record's bytes
-- and refuses any other range, or none, with 403 (the signature no longer matches). The
tenant is authorised first (evidence.access.find_object), as for every download.

What the auditor gets back is one gzip member holding one WARC record: any WARC reader opens
it, and its ``WARC-Block-Digest``/``WARC-Payload-Digest`` are the digests the database holds
(returned here so the auditor can check them without asking us again).

The URL is made with botocore's signer for both S3 backends (obstore's ``sign`` cannot sign a
header); the local directory backend has no URLs (``PresignUnsupported``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from geo_pipeline.evidence.access import PRESIGN_MAX_S, find_object
from geo_pipeline.evidence.archive import Archive, PresignUnsupported, S3Archive, s3_client
from geo_pipeline.evidence.s3_async import ObjectStoreArchive
from geo_pipeline.evidence.warc import split_record_key
from geo_pipeline.store.db import Conn


@dataclass(frozen=True)
class RangedURL:
    """A download of one record: GET ``url`` with ``headers`` exactly (206, ``length`` bytes)."""

    url: str
    headers: dict[str, str]
    offset: int
    length: int
    expires_s: int
    kind: str
    revision: int
    payload_sha256: str
    block_sha256: str | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _client_and_key(archive: Archive, key: str) -> tuple[Any, str, str]:
    """(boto3 client, bucket, full object key) of an S3 backend."""
    if isinstance(archive, S3Archive):
        return archive.client, archive.bucket, archive.prefix + key
    if isinstance(archive, ObjectStoreArchive):
        return s3_client(archive.endpoint_url), archive.bucket, archive.prefix + key
    raise PresignUnsupported(
        f"the evidence archive ({getattr(archive, 'location', type(archive).__name__)}) cannot "
        "make download URLs; fetch the record instead (`geo-pipeline evidence get ... --out`)"
    )


def presign_record(
    conn: Conn,
    archive: Archive,
    tenant_id: str,
    sample_id: str,
    kind: str,
    revision: int | None = None,
    *,
    expires_s: int = 300,
) -> RangedURL:
    """A URL for the one WARC record holding ``kind`` of ``sample_id``, for an authorised
    tenant (module docstring); at most an hour. Evidence stored as a whole object has no
    range to sign: ``evidence.access.presign`` makes its URL."""
    obj = find_object(conn, tenant_id, sample_id, kind, revision)
    address = split_record_key(obj.storage_key)
    if address is None:
        raise PresignUnsupported(
            f"the {kind} of sample {sample_id} is not a WARC record (stored before WARC): "
            "use a whole-object URL or fetch it"
        )
    key, offset, length = address
    client, bucket, full_key = _client_and_key(archive, key)
    expires = max(1, min(expires_s, PRESIGN_MAX_S))
    byte_range = f"bytes={offset}-{offset + length - 1}"
    url: str = client.generate_presigned_url(
        "get_object",
        Params={"Bucket": bucket, "Key": full_key, "Range": byte_range},
        ExpiresIn=expires,
    )
    return RangedURL(
        url=url, headers={"Range": byte_range}, offset=offset, length=length, expires_s=expires,
        kind=obj.kind, revision=obj.revision, payload_sha256=obj.sha256,
        block_sha256=obj.block_sha256,
    )  # fmt: skip
