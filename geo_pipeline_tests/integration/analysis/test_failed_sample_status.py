"""One truth for a sample whose collection failed: the analyst view ``analytics.sample_status``
said ``mention_status = 'analysing'`` for it (its analysis layer stays ``pending``: there is no
answer to analyse), while the report's words, the CSV, the JSON, ``analytics.brand_metrics``'s
``failed_samples`` and ``words.evidence_status(state, reason, collection)`` all say it failed
(issue #34's vocabulary). An analyst counting ``mention_status = 'analysing'`` waited for
an analysis that will never come."""

from __future__ import annotations

import json

from geo_pipeline.analysis.run import analyse_run
from geo_pipeline.domain import words
from geo_pipeline.ops import export, report
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer


def test_a_failed_collection_reads_failed_in_the_view_as_in_the_report(db):
    samples = make_run(db, "r-failed-view", questions=["哪个咖啡品牌最好？"],
                       channels=[{"platform": "kimi", "device": "web"}], repeats=2,
                       monitor="luckin-coffee")  # fmt: skip
    ok, bad = samples[0]["sample_id"], samples[1]["sample_id"]
    store_answer(db, ok, "推荐瑞幸。")
    # the worker's path to a failed collection: claimed, then failed (invalid params, R13)
    db.execute(
        "UPDATE geo.samples SET submission_state = 'submitting', collection_state = 'running',"
        " attempt_no = attempt_no + 1, fencing_token = fencing_token + 1, lease_owner = 't',"
        " lease_until = now() + interval '5 minutes' WHERE sample_id = %s",
        (bad,),
    )
    db.execute(
        "UPDATE geo.samples SET submission_state = 'planned', collection_state = 'failed',"
        " collection_reason = 'invalid_params', lease_owner = NULL, lease_until = NULL,"
        " completed_at = now() WHERE sample_id = %s",
        (bad,),
    )
    db.commit()
    analyse_run(db, "r-failed-view")
    db.commit()

    rep = report.build_report(db, "r-failed-view")
    csv_row = next(r for r in export.csv_rows(rep) if r["sample_id"] == bad)
    js = next(s for s in json.loads(export.to_json(rep))["samples"] if s["sample_id"] == bad)
    view = db.execute(
        "SELECT sample_id, mention_status, collection_state FROM analytics.sample_status"
        " WHERE run_id = 'r-failed-view'"
    ).fetchall()
    status = {r["sample_id"]: r["mention_status"] for r in view}

    said = {
        "view": status[bad],
        "CSV": csv_row["evidence_status"],
        "JSON": js["evidence_status"],
        "words": words.evidence_status("pending", None, "failed"),
    }
    assert set(said.values()) == {"failed"}, f"the failed sample reads {said}"
    assert status[ok] == "known", status
    # the analyst table still counts it once, as failed, and the columns add up
    metrics = db.execute(
        "SELECT samples, n, invalid_samples, analysing_samples, review_samples, failed_samples"
        " FROM analytics.channel_brand_metrics WHERE run_id = 'r-failed-view'"
    ).fetchall()
    assert metrics
    for m in metrics:
        parts = (m["n"], m["invalid_samples"], m["analysing_samples"], m["review_samples"],
                 m["failed_samples"])  # fmt: skip
        assert parts == (1, 0, 0, 0, 1), dict(m)
        assert m["samples"] == sum(parts), dict(m)
