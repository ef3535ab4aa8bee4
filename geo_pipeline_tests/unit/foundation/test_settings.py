"""One settings module reads the environment; everything else receives values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import geo_pipeline
from geo_pipeline.settings import SettingsError, settings

PACKAGE = Path(geo_pipeline.__file__).resolve().parent
_READS_ENV = re.compile(r"\bos\.(environ|getenv|putenv)\b|\bfrom os import .*\b(environ|getenv)\b")


def test_only_the_settings_module_touches_the_environment():
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if _READS_ENV.search(path.read_text(encoding="utf-8"))
    )
    assert readers == ["settings.py"]


def test_typed_values_empty_means_unset_and_aws_region_fallback(monkeypatch):
    monkeypatch.setenv("GEO_S3_MAX_IN_FLIGHT", "32")
    monkeypatch.setenv("GEO_DATABASE_URL", "")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "cn-north-1")
    got = settings()
    assert got.s3_max_in_flight == 32
    assert got.database_url is None  # a compose file's `GEO_DATABASE_URL=` is not a URL of ""
    assert got.aws_region == "cn-north-1"
    monkeypatch.setenv("GEO_S3_MAX_IN_FLIGHT", "64")
    assert settings().s3_max_in_flight == 64  # read as the environment is now


def test_a_value_of_the_wrong_type_names_the_variable(monkeypatch):
    monkeypatch.setenv("GEO_S3_MAX_IN_FLIGHT", "many")
    with pytest.raises(SettingsError, match=r"GEO_S3_MAX_IN_FLIGHT='many'.*integer"):
        settings()
    monkeypatch.setenv("GEO_S3_MAX_IN_FLIGHT", "0")
    with pytest.raises(SettingsError, match=r"GEO_S3_MAX_IN_FLIGHT='0'"):
        settings()
