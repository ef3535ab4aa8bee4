"""A presigned URL for one record of a WARC batch object, against a real SeaweedFS (issue 33,
R20): the auditor's GET with the signed Range gets that record's bytes (one gzip member, one
WARC record whose digests are the database's); the same URL without the header, or with any
other range (the whole object with every sample's records), is refused by the store."""

from __future__ import annotations

import json

import httpx
import pytest

from geo_pipeline.evidence import EvidenceAccessDenied, PresignUnsupported
from geo_pipeline.evidence.archive import LocalArchive, S3Archive, s3_client
from geo_pipeline.evidence.presign_range import presign_record
from geo_pipeline.evidence.recording import prepare_warc_evidence, record_evidence_batch
from geo_pipeline.evidence.warc_store import store_batch, verify_record
from geo_pipeline_tests.integration.evidence.helpers import (
    ANSWER,
    good_screenshot,
    make_evidence,
    seed_sample,
)
from geo_pipeline_tests.integration.evidence.test_cli_evidence import cli  # noqa: F401
from geo_pipeline_tests.processes import outcome


def _stored(db, archive):
    ref = seed_sample(db, tenant_id="tenant-a", policy="required")
    seed_sample(db, tenant_id="tenant-b")
    ev = make_evidence(ref, screenshot=good_screenshot())
    with db.transaction():
        record_evidence_batch(db, store_batch(archive, [prepare_warc_evidence(ref, 1, ev,
                                                                              "required")]))  # fmt: skip
    return ref


@pytest.fixture(params=["obstore", "boto3"])
def s3_archive(request, obstore_archive):
    if request.param == "obstore":
        return obstore_archive
    return S3Archive(s3_client(), obstore_archive.bucket, obstore_archive.prefix)


def test_a_ranged_url_serves_one_record_and_nothing_else(db, s3_archive) -> None:
    ref = _stored(db, s3_archive)
    got = presign_record(db, s3_archive, "tenant-a", ref.sample_id, "answer_raw", expires_s=60)
    assert "range" in got.url.lower()  # the Range header is among the signed ones
    ok = httpx.get(got.url, headers=got.headers, timeout=30)
    assert ok.status_code == 206, ok.text
    assert len(ok.content) == got.length
    # One WARC record, as the database recorded it: both digests check.
    assert verify_record("auditor", ok.content, got.payload_sha256, got.block_sha256) == (
        ANSWER.encode()
    )
    shot = presign_record(db, s3_archive, "tenant-a", ref.sample_id, "screenshot")
    assert shot.offset != got.offset
    whole = shot.offset + shot.length  # the object holds more than the one record
    for headers in ({}, {"Range": f"bytes=0-{whole}"}, {"Range": f"bytes={shot.offset}-"
                                                                   f"{whole - 1}"}):  # fmt: skip
        refused = httpx.get(got.url, headers=headers, timeout=30)
        assert refused.status_code == 403, (headers, refused.status_code, refused.text[:200])
        assert ANSWER.encode() not in refused.content


def test_another_tenant_and_the_local_directory_get_no_url(db, s3_archive, tmp_path) -> None:
    ref = _stored(db, s3_archive)
    with pytest.raises(EvidenceAccessDenied):
        presign_record(db, s3_archive, "tenant-b", ref.sample_id, "answer_raw")
    with pytest.raises(PresignUnsupported):
        presign_record(db, LocalArchive(str(tmp_path)), "tenant-a", ref.sample_id, "answer_raw")


def test_cli_presign_of_a_record_prints_the_url_and_its_range(db, archive, cli) -> None:  # noqa: F811
    ref = _stored(db, archive)
    got = cli("get", ref.sample_id, "--tenant", "tenant-a", "--presign", "--expires", "60",
              "--json")  # fmt: skip
    if isinstance(archive, LocalArchive):
        assert got.returncode != 0, outcome(got)
        assert b"cannot make download URLs" in got.stdout + got.stderr, outcome(got)
        return
    assert got.returncode == 0, outcome(got)
    meta = json.loads(got.stdout)
    ok = httpx.get(meta["url"], headers=meta["headers"], timeout=30)
    assert ok.status_code == 206
    assert verify_record("cli", ok.content, meta["sha256"], meta["block_sha256"]) == ANSWER.encode()
    assert httpx.get(meta["url"], timeout=30).status_code == 403
