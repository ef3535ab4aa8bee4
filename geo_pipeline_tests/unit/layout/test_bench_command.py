"""`make bench` is the one command that runs every bench (issue #39): one failing bench must not
keep the others from running, and the command still fails, naming the one that failed. Run here
on stand-in scripts in a scratch directory (the real benches take minutes), with the
repository's Makefile; ``-o install`` keeps make from touching the virtualenv."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_bench_runs_every_bench_even_after_one_fails(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    ran = tmp_path / "ran"
    ran.mkdir()
    for name, code in (("a_fails", 3), ("b_runs", 0), ("c_runs", 0)):
        (bench / f"{name}.py").write_text(
            f"from pathlib import Path\nPath({str(ran / name)!r}).touch()\nraise SystemExit({code})\n"
        )
    (bench / "_helper.py").write_text(
        f"from pathlib import Path\nPath({str(ran)!r}, 'h').touch()\n"
    )
    done = subprocess.run(
        ["make", "-s", "-f", str(REPO / "Makefile"), "-C", str(tmp_path), "-o", "install",
         "bench", f"PY={sys.executable}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    streams = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert sorted(p.name for p in ran.iterdir()) == ["a_fails", "b_runs", "c_runs"], streams
    assert done.returncode != 0, streams
    assert "bench/a_fails.py" in done.stdout + done.stderr, streams


def test_the_history_generator_answers_help() -> None:
    """``python bench/<name>.py --help`` says what a bench takes (CONTRIBUTING); the history
    generator read ``--help`` as a size (ValueError)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "scale_worlds.py"), "--help"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert "scale_worlds.py" in done.stdout, done.stdout
