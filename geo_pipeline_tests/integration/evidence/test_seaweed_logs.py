"""``weed mini`` keeps its log files with its data (issue 30, found as an ordinary user on a fresh
clone: every SeaweedFS start left ``weed.<host>.<user>.log.INFO/WARNING/ERROR.*`` files in the
machine's temporary directory, which nothing removed). glog writes to ``os.TempDir()`` (TMPDIR)
unless ``-logdir`` is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from geo_pipeline.evidence import seaweed


def test_weed_writes_its_log_files_beside_its_data_not_in_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the weed child process inherits it
    server = seaweed.start_s3(tmp_path / "s3")
    try:
        server.client().list_buckets()
    finally:
        server.stop()
    left = sorted(p.name for p in temp.iterdir() if p.name.startswith("weed"))
    assert left == [], f"weed wrote to the temporary directory: {left}"
    kept = sorted(p.name for p in (tmp_path / "s3").iterdir() if p.name.startswith("weed."))
    assert kept, sorted(p.name for p in (tmp_path / "s3").iterdir())
