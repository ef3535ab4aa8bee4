"""The evidence archive: one interface, two backends (S3-compatible object storage and a local
directory), chosen by ``GEO_EVIDENCE_URL``.

* ``s3://bucket/prefix`` — AWS S3, MinIO, Aliyun OSS, SeaweedFS … through boto3. Endpoint from
  ``GEO_S3_ENDPOINT_URL`` (unset = AWS), region from ``AWS_REGION``/``AWS_DEFAULT_REGION``,
  credentials from boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profile,
  instance role) — never from code or configuration files of ours (D2). ``GEO_S3_ADDRESSING_STYLE``
  (``path``/``virtual``/``auto``) defaults to ``path`` when an endpoint is set, which MinIO and
  SeaweedFS need; OSS wants ``virtual``.
  The worker uses ``ObjectStoreArchive`` (``evidence.s3_async``: obstore, async, bounded in
  flight) unless ``GEO_S3_CLIENT=boto3``.
* ``file:///path`` — the embedded default for a laptop and the demo. ``GEO_EVIDENCE_FSYNC``
  says what is durable when a put returns: ``object`` (default) — the file's bytes and every
  directory entry leading to it are fsynced, so an object the database records at commit is on
  disk; ``none`` — left to the kernel's writeback (~30 s): a power loss can then lose objects
  the database already recorded (reads say ``ObjectMissing``), which only a machine whose
  evidence is disposable (benchmarks, the demo) should accept.

Invariants (R20, R21):
* Writes are content-addressed and idempotent: the caller's key names the content (see
  ``object_key``), a second write of the same bytes to the same key is a no-op, and a write of
  *different* bytes to an existing key is refused (``ObjectConflict``) — nothing is overwritten.
* Reads verify the sha256 the database recorded; a mismatch raises ``DigestMismatch``.
* A key is a location, not a permission: authorisation happens in ``evidence.access`` before any
  read; this module never decides who may read.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from geo_pipeline.settings import settings

EVIDENCE_URL_ENV = "GEO_EVIDENCE_URL"
EVIDENCE_FSYNC_ENV = "GEO_EVIDENCE_FSYNC"
FSYNC_POLICIES = ("object", "none")
S3_ENDPOINT_ENV = "GEO_S3_ENDPOINT_URL"
S3_ADDRESSING_ENV = "GEO_S3_ADDRESSING_STYLE"
S3_CLIENT_ENV = "GEO_S3_CLIENT"  # obstore (default) | boto3
DEFAULT_EVIDENCE_DIR = Path.home() / ".geo_pipeline" / "evidence"
SHA256_METADATA = "sha256"

# Key segments are ids from the database (tenant, run, sample) and our own kinds/revisions.
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}$")


class ArchiveError(RuntimeError):
    """Base class of archive errors; messages name the key and the backend, never credentials."""


class ArchiveUnavailable(ArchiveError):
    """The storage could not be reached or refused the request (network, auth, missing bucket)."""


class ObjectMissing(ArchiveError):
    """No object under the key."""


class ObjectConflict(ArchiveError):
    """Different content already sits under a content-addressed key; nothing was overwritten."""


class DigestMismatch(ArchiveError):
    """The bytes read back do not have the sha256 the database recorded: the object was changed
    or damaged after it was archived."""

    def __init__(self, key: str, expected: str, actual: str):
        super().__init__(
            f"evidence object {key!r} is corrupt or was altered: sha256 {actual} "
            f"does not match the recorded {expected}"
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class PresignUnsupported(ArchiveError):
    """The backend cannot hand out URLs (the local directory); stream the object instead."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def object_key(tenant_id: str, run_id: str, sample_id: str, revision: str, kind: str) -> str:
    """``{tenant}/{run}/{sample}/{revision}/{kind}`` (R20). Every segment is checked, so a key can
    never climb out of its tenant's prefix (no ``..``, no ``/`` inside a segment)."""
    segments = (tenant_id, run_id, sample_id, revision, kind)
    for seg in segments:
        if not _SEGMENT.match(seg) or ".." in seg:
            raise ValueError(f"invalid evidence key segment {seg!r}")
    return "/".join(segments)


def verify(key: str, data: bytes, expected_sha256: str | None) -> bytes:
    if expected_sha256 is not None:
        actual = sha256_hex(data)
        if actual != expected_sha256:
            raise DigestMismatch(key, expected_sha256, actual)
    return data


@dataclass(frozen=True)
class PutResult:
    key: str
    sha256: str
    size_bytes: int
    created: bool  # False when the same content was already there (idempotent re-write)


@runtime_checkable
class Archive(Protocol):
    """What the evidence layer needs from object storage."""

    @property
    def location(self) -> str:
        """Where the archive is, for messages (no credentials)."""
        ...

    def put(self, key: str, data: bytes, *, mime_type: str) -> PutResult: ...

    def get(self, key: str, *, sha256: str | None = None) -> bytes:
        """The object's bytes, verified against ``sha256`` when given."""
        ...

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (one record of a WARC object)."""
        ...

    def exists(self, key: str) -> bool: ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (retention finds orphaned objects with it)."""
        ...

    def delete(self, key: str) -> None:
        """Remove one object; a missing one is fine (a previous pass may have removed it)."""
        ...

    def presign(self, key: str, *, expires_s: int = 300) -> str: ...


# --------------------------------------------------------------------------- local directory
class LocalArchive:
    """A directory on local disk. Objects are written to a temporary file, fsynced (policy
    ``object``), then linked into place, so a crash leaves either no object or a whole one and an
    existing object is never replaced (``os.link`` fails when the target exists). The async
    forms run the blocking ones in threads, at most ``max_in_flight`` at once."""

    def __init__(self, root: str | Path, *, fsync: str | None = None, max_in_flight: int = 8):
        self.root = Path(root).resolve()
        self.fsync = fsync or settings().evidence_fsync or "object"
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"{EVIDENCE_FSYNC_ENV} must be one of {FSYNC_POLICIES}: {self.fsync}")
        self.max_in_flight = max_in_flight
        self._slots: asyncio.Semaphore | None = None

    @property
    def location(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or "\\" in key or ".." in key.split("/"):
            raise ObjectMissing(f"invalid evidence key {key!r}")
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise ObjectMissing(f"invalid evidence key {key!r}")
        return path

    def _make_dirs(self, directory: Path) -> list[Path]:
        """Create ``directory`` and missing parents; returns the ones created, outermost first."""
        missing = []
        d = directory
        while not d.exists() and d != self.root and d != d.parent:
            missing.append(d)
            d = d.parent
        for m in reversed(missing):
            try:
                m.mkdir()
            except FileExistsError:
                pass
        return list(reversed(missing))

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, key: str, data: bytes, *, mime_type: str, sha256: str | None = None) -> PutResult:
        del mime_type  # the database records it; a directory has nowhere to keep it
        digest = sha256 or sha256_hex(data)
        path = self._path(key)
        if path.exists():
            return self._same_or_conflict(key, path, digest, len(data))
        durable = self.fsync == "object"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            created = self._make_dirs(path.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".put-")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    if durable:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.link(tmp, path)
            except FileExistsError:
                return self._same_or_conflict(key, path, digest, len(data))
            finally:
                os.unlink(tmp)
            if durable:
                # The name must survive a crash too: the object's directory, and the parent of
                # every directory this put created.
                self._fsync_dir(path.parent)
                for d in created:
                    self._fsync_dir(d.parent)
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot write {key!r} under {self.location}: {exc}") from exc
        return PutResult(key, digest, len(data), created=True)

    def _slot(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        return self._slots

    async def aput(
        self, key: str, data: bytes, *, mime_type: str, sha256: str | None = None
    ) -> PutResult:
        async with self._slot():
            return await asyncio.to_thread(self.put, key, data, mime_type=mime_type, sha256=sha256)

    async def aget(self, key: str, *, sha256: str | None = None) -> bytes:
        async with self._slot():
            return await asyncio.to_thread(self.get, key, sha256=sha256)

    def _same_or_conflict(self, key: str, path: Path, digest: str, size: int) -> PutResult:
        if sha256_hex(path.read_bytes()) != digest:
            raise ObjectConflict(f"{key!r} under {self.location} holds different content")
        return PutResult(key, digest, size, created=False)

    def get(self, key: str, *, sha256: str | None = None) -> bytes:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ObjectMissing(f"no evidence object {key!r} under {self.location}") from None
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot read {key!r} under {self.location}: {exc}") from exc
        return verify(key, data, sha256)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (a WARC record in a batch object); the caller
        verifies them. Fewer bytes come back when the object is shorter (torn)."""
        path = self._path(key)
        try:
            with path.open("rb") as fh:
                fh.seek(offset)
                return fh.read(length)
        except FileNotFoundError:
            raise ObjectMissing(f"no evidence object {key!r} under {self.location}") from None
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot read {key!r} under {self.location}: {exc}") from exc

    def list_keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (a run's WARC objects, for retention's orphan sweep)."""
        base = self._path(prefix.rstrip("/"))
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".put-")
        )

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def delete(self, key: str) -> None:
        """Remove an object; missing is fine. Only the retention policy (D9) deletes: recording
        and repairs never do (R21)."""
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot delete {key!r} under {self.location}: {exc}") from exc

    def presign(self, key: str, *, expires_s: int = 300) -> str:
        raise PresignUnsupported(
            f"the local evidence archive ({self.location}) cannot make download URLs; "
            "fetch the object instead (e.g. `geo-pipeline evidence get ... --out FILE`)"
        )


# --------------------------------------------------------------------------- S3-compatible
class S3Archive:
    """A bucket (and key prefix) on any S3-compatible store, through a boto3 S3 client.

    The sha256 of each object is kept in its user metadata so that an idempotent re-write can be
    told from a conflict with one HEAD request; reads still hash the bytes themselves."""

    def __init__(
        self, client: Any, bucket: str, prefix: str = "", *, conditional_writes: bool = True
    ):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        # AWS S3, MinIO and SeaweedFS honour If-None-Match on PUT; a store that ignores it can
        # only replace an object with identical bytes, because keys are content-addressed.
        self.conditional_writes = conditional_writes

    @property
    def location(self) -> str:
        endpoint = getattr(getattr(self.client, "meta", None), "endpoint_url", "")
        return f"s3://{self.bucket}/{self.prefix} ({endpoint})"

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ObjectMissing(f"invalid evidence key {key!r}")
        return self.prefix + key

    @staticmethod
    def _code(exc: Exception) -> str:
        response = getattr(exc, "response", None) or {}
        return str(response.get("Error", {}).get("Code", ""))

    def _unavailable(self, action: str, key: str, exc: Exception) -> ArchiveUnavailable:
        return ArchiveUnavailable(f"cannot {action} {key!r} at {self.location}: {exc}")

    def _head(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head: dict[str, Any] = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return head
        except ClientError as exc:
            if self._code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._unavailable("look up", key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("look up", key, exc) from exc

    def put(self, key: str, data: bytes, *, mime_type: str) -> PutResult:
        """One conditional PUT (``If-None-Match: *``) for a new object — the common case; when
        the key exists (412), a HEAD tells an idempotent re-write from a conflict. Stores that
        do not support conditional writes fall back to HEAD-then-PUT."""
        from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

        digest = sha256_hex(data)
        args: dict[str, Any] = dict(
            Bucket=self.bucket,
            Key=self._key(key),
            Body=data,
            ContentType=mime_type,
            Metadata={SHA256_METADATA: digest},
        )
        if self.conditional_writes:
            try:
                self.client.put_object(IfNoneMatch="*", **args)
                return PutResult(key, digest, len(data), created=True)
            except ParamValidationError:  # a boto3 too old to send the header
                self.conditional_writes = False
            except ClientError as exc:
                code = self._code(exc)
                if code in ("NotImplemented", "501"):
                    self.conditional_writes = False
                elif code not in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                    raise self._unavailable("write", key, exc) from exc
            except BotoCoreError as exc:
                raise self._unavailable("write", key, exc) from exc
        head = self._head(key)
        if head is not None:
            stored = (head.get("Metadata") or {}).get(SHA256_METADATA)
            if stored is None:  # written by something else: compare the bytes themselves
                stored = sha256_hex(self.get(key))
            if stored != digest:
                raise ObjectConflict(f"{key!r} at {self.location} holds different content")
            return PutResult(key, digest, len(data), created=False)
        try:
            self.client.put_object(**args)
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("write", key, exc) from exc
        return PutResult(key, digest, len(data), created=True)

    def get(self, key: str, *, sha256: str | None = None) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            data: bytes = response["Body"].read()
        except ClientError as exc:
            if self._code(exc) in ("404", "NoSuchKey", "NotFound"):
                raise ObjectMissing(f"no evidence object {key!r} at {self.location}") from None
            raise self._unavailable("read", key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("read", key, exc) from exc
        return verify(key, data, sha256)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """One ranged GET (a WARC record in a batch object); the caller verifies the bytes."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._key(key),
                Range=f"bytes={offset}-{offset + length - 1}",
            )  # fmt: skip
            data: bytes = response["Body"].read()
        except ClientError as exc:
            if self._code(exc) in ("404", "NoSuchKey", "NotFound"):
                raise ObjectMissing(f"no evidence object {key!r} at {self.location}") from None
            if self._code(exc) in ("416", "InvalidRange"):
                return b""  # the object is shorter than the index says: torn
            raise self._unavailable("read", key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("read", key, exc) from exc
        return data

    def list_keys(self, prefix: str) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        keys: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix)
            )
            for page in pages:
                keys += [o["Key"][len(self.prefix) :] for o in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("list", prefix, exc) from exc
        return sorted(keys)

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def delete(self, key: str) -> None:
        """Remove an object; missing is fine (S3 DeleteObject is idempotent). Only the retention
        policy (D9) deletes: recording and repairs never do (R21)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("delete", key, exc) from exc

    def presign(self, key: str, *, expires_s: int = 300) -> str:
        url: str = self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._key(key)},
            ExpiresIn=expires_s,
        )
        return url

    def ensure_bucket(self) -> None:
        """Create the bucket if it is missing (tests and the demo; production buckets are
        provisioned by their owners)."""
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self.client.create_bucket(Bucket=self.bucket)


def s3_client(
    endpoint_url: str | None = None,
    *,
    region: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    addressing_style: str | None = None,
) -> Any:
    """A boto3 S3 client with bounded timeouts and retries (D4). Unset arguments come from the
    environment (module docstring)."""
    import boto3
    from botocore.config import Config

    env = settings()
    endpoint_url = endpoint_url or env.s3_endpoint_url or None
    region = region or env.aws_region
    style = addressing_style or env.s3_addressing_style or ("path" if endpoint_url else "auto")
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": style},
        connect_timeout=5,
        read_timeout=30,
        retries={"max_attempts": 3, "mode": "standard"},
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region or "us-east-1",
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=config,
    )


def s3_archive_from_client(client: Any, bucket: str, prefix: str = "") -> S3Archive:
    """The S3 backend over an existing boto3 client, e.g. ``S3Resource.get_client()`` of
    ``dagster_aws.s3`` in the Dagster layer."""
    return S3Archive(client, bucket, prefix)


def archive_from_s3_resource(resource: Any, bucket: str, prefix: str = "") -> S3Archive:
    """The S3 backend from a ``dagster_aws.s3.S3Resource`` (its ``get_client()``)."""
    return s3_archive_from_client(resource.get_client(), bucket, prefix)


async def aput(
    archive: Archive, key: str, data: bytes, *, mime_type: str, sha256: str | None = None
) -> PutResult:
    """``archive.aput`` where the backend has one (on the event loop), else ``put`` in a thread.
    ``sha256``: the hex digest of ``data`` when the caller has it already (a content-addressed
    key names it): the backend records it instead of hashing the bytes again."""
    native = getattr(archive, "aput", None)
    if native is not None:
        if sha256 is None:
            result: PutResult = await native(key, data, mime_type=mime_type)
        else:
            result = await native(key, data, mime_type=mime_type, sha256=sha256)
        return result
    return await asyncio.to_thread(archive.put, key, data, mime_type=mime_type)


async def aget(archive: Archive, key: str, *, sha256: str | None = None) -> bytes:
    native = getattr(archive, "aget", None)
    if native is not None:
        data: bytes = await native(key, sha256=sha256)
        return data
    return await asyncio.to_thread(archive.get, key, sha256=sha256)


def read_range(archive: Archive, key: str, offset: int, length: int) -> bytes:
    """``length`` bytes of ``key`` from ``offset``: one ranged GET where the backend has one,
    else the whole object, sliced. Unverified: the caller checks the record's digests."""
    ranged = getattr(archive, "get_range", None)
    if ranged is not None:
        data: bytes = ranged(key, offset, length)
        return data
    return archive.get(key)[offset : offset + length]
