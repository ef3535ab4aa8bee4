"""Authorised access (R20) and the archive contract, on SeaweedFS S3 and the directory backend:
a key or path alone grants nothing; tenant B never reads tenant A's evidence."""

from __future__ import annotations

import httpx
import pytest

from geo_pipeline.evidence import (
    EvidenceAccessDenied,
    EvidenceNotFound,
    LocalArchive,
    ObjectConflict,
    ObjectMissing,
    PresignUnsupported,
    S3Archive,
    archive_evidence,
    fetch_by_key,
    fetch_evidence_for,
    presign,
    record_evidence,
)
from geo_pipeline.evidence.archive import object_key
from geo_pipeline_tests.integration.evidence.helpers import (
    ANSWER,
    good_screenshot,
    make_evidence,
    seed_sample,
)


@pytest.fixture
def two_tenants(db, archive):
    a = seed_sample(db, tenant_id="tenant-a", policy="off")
    b = seed_sample(db, tenant_id="tenant-b", policy="off")
    for ref in (a, b):
        with db.transaction():
            record_evidence(db, archive_evidence(archive, ref, 1, make_evidence(ref), "off"))
    return a, b


def _key_of(db, sample_id, kind="answer_raw"):
    return db.execute(
        "SELECT storage_key FROM geo.evidence_objects WHERE sample_id = %s AND kind = %s",
        (sample_id, kind),
    ).fetchone()["storage_key"]


def test_owner_reads_its_evidence(db, archive, two_tenants):
    a, _ = two_tenants
    assert fetch_evidence_for(db, archive, "tenant-a", a.sample_id, "answer_raw").decode() == ANSWER


def test_other_tenant_is_refused_by_sample_id(db, archive, two_tenants):
    a, _ = two_tenants
    with pytest.raises(EvidenceAccessDenied, match="is visible to tenant tenant-b"):
        fetch_evidence_for(db, archive, "tenant-b", a.sample_id, "answer_raw")
    with pytest.raises(EvidenceAccessDenied):
        presign(db, archive, "tenant-b", a.sample_id, "answer_raw")


def test_unknown_sample_and_foreign_sample_look_the_same(db, archive, two_tenants):
    a, _ = two_tenants
    with pytest.raises(EvidenceAccessDenied) as foreign:
        fetch_evidence_for(db, archive, "tenant-b", a.sample_id, "answer_raw")
    ghost = "s" + "0" * 24
    with pytest.raises(EvidenceAccessDenied) as missing:
        fetch_evidence_for(db, archive, "tenant-b", ghost, "answer_raw")
    assert str(foreign.value).replace(a.sample_id, "X") == str(missing.value).replace(ghost, "X")


def test_other_tenant_is_refused_by_key(db, archive, two_tenants):
    a, b = two_tenants
    key_a = _key_of(db, a.sample_id)
    assert fetch_by_key(db, archive, "tenant-a", key_a, "answer_raw").decode() == ANSWER
    with pytest.raises(EvidenceAccessDenied):
        fetch_by_key(db, archive, "tenant-b", key_a)
    # Tenant B's own key works; the check is per key, not per prefix.
    key_b = _key_of(db, b.sample_id)
    assert fetch_by_key(db, archive, "tenant-b", key_b, "answer_raw").decode() == ANSWER


def test_other_tenant_is_refused_by_guessed_path(db, archive, two_tenants):
    a, b = two_tenants
    key_a = _key_of(db, a.sample_id)
    own_prefix = f"tenant-b/{b.run_id}/{b.sample_id}/"
    guesses = [
        key_a,
        own_prefix + "../../../" + key_a,  # climb out of one's own prefix
        "/" + key_a,
        key_a.replace("tenant-a", "tenant-b"),  # another tenant's layout, own name
        f"tenant-a/{a.run_id}/{a.sample_id}/latest/answer_raw",
        "../" + key_a,
    ]
    for guess in guesses:
        with pytest.raises(EvidenceAccessDenied):
            fetch_by_key(db, archive, "tenant-b", guess)


def test_storage_itself_refuses_traversal_keys(archive):
    for bad in ("../x", "a/../../x", "/etc/passwd", ""):
        with pytest.raises((ObjectMissing, ValueError)):
            archive.get(bad)
    with pytest.raises(ValueError):
        object_key("tenant-a", "..", "s1", "r", "answer_raw")
    with pytest.raises(ValueError):
        object_key("tenant-a/../b", "run", "s1", "r", "answer_raw")


def test_missing_kind_or_revision_is_not_found(db, archive, two_tenants):
    a, _ = two_tenants
    with pytest.raises(EvidenceNotFound):
        fetch_evidence_for(db, archive, "tenant-a", a.sample_id, "screenshot")
    with pytest.raises(EvidenceNotFound):
        fetch_evidence_for(db, archive, "tenant-a", a.sample_id, "answer_raw", revision=9)
    with pytest.raises(ValueError, match="unknown evidence kind"):
        fetch_evidence_for(db, archive, "tenant-a", a.sample_id, "passwords")


def test_presign_is_short_lived_and_only_after_authorisation(db, archive, two_tenants):
    a, _ = two_tenants
    # Text parts live in the answer's bundle: a URL would hand out every part, so none is made.
    with pytest.raises(PresignUnsupported, match="--out"):
        presign(db, archive, "tenant-a", a.sample_id, "answer_raw")
    shot = seed_sample(db, tenant_id="tenant-a", policy="required")
    with db.transaction():
        ev = make_evidence(shot, screenshot=good_screenshot())
        record_evidence(db, archive_evidence(archive, shot, 1, ev, "required"))
    if isinstance(archive, LocalArchive):
        with pytest.raises(PresignUnsupported, match="--out"):
            presign(db, archive, "tenant-a", shot.sample_id, "screenshot")
        return
    url = presign(db, archive, "tenant-a", shot.sample_id, "screenshot", expires_s=86_400)
    assert "X-Amz-Expires=3600" in url  # capped at an hour
    assert httpx.get(url).content == ev.screenshot.data
    with pytest.raises(EvidenceAccessDenied):
        presign(db, archive, "tenant-b", shot.sample_id, "screenshot")
    # The same object without a signature: a path is not a permission at the storage either.
    bare = url.split("?", 1)[0]
    assert httpx.get(bare).status_code in (401, 403)


def test_writes_are_idempotent_and_never_overwrite(archive):
    key = object_key("tenant-a", "run-1", "s" + "1" * 24, "sha256-x", "answer_raw")
    first = archive.put(key, b"hello", mime_type="text/plain")
    again = archive.put(key, b"hello", mime_type="text/plain")
    assert (first.created, again.created) == (True, False)
    with pytest.raises(ObjectConflict):
        archive.put(key, b"something else", mime_type="text/plain")
    assert archive.get(key, sha256=first.sha256) == b"hello"
    assert archive.exists(key) and not archive.exists(key + "-nope")
    with pytest.raises(ObjectMissing):
        archive.get(key + "-nope")


def test_delete_is_for_retention_only_and_idempotent(archive):
    key = object_key("tenant-a", "run-1", "s" + "2" * 24, "sha256-y", "answer_raw")
    archive.put(key, b"old", mime_type="text/plain")
    archive.delete(key)
    archive.delete(key)  # already gone: fine
    assert not archive.exists(key)


def test_dagster_s3_resource_builds_the_same_archive(s3_server, s3_archive):
    from dagster_aws.s3 import S3Resource

    from geo_pipeline.evidence import archive_from_s3_resource

    resource = S3Resource(
        endpoint_url=s3_server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key=s3_server.secret_key,
    )
    via_dagster = archive_from_s3_resource(resource, s3_archive.bucket, "evidence")
    key = object_key("tenant-a", "run-1", "s" + "3" * 24, "sha256-z", "answer_raw")
    written = via_dagster.put(key, b"from dagster", mime_type="text/plain")
    # The evidence package's own client reads what the Dagster resource's client wrote.
    assert s3_archive.get(key, sha256=written.sha256) == b"from dagster"


def test_s3_without_conditional_writes_behaves_the_same(s3_archive):
    """The HEAD-then-PUT path for stores that do not honour If-None-Match."""
    plain = S3Archive(s3_archive.client, s3_archive.bucket, "plain", conditional_writes=False)
    key = object_key("tenant-a", "run-1", "s" + "4" * 24, "sha256-w", "answer_raw")
    assert plain.put(key, b"v1", mime_type="text/plain").created
    assert not plain.put(key, b"v1", mime_type="text/plain").created
    with pytest.raises(ObjectConflict):
        plain.put(key, b"v2", mime_type="text/plain")
    assert plain.get(key) == b"v1"
