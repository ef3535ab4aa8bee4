"""The S3 backend on the worker's event loop: obstore (Rust ``object_store``), async.

Why not boto3 in threads: a boto3 PUT costs ~3 ms of Python CPU (SigV4 signing, botocore's
request pipeline) and a thread per request in flight; obstore signs and sends in Rust on its
own runtime, so the worker awaits many uploads at once for ~0.4 ms of CPU each (measured on
these machines against SeaweedFS). boto3 (``S3Archive``) stays for the Dagster side, where
``dagster_aws``' ``S3Resource`` hands out boto3 clients, and can be chosen for the worker with
``GEO_S3_CLIENT=boto3``.

Configuration is the environment's, as for boto3 (D2): ``GEO_S3_ENDPOINT_URL``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``GEO_S3_ADDRESSING_STYLE``, and credentials from
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, web identity or the
instance role (object_store reads them itself). Named profiles in ``~/.aws`` are boto3's only:
use ``GEO_S3_CLIENT=boto3`` there.

Same invariants as every backend (archive module docstring): writes are conditional
(``If-None-Match: *``, obstore's ``mode="create"``), a second write of the same bytes is a
no-op, different bytes under a key are refused, reads verify the recorded sha256.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from geo_pipeline.evidence.archive import (
    SHA256_METADATA,
    ArchiveUnavailable,
    ObjectConflict,
    ObjectMissing,
    PutResult,
    sha256_hex,
    verify,
)
from geo_pipeline.settings import settings

S3_MAX_IN_FLIGHT_ENV = "GEO_S3_MAX_IN_FLIGHT"
DEFAULT_MAX_IN_FLIGHT = 64


class ObjectStoreArchive:
    """A bucket (and key prefix) on any S3-compatible store, through obstore. Every method has
    a blocking form (the CLI, the Dagster side, tests) and an ``a``-prefixed async one (the
    worker), which waits for one of ``max_in_flight`` slots first, so a slow store makes the
    worker wait instead of piling up requests."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        max_in_flight: int | None = None,
        request_timeout_s: float = 30.0,
        retry_timeout_s: float = 10.0,
    ):
        from obstore.store import S3Store

        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        env = settings()
        self.endpoint_url = endpoint_url or env.s3_endpoint_url or None
        region = region or env.aws_region
        style = (
            addressing_style
            or env.s3_addressing_style
            or ("path" if self.endpoint_url else "virtual")
        )
        config: dict[str, Any] = {"region": region or "us-east-1"}
        if self.endpoint_url:
            config["endpoint"] = self.endpoint_url
        config["virtual_hosted_style_request"] = style == "virtual"
        self.store = S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options={
                "allow_http": bool(self.endpoint_url and self.endpoint_url.startswith("http:")),
                "connect_timeout": timedelta(seconds=5),
                "timeout": timedelta(seconds=request_timeout_s),
            },
            # Short: the worker retries an unavailable store itself, with backoff, while the
            # sample's lease holds (evidence_bridge); a long internal retry would only hide it.
            retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=retry_timeout_s)},
        )
        limit = max_in_flight or env.s3_max_in_flight or DEFAULT_MAX_IN_FLIGHT
        self.max_in_flight = limit
        self._slots: asyncio.Semaphore | None = None

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} ({self.endpoint_url or 'AWS'})"

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ObjectMissing(f"invalid evidence key {key!r}")
        return self.prefix + key

    def _unavailable(self, action: str, key: str, exc: Exception) -> ArchiveUnavailable:
        # obstore's messages carry the URL and the status, never the credentials.
        return ArchiveUnavailable(f"cannot {action} {key!r} at {self.location}: {exc}")

    def _slot(self) -> asyncio.Semaphore:
        # Made on first use, inside the event loop that will wait on it.
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        return self._slots

    # ------------------------------------------------------------------ async (the worker)
    async def aput(
        self, key: str, data: bytes, *, mime_type: str, sha256: str | None = None
    ) -> PutResult:
        """``sha256``: the digest of ``data`` (hex) when the caller has it (the batch store's
        content-addressed key names it): recorded as the object's, not computed again."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError

        digest = sha256 or sha256_hex(data)
        attributes = {"Content-Type": mime_type, SHA256_METADATA: digest}
        async with self._slot():
            try:
                await obstore.put_async(
                    self.store, self._key(key), data, mode="create", attributes=attributes
                )
                return PutResult(key, digest, len(data), created=True)
            except (AlreadyExistsError, PreconditionError, FileExistsError):
                pass
            except (BaseError, OSError) as exc:
                raise self._unavailable("write", key, exc) from exc
            stored = await self._aread(key)
        if sha256_hex(stored) != digest:
            raise ObjectConflict(f"{key!r} at {self.location} holds different content")
        return PutResult(key, digest, len(data), created=False)

    async def _aread(self, key: str) -> bytes:
        import obstore
        from obstore.exceptions import BaseError, NotFoundError

        try:
            result = await obstore.get_async(self.store, self._key(key))
            return bytes(await result.bytes_async())
        except (NotFoundError, FileNotFoundError):
            raise ObjectMissing(f"no evidence object {key!r} at {self.location}") from None
        except (BaseError, OSError) as exc:
            raise self._unavailable("read", key, exc) from exc

    async def aget(self, key: str, *, sha256: str | None = None) -> bytes:
        async with self._slot():
            data = await self._aread(key)
        return verify(key, data, sha256)

    # ------------------------------------------------------------------ blocking
    def put(self, key: str, data: bytes, *, mime_type: str) -> PutResult:
        import obstore
        from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError

        digest = sha256_hex(data)
        attributes = {"Content-Type": mime_type, SHA256_METADATA: digest}
        try:
            obstore.put(self.store, self._key(key), data, mode="create", attributes=attributes)
            return PutResult(key, digest, len(data), created=True)
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            pass
        except (BaseError, OSError) as exc:
            raise self._unavailable("write", key, exc) from exc
        if sha256_hex(self.get(key)) != digest:
            raise ObjectConflict(f"{key!r} at {self.location} holds different content")
        return PutResult(key, digest, len(data), created=False)

    def get(self, key: str, *, sha256: str | None = None) -> bytes:
        import obstore
        from obstore.exceptions import BaseError, NotFoundError

        try:
            data = bytes(obstore.get(self.store, self._key(key)).bytes())
        except (NotFoundError, FileNotFoundError):
            raise ObjectMissing(f"no evidence object {key!r} at {self.location}") from None
        except (BaseError, OSError) as exc:
            raise self._unavailable("read", key, exc) from exc
        return verify(key, data, sha256)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """One ranged GET (a WARC record in a batch object); the caller verifies the bytes."""
        import obstore
        from obstore.exceptions import BaseError, NotFoundError

        try:
            return bytes(obstore.get_range(self.store, self._key(key), start=offset,
                                           length=length))  # fmt: skip
        except (NotFoundError, FileNotFoundError):
            raise ObjectMissing(f"no evidence object {key!r} at {self.location}") from None
        except (BaseError, OSError) as exc:
            if "range" in str(exc).lower():
                return b""  # the object is shorter than the index says: torn
            raise self._unavailable("read", key, exc) from exc

    def list_keys(self, prefix: str) -> list[str]:
        import obstore
        from obstore.exceptions import BaseError

        keys: list[str] = []
        try:
            for chunk in obstore.list(self.store, self._key(prefix.rstrip("/")) + "/"):
                keys += [str(m["path"])[len(self.prefix) :] for m in chunk]
        except (BaseError, OSError) as exc:
            raise self._unavailable("list", prefix, exc) from exc
        return sorted(keys)

    def exists(self, key: str) -> bool:
        import obstore
        from obstore.exceptions import BaseError, NotFoundError

        try:
            obstore.head(self.store, self._key(key))
            return True
        except (NotFoundError, FileNotFoundError):
            return False
        except (BaseError, OSError) as exc:
            raise self._unavailable("look up", key, exc) from exc

    def delete(self, key: str) -> None:
        """Remove an object; missing is fine. Only the retention policy (D9) deletes."""
        import obstore
        from obstore.exceptions import BaseError, NotFoundError

        try:
            obstore.delete(self.store, self._key(key))
        except (NotFoundError, FileNotFoundError):
            pass
        except (BaseError, OSError) as exc:
            raise self._unavailable("delete", key, exc) from exc

    def presign(self, key: str, *, expires_s: int = 300) -> str:
        import obstore

        url: str = obstore.sign(self.store, "GET", self._key(key), timedelta(seconds=expires_s))
        return url
