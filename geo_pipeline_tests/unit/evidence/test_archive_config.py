"""GEO_EVIDENCE_URL chooses the backend; bad values get a message that says what is expected."""

from __future__ import annotations

import pytest

from geo_pipeline.evidence.archive import LocalArchive, S3Archive, object_key
from geo_pipeline.evidence.backend import archive_from_url
from geo_pipeline.evidence.s3_async import ObjectStoreArchive


def test_file_url_is_a_local_directory(tmp_path):
    archive = archive_from_url((tmp_path / "ev dir").as_uri())
    assert isinstance(archive, LocalArchive) and archive.root == (tmp_path / "ev dir")


def test_s3_url_uses_bucket_prefix_and_endpoint_from_env(monkeypatch):
    monkeypatch.setenv("GEO_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "topsecret-value")
    archive = archive_from_url("s3://evidence-bucket/geo/prod/")
    assert isinstance(archive, ObjectStoreArchive)  # the worker's async client by default
    assert (archive.bucket, archive.prefix) == ("evidence-bucket", "geo/prod/")
    assert archive.endpoint_url == "http://127.0.0.1:9"
    assert "topsecret-value" not in archive.location  # messages never carry credentials (D2)

    monkeypatch.setenv("GEO_S3_CLIENT", "boto3")
    archive = archive_from_url("s3://evidence-bucket/geo/prod/")
    assert isinstance(archive, S3Archive)
    assert (archive.bucket, archive.prefix) == ("evidence-bucket", "geo/prod/")
    assert archive.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert "topsecret-value" not in archive.location

    monkeypatch.setenv("GEO_S3_CLIENT", "s3fs")
    with pytest.raises(ValueError, match="GEO_S3_CLIENT"):
        archive_from_url("s3://evidence-bucket/")


def test_fsync_policy_is_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("GEO_EVIDENCE_FSYNC", "sometimes")
    with pytest.raises(ValueError, match="GEO_EVIDENCE_FSYNC"):
        archive_from_url(tmp_path.as_uri())
    monkeypatch.setenv("GEO_EVIDENCE_FSYNC", "none")
    archive = archive_from_url(tmp_path.as_uri())
    assert isinstance(archive, LocalArchive) and archive.fsync == "none"


def test_env_variable_is_read(monkeypatch, tmp_path):
    monkeypatch.setenv("GEO_EVIDENCE_URL", tmp_path.as_uri())
    assert isinstance(archive_from_url(), LocalArchive)


@pytest.mark.parametrize("bad", ["http://x/y", "s3://", "file://otherhost/x", "/just/a/path"])
def test_bad_urls_say_what_is_expected(bad):
    with pytest.raises(ValueError, match="GEO_EVIDENCE_URL"):
        archive_from_url(bad)


def test_keys_follow_tenant_run_sample_revision_kind():
    assert object_key("t", "r", "s1", "sha256-ab", "thumbnail") == "t/r/s1/sha256-ab/thumbnail"
