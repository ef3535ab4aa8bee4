"""The one aggregation service (R7) never contradicts itself: a screenshot still pending is counted as pending evidence, not
only named as a reason; a cancelled run says so; answers in review or with failed analysis show
in the text of `runs show`, not only in its JSON. (A sample failed in collection cannot hold
evidence -- the evidence_after_completion constraint -- so it is never awaiting analysis.)"""

from __future__ import annotations

import psycopg
from click.testing import CliRunner
from psycopg.rows import dict_row

from geo_pipeline.cli.main import cli
from geo_pipeline.store import status as statusmod
from geo_pipeline_tests.integration.analysis.helpers import store_answer
from geo_pipeline_tests.integration.execution.helpers import make_run


def _conn(db_url: str) -> psycopg.Connection:
    return psycopg.connect(db_url, row_factory=dict_row, autocommit=True)  # type: ignore[arg-type]


def test_a_pending_screenshot_is_counted_as_pending_evidence(db_url):
    ids = make_run(db_url, "r-st-shot", questions=1, dispatch=False)
    with _conn(db_url) as conn:
        store_answer(conn, ids[0], "瑞幸", evidence="partial")
        conn.execute(
            "UPDATE geo.samples SET evidence_reason = 'SCREENSHOT_PENDING' WHERE sample_id = %s",
            (ids[0],),
        )
        st = statusmod.run_status(conn, "r-st-shot")
    reasons = st.counts.evidence_reasons
    assert reasons.get("SCREENSHOT_PENDING") == 1
    assert st.counts.evidence.get("pending", 0) >= reasons["SCREENSHOT_PENDING"]


def test_a_cancelled_run_says_so(db_url):
    ids = make_run(db_url, "r-st-cancel", questions=1, dispatch=False)
    with _conn(db_url) as conn:
        store_answer(conn, ids[0], "瑞幸")
        conn.execute("UPDATE geo.runs SET cancel_requested_at = now() WHERE run_id = 'r-st-cancel'")
        st = statusmod.run_status(conn, "r-st-cancel")
    assert st.cancelled is True and st.as_dict()["cancelled"] is True
    res = CliRunner().invoke(cli, ["runs", "show", "r-st-cancel"], env={"GEO_DATABASE_URL": db_url})
    assert "cancelled" in res.output.splitlines()[0], res.output


def test_review_and_failed_analysis_show_in_the_text(db_url):
    ids = make_run(db_url, "r-st-review", questions=2, dispatch=False)
    with _conn(db_url) as conn:
        for sid in ids:
            store_answer(conn, sid, "瑞幸")
        conn.execute("UPDATE geo.samples SET analysis_state = 'review' WHERE sample_id = %s",
                     (ids[0],))  # fmt: skip
        conn.execute("UPDATE geo.samples SET analysis_state = 'failed' WHERE sample_id = %s",
                     (ids[1],))  # fmt: skip
    res = CliRunner().invoke(cli, ["runs", "show", "r-st-review"], env={"GEO_DATABASE_URL": db_url})
    assert res.exit_code == 0, res.output
    # the analysis states in the words of the reports (issue #34): an invalid answer is
    # "invalid", never "failed" (that word is for a sample whose collection failed)
    [line] = [ln for ln in res.output.splitlines() if ln.startswith("analysis: ")]
    assert "for review 1" in line and "invalid 1" in line and "failed" not in line, line
