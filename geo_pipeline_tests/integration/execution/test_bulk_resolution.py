"""`samples resolve --run RUN --policy ...` (issue 37): every uncertain sample of a run resolved
by one policy, with a dry run, each recorded with who and why; the resubmitted ones are taken by
a real worker under a new idempotency key, the given-up ones end failed and are never re-sent."""

from __future__ import annotations

import asyncio
import json

import psycopg
from click.testing import CliRunner
from psycopg.rows import dict_row

from geo_pipeline.cli.main import cli
from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline_tests.integration.execution.helpers import FakeConnector, fetch, make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import (
    all_terminal,
    run_worker_until,
)


def _invoke(db_url: str, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args), env={"GEO_DATABASE_URL": db_url})
    return res.exit_code, res.output


def make_uncertain(db_url: str, ids: list[str]) -> None:
    """What a worker does when a send's outcome is unknown on a platform without lookup."""
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as c:
        rows = ex.claim_ids(c, ids, owner="worker:x:1", lease_s=30)  # type: ignore[arg-type]
        complete.finish_batch(
            c,  # type: ignore[arg-type]
            owner="worker:x:1",
            items=[
                complete.Finish(r["sample_id"], r["fencing_token"], "queued", sub_to="uncertain",
                                reason="acceptance_unknown:no_lookup", delay_s=3600,
                                outcome="uncertain", req_state="uncertain")
                for r in rows
            ],
        )  # fmt: skip


def snapshot(db_url: str) -> list[dict[str, object]]:
    return fetch(
        db_url,
        "SELECT sample_id, submission_state, collection_state, attempt_no FROM geo.samples "
        "ORDER BY sample_id",
    )


def test_bulk_policies_dry_run_and_record(db_url, redis_url, redis_ns):
    give = make_run(db_url, "r-give", questions=3)
    again = make_run(db_url, "r-again", questions=2)
    make_uncertain(db_url, give[:2] + again)
    before = snapshot(db_url)

    # Refused without a note; a dry run lists and writes nothing.
    code, out = _invoke(db_url, "samples", "resolve", "--run", "r-give", "--policy", "give-up")
    assert code != 0 and "--note is required" in out
    code, out = _invoke(db_url, "samples", "resolve", "--run", "r-give", "--policy", "give-up",
                        "--dry-run", "--json")  # fmt: skip
    assert code == 0, out
    dry = json.loads(out)
    assert [s["sample_id"] for s in dry["samples"]] == sorted(give[:2])
    assert dry["resolved"] == 0 and dry["dry_run"] is True
    assert snapshot(db_url) == before
    assert fetch(db_url, "SELECT count(*) AS n FROM geo.review_decisions")[0]["n"] == 0

    # give-up: those two end failed (not the third, never uncertain); nothing is re-sent.
    code, out = _invoke(db_url, "samples", "resolve", "--run", "r-give", "--policy", "give-up",
                        "--note", "platform support cannot say", "--actor", "dana")  # fmt: skip
    assert code == 0 and "2 sample(s) of r-give resolved with give-up by operator:dana" in out
    rows = {r["sample_id"]: r for r in snapshot(db_url)}
    assert {rows[s]["collection_state"] for s in give[:2]} == {"failed"}
    assert rows[give[2]]["collection_state"] == "queued"
    # The acceptance record keeps "unknown": never written down as a fact.
    reqs = fetch(
        db_url,
        "SELECT state, resolved_by FROM geo.upstream_requests WHERE sample_id = ANY(%s)",
        (give[:2],),
    )
    assert reqs == [{"state": "uncertain", "resolved_by": "operator:dana"}] * 2
    decisions = fetch(
        db_url,
        "SELECT sample_id, verdict, note, actor FROM geo.review_decisions ORDER BY sample_id",
    )
    assert decisions == [
        {"sample_id": s, "verdict": "given_up", "note": "give-up: platform support cannot say",
         "actor": "operator:dana"}
        for s in sorted(give[:2])
    ]  # fmt: skip
    log = fetch(db_url, "SELECT DISTINCT actor FROM geo.state_transitions WHERE sample_id = ANY(%s) "
                "AND to_state = 'failed'", (give[:2],))  # fmt: skip
    assert log == [{"actor": "operator:dana"}]
    # Run again: nothing left to resolve.
    code, out = _invoke(db_url, "samples", "resolve", "--run", "r-give", "--policy", "give-up",
                        "--note", "x", "--json")  # fmt: skip
    assert json.loads(out)["resolved"] == 0

    # accept-possible-second-charge: a new attempt each, under a new key, taken by a worker.
    code, out = _invoke(db_url, "samples", "resolve", "--run", "r-again", "--policy",
                        "accept-possible-second-charge", "--note", "a second charge is cheaper "
                        "than a missing day")  # fmt: skip
    assert code == 0, out
    fake = FakeConnector("deepseek")
    asyncio.run(
        run_worker_until(db_url, redis_url, redis_ns, {"deepseek": fake}, all_terminal(db_url))
    )
    assert dict(fake.submits) == {f"{s}:2": 1 for s in again} | {f"{give[2]}:1": 1}
    assert not any(k.startswith(tuple(give[:2])) for k in fake.submits)  # given up: never re-sent
    final = {r["sample_id"]: r["collection_state"] for r in snapshot(db_url)}
    assert [final[s] for s in again] == ["completed", "completed"]
    verdicts = fetch(
        db_url,
        "SELECT DISTINCT verdict FROM geo.review_decisions WHERE sample_id = ANY(%s)",
        (again,),
    )
    assert verdicts == [{"verdict": "resubmitted_possible_second_charge"}]
