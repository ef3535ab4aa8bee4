"""The answer's display derived off the hot path (issue #14, evidence.display): the worker no
longer renders; reads derive the same sanitised HTML from the digest-verified text, old bundles
with a stored answer_html part still read, and retention's materialisation stores the display
before the text may go. Real PostgreSQL, both archive backends."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.plan import sample_id_for
from geo_pipeline.evidence import (
    DigestMismatch,
    archive_evidence,
    fetch_by_key,
    fetch_evidence_for,
    find_object,
    record_evidence,
)
from geo_pipeline.evidence.access import read_object
from geo_pipeline.evidence.display import (
    DERIVED,
    answer_display,
    fill_displays,
    materialise_displays,
)
from geo_pipeline.evidence.recording import SampleRef
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline_tests.fixtures.s3 import overwrite_behind_our_back
from geo_pipeline_tests.integration.evidence.helpers import ANSWER, make_evidence, seed_sample

HOSTILE = ANSWER + '\n<img src="https://t.example/p.gif"><a href="javascript:x()">y</a>\n'


def _record(db, archived):
    with db.transaction():
        return record_evidence(db, archived)


def _answer(db, sample_id):
    return db.execute(
        "SELECT raw_text, sanitized_html FROM geo.answers WHERE sample_id = %s ORDER BY revision",
        (sample_id,),
    ).fetchall()


def test_derived_display_equals_what_the_worker_used_to_store(db, archive):
    old_ref, new_ref = seed_sample(db, policy="off"), seed_sample(db, policy="off")
    # As before issue #14: rendered by the worker, stored in the row and as a bundle part.
    _record(db, archive_evidence(archive, old_ref, 1, make_evidence(old_ref, text=HOSTILE), "off",
                                 render_display=True))  # fmt: skip
    _record(db, archive_evidence(archive, new_ref, 1, make_evidence(new_ref, text=HOSTILE), "off"))

    [old] = _answer(db, old_ref.sample_id)
    [new] = _answer(db, new_ref.sample_id)
    assert old["sanitized_html"] == render_answer(HOSTILE) != DERIVED
    assert new["sanitized_html"] == DERIVED and new["raw_text"] == HOSTILE
    display = answer_display(new["sanitized_html"], new["raw_text"])
    assert display == old["sanitized_html"]
    assert "<script" not in display and "javascript:" not in display and "<img" not in display
    # evidence get --kind answer_html: the stored part for the old bundle, derived for the new.
    old_obj = find_object(db, old_ref.tenant_id, old_ref.sample_id, "answer_html")
    new_obj = find_object(db, new_ref.tenant_id, new_ref.sample_id, "answer_html")
    assert old_obj.derived_from is None and new_obj.derived_from == "answer_raw"
    old_html = fetch_evidence_for(db, archive, old_ref.tenant_id, old_ref.sample_id, "answer_html")
    new_html = fetch_evidence_for(db, archive, new_ref.tenant_id, new_ref.sample_id, "answer_html")
    assert old_html == new_html == display.encode()
    by_key = fetch_by_key(db, archive, new_ref.tenant_id, new_obj.storage_key, "answer_html")
    assert by_key == new_html
    # The stored row's display is served as it is: nothing re-renders an old answer.
    assert answer_display(old["sanitized_html"], None) == old["sanitized_html"]
    assert answer_display(None, None) is None


def test_derived_display_is_made_only_from_verified_text(db, archive):
    ref = seed_sample(db, policy="off")
    _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "off"))
    obj = find_object(db, ref.tenant_id, ref.sample_id, "answer_html")

    assert read_object(archive, obj.storage_key, "answer_html", obj.sha256) == (
        render_answer(ANSWER).encode()
    )
    # The text part does not match the digest recorded for it (geo.evidence_objects is
    # immutable, so the row's digest is handed in): refused, never rendered.
    with pytest.raises(DigestMismatch):
        read_object(archive, obj.storage_key, "answer_html", "0" * 64)

    # The bundle itself changed in storage: refused as well.
    overwrite_behind_our_back(archive, obj.storage_key, b"geo-evidence-bundle/1\n{}\n<b>x</b>")
    with pytest.raises(DigestMismatch):
        fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_html")


def test_a_repair_derives_the_new_display_and_keeps_the_old_stored_one(db, archive):
    ref = seed_sample(db, policy="off")
    _record(db, archive_evidence(archive, ref, 1, make_evidence(ref), "off", render_display=True))
    repaired = ANSWER + "\n**Updated**: Acme also leads on service.\n"
    _record(db, archive_evidence(archive, ref, 2, make_evidence(ref, text=repaired), "off"))

    latest = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_html")
    first = fetch_evidence_for(db, archive, ref.tenant_id, ref.sample_id, "answer_html", 1)
    assert (
        latest.decode() == render_answer(repaired) and "<strong>Updated</strong>" in latest.decode()
    )
    assert first.decode() == render_answer(ANSWER)
    assert find_object(db, ref.tenant_id, ref.sample_id, "answer_html", 2).revision == 2


def test_materialise_stores_the_display_before_the_text_may_go(db, archive):
    first = seed_sample(db, policy="off")
    refs = [first] + [_same_run(db, first, i) for i in (1, 2)]
    texts = [ANSWER, HOSTILE, "<script>alert(1)</script>"]  # the last renders to nothing
    for ref, text in zip(refs, texts, strict=True):
        _record(db, archive_evidence(archive, ref, 1, make_evidence(ref, text=text), "off"))
    other = seed_sample(db, policy="off")  # another run: not touched
    _record(db, archive_evidence(archive, other, 1, make_evidence(other), "off"))
    run_id = first.run_id
    before = {r.sample_id: _answer(db, r.sample_id)[0] for r in refs}

    with db.transaction():
        n = materialise_displays(db, run_id, batch=2)  # more rows than one batch
    assert n == 2  # the empty display stays DERIVED (and derives to the same '')
    for ref, text in zip(refs, texts, strict=True):
        [row] = _answer(db, ref.sample_id)
        assert row["sanitized_html"] == render_answer(text)
        assert row["sanitized_html"] == answer_display(
            before[ref.sample_id]["sanitized_html"], before[ref.sample_id]["raw_text"]
        )
    with db.transaction():
        assert materialise_displays(db, run_id) == 0  # idempotent
    assert _answer(db, other.sample_id)[0]["sanitized_html"] == DERIVED


def _same_run(db, ref, repeat_index):
    # Another sample of the same run: another repeat, under its identity's id (the database
    # keeps every sample id the hash of its identity, migration 0033).
    seed = db.execute(
        "SELECT run_id, question_revision, platform, device, region, mode FROM geo.samples"
        " WHERE sample_id = %s",
        (ref.sample_id,),
    ).fetchone()
    keys = ("run_id", "question_revision", "platform", "device", "region", "mode")
    sample_id = sample_id_for(*(seed[k] for k in keys), repeat_index)
    with db.transaction():
        db.execute(
            "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
            " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
            " SELECT %s, run_id, tenant_id, batch_no, question_revision, question_index, platform,"
            " device, region, mode, %s, screenshot_policy FROM geo.samples WHERE sample_id = %s",
            (sample_id, repeat_index, ref.sample_id),
        )
    return SampleRef(sample_id=sample_id, run_id=ref.run_id, tenant_id=ref.tenant_id)


def test_fill_displays_gives_report_rows_the_derived_display_and_no_text(db, archive):
    ref = seed_sample(db, policy="off")
    _record(db, archive_evidence(archive, ref, 1, make_evidence(ref, text=HOSTILE), "off"))
    rows = [
        dict(r)
        for r in db.execute(
            "SELECT sample_id, sanitized_html,"
            " CASE WHEN sanitized_html = '' THEN raw_text END AS display_source"
            " FROM geo.answers WHERE sample_id = %s",
            (ref.sample_id,),
        ).fetchall()
    ] + [{"sample_id": "no-answer", "sanitized_html": None, "display_source": None}]
    fill_displays(rows)
    assert rows == [
        {"sample_id": ref.sample_id, "sanitized_html": render_answer(HOSTILE)},
        {"sample_id": "no-answer", "sanitized_html": None},
    ]
