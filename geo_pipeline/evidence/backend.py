"""Choosing the evidence archive from ``GEO_EVIDENCE_URL``: a local directory, S3 through
obstore (the worker's async uploads, ``evidence.s3_async``) or S3 through boto3
(``GEO_S3_CLIENT=boto3``). Apart from the backends, so that the backends import the archive's
contract and nothing imports back.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from geo_pipeline.evidence.archive import (
    DEFAULT_EVIDENCE_DIR,
    EVIDENCE_URL_ENV,
    S3_CLIENT_ENV,
    Archive,
    LocalArchive,
    S3Archive,
    s3_client,
)
from geo_pipeline.evidence.s3_async import ObjectStoreArchive
from geo_pipeline.settings import settings


def archive_from_url(url: str | None = None) -> Archive:
    """The archive named by ``url`` or ``GEO_EVIDENCE_URL``; unset = a local directory under
    ``~/.geo_pipeline/evidence`` (the embedded default)."""
    url = url or settings().evidence_url or DEFAULT_EVIDENCE_DIR.as_uri()
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{EVIDENCE_URL_ENV}: file URLs must be file:///absolute/path: {url}")
        return LocalArchive(unquote(parts.path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"{EVIDENCE_URL_ENV}: s3 URLs must name a bucket: {url}")
        client = settings().s3_client or "obstore"
        if client == "boto3":
            return S3Archive(s3_client(), parts.netloc, parts.path)
        if client != "obstore":
            raise ValueError(f"{S3_CLIENT_ENV} must be obstore or boto3, not {client!r}")
        return ObjectStoreArchive(parts.netloc, parts.path)
    raise ValueError(f"{EVIDENCE_URL_ENV} must be s3://bucket/prefix or file:///path, not {url!r}")
