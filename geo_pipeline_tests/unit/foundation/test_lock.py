"""The locked dependency set agrees with pyproject.toml, checked offline.

`make lock-check` (run by CI) regenerates the lock and diffs it; this test is the fast, offline
half that every `make test` runs: every requirement pyproject.toml declares is pinned in the lock
at a version inside its range, every pin carries hashes, and the two lock files never disagree
on a version (the dev lock is compiled with the runtime lock as a constraint).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def pins(path: Path) -> dict[str, str]:
    """name -> version for every pin in a hashed requirements file; asserts each has a hash."""
    out: dict[str, str] = {}
    text = path.read_text(encoding="utf-8")
    # A pin and its continuation lines (hashes, markers) form one logical entry.
    for entry in re.split(r"\n(?=\S)", text):
        m = PIN.match(entry)
        if not m:
            continue
        name = canonicalize_name(m.group(1))
        assert "--hash=sha256:" in entry, f"{path.name}: {name} is pinned without a hash"
        out[name] = m.group(2)
    return out


def declared(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    if extra:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def test_every_declared_requirement_is_pinned_inside_its_range() -> None:
    for lock, extra in (("main.txt", None), ("dev.txt", "dev")):
        pinned = pins(ROOT / "requirements" / lock)
        problems = []
        for req in declared(extra):
            version = pinned.get(canonicalize_name(req.name))
            if version is None:
                problems.append(f"{req.name} is not in requirements/{lock}")
            elif not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req.name}=={version} in {lock} is outside {req.specifier}")
        assert not problems, "run `make lock` and commit the result:\n" + "\n".join(problems)


def test_runtime_and_dev_locks_agree_and_build_backend_is_locked() -> None:
    main = pins(ROOT / "requirements" / "main.txt")
    dev = pins(ROOT / "requirements" / "dev.txt")
    differ = {n: (v, dev[n]) for n, v in main.items() if n in dev and dev[n] != v}
    assert not differ, f"main.txt and dev.txt pin different versions: {differ}"
    missing = sorted(set(main) - set(dev))
    assert not missing, f"dev.txt lacks runtime packages: {missing}"
    # The project is installed with --no-build-isolation: its build backend must be locked.
    for name in ("setuptools", "wheel"):
        assert name in main and name in dev, f"{name} (the build backend) is not locked"


def test_the_dagster_family_is_pinned_together() -> None:
    dev = pins(ROOT / "requirements" / "dev.txt")
    assert dev["dagster"] == dev["dagster-webserver"] == "1.13.27"
    assert dev["dagster-postgres"] == dev["dagster-aws"] == "0.29.27"
