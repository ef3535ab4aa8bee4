"""Archiving and recording evidence against real PostgreSQL and both archive backends (SeaweedFS
S3 and a directory): idempotent writes, repairs as revisions, screenshot failures that keep the
text, digest checks on read (R6, R17–R22)."""

from __future__ import annotations

import hashlib
import json

import pytest

from geo_pipeline.connectors.base import Attachment
from geo_pipeline.evidence import (
    ArchiveUnavailable,
    DigestMismatch,
    archive_evidence,
    archive_screenshot,
    fetch_evidence_for,
    list_objects,
    record_evidence,
    record_screenshot,
)
from geo_pipeline.evidence.access import read_object
from geo_pipeline.evidence.archive import Archive, PutResult
from geo_pipeline.evidence.display import DERIVED, answer_display
from geo_pipeline_tests.fixtures.s3 import overwrite_behind_our_back, stored_keys
from geo_pipeline_tests.integration.evidence.helpers import (
    ANSWER,
    apply_outcome,
    good_screenshot,
    make_evidence,
    seed_sample,
)


def _record(db, archived):
    with db.transaction():
        return record_evidence(db, archived)


def _counts(db, sample_id):
    one = lambda sql: db.execute(sql, (sample_id,)).fetchone()["n"]  # noqa: E731
    return {
        "answers": one("SELECT count(*) AS n FROM geo.answers WHERE sample_id = %s"),
        "citations": one("SELECT count(*) AS n FROM geo.citations WHERE sample_id = %s"),
        "objects": one("SELECT count(*) AS n FROM geo.evidence_objects WHERE sample_id = %s"),
    }


def test_complete_evidence_is_stored_with_digests_and_metadata(db, archive):
    ref = seed_sample(db)
    ev = make_evidence(ref, screenshot=good_screenshot())
    archived = archive_evidence(archive, ref, 1, ev, "required")
    outcome = _record(db, archived)

    assert (outcome.state, outcome.reason, outcome.answer_revision) == ("stored", None, 1)
    assert outcome.validity == "valid"
    rows = db.execute(
        "SELECT kind, revision, storage_key, sha256, size_bytes, mime_type, captured_at"
        " FROM geo.evidence_objects WHERE sample_id = %s ORDER BY kind",
        (ref.sample_id,),
    ).fetchall()
    # The display is derived, not stored (evidence.display): no answer_html part or row.
    assert sorted(r["kind"] for r in rows) == [
        "answer_raw", "citations", "response_raw", "screenshot", "thumbnail",
    ]  # fmt: skip
    text_kinds = {"answer_raw", "citations", "response_raw"}
    for r in rows:
        data = read_object(archive, r["storage_key"], r["kind"], r["sha256"])
        assert hashlib.sha256(data).hexdigest() == r["sha256"]
        assert len(data) == r["size_bytes"]
        assert r["storage_key"].startswith(f"{ref.tenant_id}/{ref.run_id}/{ref.sample_id}/")
        # The text parts share one object, the answer's bundle; pictures are objects of their own.
        kind = "bundle" if r["kind"] in text_kinds else r["kind"]
        assert r["storage_key"].endswith("/" + kind)
        assert r["revision"] == 1 and r["captured_at"] == ev.captured_at
    assert len({r["storage_key"] for r in rows if r["kind"] in text_kinds}) == 1
    by_kind = {r["kind"]: r for r in rows}
    raw_row = by_kind["response_raw"]
    # Raw bytes exactly as received (including bytes that are not valid UTF-8).
    assert read_object(archive, raw_row["storage_key"], "response_raw", raw_row["sha256"]) == (
        ev.raw_body
    )
    assert by_kind["screenshot"]["mime_type"] == "image/png"
    assert by_kind["thumbnail"]["mime_type"] == "image/jpeg"
    assert archive.get(by_kind["screenshot"]["storage_key"]) == ev.screenshot.data  # original size

    answer = db.execute(
        "SELECT * FROM geo.answers WHERE sample_id = %s", (ref.sample_id,)
    ).fetchone()
    assert answer["raw_text"] == ANSWER
    assert answer["sanitized_html"] == DERIVED  # made at read time, materialised by retention
    display = answer_display(answer["sanitized_html"], answer["raw_text"])
    assert "<table>" in display and "<script" not in display
    html = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_html").decode()
    assert html == display
    assert answer["validity"] == "valid" and answer["validity_rule_version"].startswith("validity-")
    cites = db.execute(
        "SELECT * FROM geo.citations WHERE sample_id = %s ORDER BY ordinal", (ref.sample_id,)
    ).fetchall()
    assert cites[0]["raw_url"] == "https://Review.Example.com:443/a?utm_source=openai&id=7#top"
    assert cites[0]["normalized_url"] == "https://review.example.com/a?id=7"
    assert cites[0]["registrable_domain"] == "example.com"
    assert cites[0]["citation_key"] == "1" and cites[0]["relation"] == "cited"
    assert cites[1]["registrable_domain"] == "example.com.cn"
    assert cites[1]["relation"] == "retrieved"
    cjson = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "citations")
    assert json.loads(cjson)[1]["normalized_url"] == "https://www.shop.example.com.cn/p/9"


def test_second_write_of_the_same_evidence_creates_nothing_new(db, archive):
    ref = seed_sample(db)
    ev = make_evidence(ref, screenshot=good_screenshot())
    first = _record(db, archive_evidence(archive, ref, 1, ev, "required"))
    keys, counts = stored_keys(archive), _counts(db, ref.sample_id)

    # A redelivered message / crashed-and-retried worker archives and records it all again.
    again = _record(db, archive_evidence(archive, ref, 2, ev, "required"))

    assert stored_keys(archive) == keys
    assert _counts(db, ref.sample_id) == counts == {"answers": 1, "citations": 2, "objects": 5}
    assert (again.state, again.answer_revision, again.new_answer_revision) == ("stored", 1, False)
    assert again.new_objects == () and first.new_answer_revision


def test_repair_adds_a_revision_and_the_old_one_stays_readable(db, archive):
    ref = seed_sample(db, policy="off")
    _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "off"))
    repaired_text = ANSWER + "\nUpdated: Acme also leads on service.\n"
    outcome = _record(
        db, archive_evidence(archive, ref, 2, make_evidence(ref, text=repaired_text), "off")
    )

    assert outcome.answer_revision == 2 and outcome.new_answer_revision
    revs = db.execute(
        "SELECT revision, raw_text FROM geo.answers WHERE sample_id = %s ORDER BY revision",
        (ref.sample_id,),
    ).fetchall()
    assert [(r["revision"], r["raw_text"]) for r in revs] == [(1, ANSWER), (2, repaired_text)]
    old = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw", revision=1)
    new = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw")
    assert old.decode() == ANSWER and new.decode() == repaired_text
    # Citations were unchanged: the same object, no second revision of that kind.
    kinds = {(o.kind, o.revision) for o in list_objects(db, ref.tenant_id, ref.sample_id)}
    assert ("citations", 2) not in kinds and ("answer_raw", 2) in kinds
    # Both revisions carry their own citation rows.
    n = db.execute(
        "SELECT count(*) AS n FROM geo.citations WHERE sample_id = %s AND revision = 2",
        (ref.sample_id,),
    ).fetchone()["n"]
    assert n == 2


def test_unavailable_screenshot_leaves_text_and_a_later_one_adds_a_revision(db, archive):
    ref = seed_sample(db, policy="required")
    missing = Attachment(kind="screenshot", status="unavailable", reason="renderer crashed")
    archived = archive_evidence(archive, ref, 1, make_evidence(ref, screenshot=missing), "required")
    assert archived.screenshot_detail == "renderer crashed"
    outcome = _record(db, archived)
    assert (outcome.state, outcome.reason) == ("partial", "SCREENSHOT_UNAVAILABLE")
    assert "SCREENSHOT_UNAVAILABLE" in outcome.warnings
    answer = db.execute(
        "SELECT * FROM geo.answers WHERE sample_id = %s", (ref.sample_id,)
    ).fetchone()
    assert answer["raw_text"] == ANSWER and "SCREENSHOT_UNAVAILABLE" in answer["warnings"]

    first_shot = good_screenshot()
    late = archive_screenshot(archive, ref, 1, first_shot)
    with db.transaction():
        after = record_screenshot(db, late)
    assert (after.state, after.reason, after.answer_revision) == ("stored", None, 1)
    assert set(after.new_objects) == {"screenshot", "thumbnail"}
    answers = db.execute(
        "SELECT revision, raw_text, stored_at FROM geo.answers WHERE sample_id = %s",
        (ref.sample_id,),
    ).fetchall()
    assert [(a["revision"], a["raw_text"]) for a in answers] == [(1, ANSWER)]
    assert answers[0]["stored_at"] == answer["stored_at"]

    # A repaired (different) screenshot is the screenshot kind's revision 2; revision 1 stays.
    with db.transaction():
        record_screenshot(db, archive_screenshot(archive, ref, 2, good_screenshot(color=(1, 2, 3))))
    shot = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "screenshot", revision=1)
    assert shot == first_shot.data
    revs = [
        o.revision for o in list_objects(db, ref.tenant_id, ref.sample_id) if o.kind == "screenshot"
    ]
    assert revs == [1, 2]


def test_pending_screenshot_is_partial_with_pending_reason(db, archive):
    ref = seed_sample(db, policy="required")
    pending = Attachment(kind="screenshot", status="pending")
    outcome = _record(
        db, archive_evidence(archive, ref, 1, make_evidence(ref, screenshot=pending), "required")
    )
    assert (outcome.state, outcome.reason) == ("partial", "SCREENSHOT_PENDING")


def test_optional_policy_without_screenshot_is_stored_with_a_warning(db, archive):
    ref = seed_sample(db, policy="optional")
    outcome = _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "optional"))
    assert (outcome.state, outcome.reason) == ("stored", None)
    assert outcome.warnings == ("SCREENSHOT_UNAVAILABLE",)


def test_undecodable_screenshot_counts_as_unavailable(db, archive):
    ref = seed_sample(db, policy="required")
    junk = Attachment(kind="screenshot", status="available", data=b"<html>not an image</html>")
    archived = archive_evidence(archive, ref, 1, make_evidence(ref, screenshot=junk), "required")
    outcome = _record(db, archived)
    assert (outcome.state, outcome.reason) == ("partial", "SCREENSHOT_UNAVAILABLE")
    assert not any(o.kind == "screenshot" for o in archived.objects)


class _FailingKinds:
    """An archive that refuses writes of some kinds (storage down while uploading them)."""

    def __init__(self, inner: Archive, kinds: set[str]):
        self.inner, self.kinds = inner, kinds

    @property
    def location(self) -> str:
        return self.inner.location

    def put(self, key: str, data: bytes, *, mime_type: str) -> PutResult:
        if key.rsplit("/", 1)[-1] in self.kinds:
            raise ArchiveUnavailable(f"injected outage writing {key}")
        return self.inner.put(key, data, mime_type=mime_type)

    def get(self, key, *, sha256=None):
        return self.inner.get(key, sha256=sha256)

    def exists(self, key):
        return self.inner.exists(key)

    def presign(self, key, *, expires_s=300):
        return self.inner.presign(key, expires_s=expires_s)


def test_screenshot_upload_failure_keeps_the_text(db, archive):
    ref = seed_sample(db, policy="required")
    flaky = _FailingKinds(archive, {"screenshot"})
    ev = make_evidence(ref, screenshot=good_screenshot())
    outcome = _record(db, archive_evidence(flaky, ref, 1, ev, "required"))
    assert (outcome.state, outcome.reason) == ("partial", "SCREENSHOT_UNAVAILABLE")
    text = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw")
    assert text.decode() == ANSWER
    # The retry of the screenshot alone succeeds and touches nothing else.
    with db.transaction():
        after = record_screenshot(db, archive_screenshot(archive, ref, 1, ev.screenshot))
    assert after.state == "stored"
    assert _counts(db, ref.sample_id)["answers"] == 1


def test_text_upload_failure_is_failed_and_records_nothing(db, archive):
    ref = seed_sample(db, policy="off")
    broken = _FailingKinds(archive, {"bundle"})
    outcome = _record(db, archive_evidence(broken, ref, 1, make_evidence(ref), "off"))
    assert outcome.state == "failed" and outcome.reason.startswith("ARCHIVE_FAILED")
    assert _counts(db, ref.sample_id) == {"answers": 0, "citations": 0, "objects": 0}
    # A later successful attempt records it (failed -> stored is an allowed move).
    ok = _record(db, archive_evidence(archive, ref, 2, make_evidence(ref), "off"))
    assert (ok.state, ok.answer_revision) == ("stored", 1)


def test_record_runs_inside_the_callers_transaction(db, archive):
    ref = seed_sample(db, policy="off")
    archived = archive_evidence(archive, ref, 1, make_evidence(ref), "off")
    with pytest.raises(RuntimeError, match="caller aborts"), db.transaction():
        record_evidence(db, archived)
        raise RuntimeError("caller aborts (e.g. lost its lease)")
    assert _counts(db, ref.sample_id) == {"answers": 0, "citations": 0, "objects": 0}
    # The uploads stayed and are simply re-used by the retry.
    keys = stored_keys(archive)
    _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "off"))
    assert stored_keys(archive) == keys


def test_outcome_drives_the_callers_state_transition(db, archive):
    """The caller writes the outcome to geo.samples; the schema's state guards accept it, also
    for the repair that follows (partial -> stored)."""
    ref = seed_sample(db, policy="required")
    outcome = _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "required"))
    apply_outcome(db, ref, outcome)
    assert _state(db, ref) == ("partial", "SCREENSHOT_UNAVAILABLE")
    repaired = _record(
        db,
        archive_evidence(
            archive, ref, 2, make_evidence(ref, screenshot=good_screenshot()), "required"
        ),
    )
    apply_outcome(db, ref, repaired)
    assert _state(db, ref) == ("stored", None)


def _state(db, ref):
    row = db.execute(
        "SELECT evidence_state, evidence_reason FROM geo.samples WHERE sample_id = %s",
        (ref.sample_id,),
    ).fetchone()
    return row["evidence_state"], row["evidence_reason"]


def test_a_worse_later_attempt_never_moves_the_state_backwards(db, archive):
    ref = seed_sample(db, policy="required")
    good = make_evidence(ref, screenshot=good_screenshot())
    apply_outcome(db, ref, _record(db, archive_evidence(archive, ref, 1, good, "required")))
    assert _state(db, ref) == ("stored", None)

    # A changed answer without a screenshot is kept as revision 2, but stored stays stored.
    worse = make_evidence(ref, text=ANSWER + "\nMore.\n")
    outcome = _record(db, archive_evidence(archive, ref, 2, worse, "required"))
    assert (outcome.state, outcome.answer_revision) == ("stored", 2)
    assert "SCREENSHOT_UNAVAILABLE" in outcome.warnings
    # An attempt whose upload failed records nothing and does not fail the stored evidence.
    broken = _FailingKinds(archive, {"bundle"})
    third = make_evidence(ref, text=ANSWER + "\nEven more.\n")
    failed = _record(db, archive_evidence(broken, ref, 3, third, "required"))
    assert failed.state == "stored" and "ARCHIVE_FAILED" in failed.warnings
    assert _counts(db, ref.sample_id)["answers"] == 2
    apply_outcome(db, ref, failed)  # the guard would reject stored -> failed; nothing to apply


def test_digest_mismatch_on_read_is_detected(db, archive):
    ref = seed_sample(db, policy="off")
    _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "off"))
    key = db.execute(
        "SELECT storage_key FROM geo.evidence_objects WHERE sample_id = %s AND kind = 'answer_raw'",
        (ref.sample_id,),
    ).fetchone()["storage_key"]
    overwrite_behind_our_back(archive, key, b"Acme is the worst brand.")
    with pytest.raises(DigestMismatch, match="corrupt or was altered") as info:
        fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_raw")
    assert info.value.expected != info.value.actual
