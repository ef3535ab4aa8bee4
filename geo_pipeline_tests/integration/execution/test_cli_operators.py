"""Operator commands: `runs cancel`, `samples uncertain`, `samples resolve` (R12, R16, R24)."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

from geo_pipeline.cli.main import cli
from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run


def _invoke(db_url: str, args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(cli, args, env={"GEO_DATABASE_URL": db_url})
    return res.exit_code, res.output


def test_runs_cancel_records_intent_and_reports(db_url):
    ids = make_run(db_url, "r-cli-cancel", questions=3)
    code, out = _invoke(db_url, ["runs", "cancel", "r-cli-cancel", "--actor", "ops", "--json"])
    assert code == 0, out
    body = json.loads(out)
    assert body["cancelled_locally"] == len(ids) and body["accepted_open"] == []
    assert fetch(db_url, "SELECT cancel_requested_at IS NOT NULL AS c FROM geo.runs")[0]["c"]
    actors = fetch(db_url, "SELECT DISTINCT actor FROM geo.state_transitions")
    assert [a["actor"] for a in actors] == ["operator:ops"]
    code, out = _invoke(db_url, ["runs", "cancel", "nope"])
    assert code != 0 and "no run with id" in out


def test_samples_uncertain_and_resolve(db_url):
    ids = make_run(db_url, "r-cli-unc", questions=1)
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        c = conn
        row = ex.claim_ids(c, ids, owner="worker:x:1", lease_s=30)[0]  # type: ignore[arg-type]
        complete.finish_batch(
            c,  # type: ignore[arg-type]
            owner="worker:x:1",
            items=[
                complete.Finish(ids[0], row["fencing_token"], "queued", sub_to="uncertain",
                          reason="acceptance_unknown:no_lookup", delay_s=3600,
                          outcome="uncertain", req_state="uncertain")
            ],
        )  # fmt: skip
    code, out = _invoke(db_url, ["samples", "uncertain", "--json"])
    assert code == 0 and [r["sample_id"] for r in json.loads(out)] == ids
    code, out = _invoke(db_url, ["samples", "resolve", ids[0], "--not-accepted"])
    assert code != 0 and "--note" in out
    code, out = _invoke(
        db_url,
        [
            "samples",
            "resolve",
            ids[0],
            "--accepted-upstream-id",
            "up-9",
            "--actor",
            "ops",
            "--json",
        ],
    )
    assert code == 0 and json.loads(out)["verdict"] == "accepted", out
    s = fetch(db_url, "SELECT submission_state, upstream_id FROM geo.samples")[0]
    assert s == {"submission_state": "accepted", "upstream_id": "up-9"}
    req = fetch(db_url, "SELECT state, resolved_by FROM geo.upstream_requests")[0]
    assert req == {"state": "accepted", "resolved_by": "operator:ops"}
    assert fetch(db_url, "SELECT verdict FROM geo.review_decisions")[0]["verdict"] == "accepted"
    code, out = _invoke(db_url, ["samples", "resolve", ids[0], "--accepted-upstream-id", "x"])
    assert code != 0 and "not waiting" in out


def test_resolving_a_sample_that_is_not_uncertain_says_what_it_is(db_url):
    ids = make_run(db_url, "r-not-uncertain", questions=1)
    with psycopg.connect(db_url, row_factory=dict_row) as c:
        with pytest.raises(ex.NotUncertain, match="no sample with id 'nosuch'"):
            ex.resolve_uncertain(c, "nosuch", accepted_upstream_id=None, note=None, actor="op")
        with pytest.raises(
            ex.NotUncertain, match="its submission is planned, its collection queued"
        ):
            ex.resolve_uncertain(c, ids[0], accepted_upstream_id="u-1", note=None, actor="op")
        decisions = c.execute("SELECT count(*) AS n FROM geo.review_decisions").fetchone()
    assert decisions["n"] == 0  # nothing recorded for a refused verdict
