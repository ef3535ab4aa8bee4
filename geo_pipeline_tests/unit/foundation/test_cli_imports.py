"""The CLI imports Dagster only in the commands that open a Dagster instance (issue 30: every
command paid about 1 s of CPU for ``import dagster`` through cli/dagster_instance.py). Counted,
not timed: a fresh interpreter walks every command's ``--help`` and says whether ``dagster`` was
imported."""

from __future__ import annotations

import json
import subprocess
import sys

from geo_pipeline_tests.processes import outcome

WALK = r"""
import contextlib, io, json, sys
import click
from geo_pipeline.cli.main import cli, main

def paths(group, prefix):
    for name, cmd in sorted(group.commands.items()):
        yield [*prefix, name]
        if isinstance(cmd, click.Group):
            yield from paths(cmd, [*prefix, name])

after = {}
for path in [[], *paths(cli, [])]:
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([*path, "--help"])
    after[" ".join(path) or "(root)"] = [code, "dagster" in sys.modules]
print(json.dumps(after))
"""


def test_no_command_imports_dagster_to_parse_its_arguments() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WALK], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, outcome(proc)
    seen = json.loads(proc.stdout)
    assert len(seen) > 20 and "runs show" in seen and "dagster setup" in seen, seen
    assert all(code == 0 for code, _ in seen.values()), seen
    with_dagster = sorted(name for name, (_, imported) in seen.items() if imported)
    assert not with_dagster, f"imported dagster: {with_dagster}"
