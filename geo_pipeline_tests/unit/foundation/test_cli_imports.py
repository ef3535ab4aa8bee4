"""Parsing a command's arguments imports nothing heavy (issue 30: every command paid about 1 s of
CPU for ``import dagster`` through cli/dagster_instance.py, then 0.8-1.1 s for psycopg, redis,
pydantic, httpx... imported at the top of the command modules to print ``--help``). Counted, not
timed: a fresh interpreter walks every command's ``--help`` and lists the heavy packages that
were imported; bench/cli_startup.py measures the CPU seconds."""

from __future__ import annotations

import json
import subprocess
import sys

from geo_pipeline_tests.processes import outcome

# Each costs tens to hundreds of milliseconds of CPU to import (python -X importtime); a
# command imports them when it runs, never to parse its arguments. geo_pipeline.domain.config is
# the run config's pydantic models; geo_pipeline.settings is the pydantic-settings environment.
HEAVY = (
    "dagster", "psycopg", "psycopg2", "redis", "pydantic", "pydantic_settings", "httpx",
    "boto3", "botocore", "aiobotocore", "playwright", "jinja2", "warcio", "sqlalchemy", "rich",
    "yaml", "geo_pipeline.domain.config", "geo_pipeline.settings",
)  # fmt: skip

WALK = r"""
import contextlib, io, json, sys
HEAVY = %r
def heavy():
    return sorted(h for h in HEAVY if h in sys.modules)

import click
from geo_pipeline.cli.main import cli, main
at_import = heavy()

def paths(group, prefix):
    for name, cmd in sorted(group.commands.items()):
        yield [*prefix, name]
        if isinstance(cmd, click.Group):
            yield from paths(cmd, [*prefix, name])

after = {}
for path in [[], *paths(cli, [])]:
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([*path, "--help"])
    after[" ".join(path) or "(root)"] = [code, heavy()]
print(json.dumps({"at_import": at_import, "after": after}))
"""


def test_no_command_imports_a_heavy_package_to_parse_its_arguments() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WALK % (HEAVY,)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, outcome(proc)
    seen = json.loads(proc.stdout)
    after = seen["after"]
    assert len(after) > 20 and "runs show" in after and "dagster setup" in after, after
    assert all(code == 0 for code, _ in after.values()), after
    assert seen["at_import"] == [], f"import geo_pipeline.cli.main imported {seen['at_import']}"
    # Cumulative: the walk runs in one interpreter, so the first command that imports a heavy
    # package is the one named.
    first = {}
    for name, (_, imported) in after.items():
        for pkg in imported:
            first.setdefault(pkg, name)
    assert not first, f"heavy packages imported by --help (package: first command): {first}"
