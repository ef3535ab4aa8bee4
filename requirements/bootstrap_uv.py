"""Install the pinned uv (requirements/uv.txt) as a single binary, with nothing but the standard
library: no pip, no ``venv`` module, no ensurepip. So ``make demo`` and ``make test`` work on a
Debian/Ubuntu system Python (PEP 668, ``externally-managed-environment``, and often no
python3-venv) as on any other Python >= 3.11: uv then makes the project's virtualenv itself.

    python3 -I -S requirements/bootstrap_uv.py .venv-uv/bin/uv

The wheel for this machine is found through the package index's JSON simple API (PEP 691),
checked against the hashes in requirements/uv.txt (a wheel whose sha256 is not listed there is
refused, as ``pip --require-hashes`` would), and its ``uv`` executable is written to the target.
The index is ``PIP_INDEX_URL`` / ``UV_INDEX_URL`` when set, else PyPI; proxies come from the
usual ``HTTPS_PROXY`` variables. A ``uv`` already at the target with the pinned version is kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import stat
import subprocess
import sys
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

LOCK = Path(__file__).resolve().with_name("uv.txt")
DEFAULT_INDEX = "https://pypi.org/simple"


def pinned() -> tuple[str, set[str]]:
    text = LOCK.read_text(encoding="utf-8")
    version = re.search(r"^uv==([^\s\\]+)", text, re.MULTILINE)
    if version is None:
        raise SystemExit(f"{LOCK}: no 'uv==VERSION' line")
    return version.group(1), set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))


def wanted_tags() -> list[tuple[str, str]]:
    """(platform tag family, architecture) this machine runs, best first."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux"):
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
        kinds = ["manylinux", "musllinux"]
        if platform.libc_ver()[0] != "glibc":
            kinds.reverse()
        return [(k, arch) for k in kinds]
    if sys.platform == "darwin":
        return [("macosx", "arm64" if machine == "arm64" else "x86_64"), ("macosx", "universal2")]
    raise SystemExit(f"no uv wheel rule for {sys.platform}/{machine}: install uv and set UV=")


def choose(files: list[dict[str, object]], version: str) -> dict[str, object]:
    wheels = {
        str(f["filename"]): f
        for f in files
        if str(f["filename"]).startswith(f"uv-{version}-") and str(f["filename"]).endswith(".whl")
    }
    for kind, arch in wanted_tags():
        for name, f in wheels.items():
            tags = name[: -len(".whl")].split("-")[-1].split(".")
            if any(t.startswith(kind) and t.endswith("_" + arch) for t in tags):
                return f
    raise SystemExit(f"no uv {version} wheel for this machine among {len(wheels)} wheels")


def installed_version(target: Path) -> str | None:
    try:
        out = subprocess.run([str(target), "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.split()[1] if out.stdout.startswith("uv ") else None


def main(target: Path) -> None:
    version, hashes = pinned()
    if installed_version(target) == version:
        return
    index = os.environ.get("UV_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    request = urllib.request.Request(
        index.rstrip("/") + "/uv/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    wheel = choose(files, version)
    url = urllib.parse.urljoin(index.rstrip("/") + "/uv/", str(wheel["url"]))
    with urllib.request.urlopen(url, timeout=300) as r:
        data = r.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest not in hashes:
        raise SystemExit(f"{wheel['filename']}: sha256 {digest} is not in {LOCK}; refusing it")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        member = next(n for n in z.namelist() if re.fullmatch(r"uv-[^/]+\.data/scripts/uv", n))
        binary = z.read(member)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(binary)
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(target)
    print(f"installed uv {version} ({wheel['filename']}, sha256 checked) at {target}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 requirements/bootstrap_uv.py TARGET (.venv-uv/bin/uv)")
    main(Path(sys.argv[1]))
