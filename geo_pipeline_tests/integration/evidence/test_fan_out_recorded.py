"""The fan-out reaches the answer row (issue 31, migration 0054): the search queries a
connector read and whether the engine searched are kept on ``geo.answers`` -- by the bundle
path and by the WARC path alike -- where analytics.fan_out reads them; an answer that reported
no search has an empty list and ``false``, not NULL (NULL is "recorded before 0054")."""

from __future__ import annotations

import dataclasses
from typing import Any

from geo_pipeline.evidence import archive_evidence, record_evidence
from geo_pipeline.evidence.recording import prepare_warc_evidence
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline_tests.integration.evidence.helpers import make_evidence, seed_sample


def _answer(db: Any, sample_id: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT search_queries, web_search_used FROM geo.answers WHERE sample_id = %s",
        (sample_id,),
    ).fetchone()
    assert row is not None
    return dict(row)


def test_queries_and_the_search_flag_are_kept_on_the_answer(db, archive) -> None:
    searched = seed_sample(db)
    ev = dataclasses.replace(
        make_evidence(searched), search_queries=("luckin price", "瑞幸 优惠"), web_search_used=False
    )
    with db.transaction():
        record_evidence(db, archive_evidence(archive, searched, 1, ev, "off"))
    # the listed queries decide that it searched, whatever the flag said (Bright Data's
    # web_search_triggered can be false on answers that searched: research §2.3)
    assert _answer(db, searched.sample_id) == {
        "search_queries": ["luckin price", "瑞幸 优惠"],
        "web_search_used": True,
    }
    flag_only = seed_sample(db)
    ev = dataclasses.replace(make_evidence(flag_only), web_search_used=True)
    with db.transaction():
        record_evidence(db, archive_evidence(archive, flag_only, 1, ev, "off"))
    assert _answer(db, flag_only.sample_id) == {"search_queries": [], "web_search_used": True}
    plain = seed_sample(db)
    with db.transaction():
        record_evidence(db, archive_evidence(archive, plain, 1, make_evidence(plain), "off"))
    assert _answer(db, plain.sample_id) == {"search_queries": [], "web_search_used": False}


def test_the_warc_path_keeps_them_too(db, archive) -> None:
    ref = seed_sample(db)
    ev = dataclasses.replace(make_evidence(ref), search_queries=("coffee app",))
    stored = store_batch(archive, [prepare_warc_evidence(ref, 1, ev, "off")])
    with db.transaction():
        for item in stored:
            record_evidence(db, item)
    assert _answer(db, ref.sample_id) == {"search_queries": ["coffee app"], "web_search_used": True}
