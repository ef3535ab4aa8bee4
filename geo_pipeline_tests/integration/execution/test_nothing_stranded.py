"""Every end state the chaos soak was found in (issue 30: `queued/planned upstream_failed`,
`queued/planned transient`, `queued/accepted lease_lost`, `queued/accepted lease_expired`,
`queued/uncertain`) is one a lane claims again, with no Redis hint at all: the states are driven
directly through the real transitions (claim, acceptance, fenced end, the sweeper's pass), then a
claim runs as a worker's lane runs it. Only an `uncertain` sample of a platform that can neither
look a request up nor re-send it safely waits, by design, for an operator (`samples resolve`).

Written while looking for a transition that strands a sample: none does (this passed on the code
as it was); the soak's leftovers were samples still moving when it stopped its processes."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline.worker.sweeper import SweepSettings, sweep_once
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run

OWNER = "worker:test:dead"
LANE = "worker:test:lane"
LOOKUP = ["deepseek", "doubao", "kimi", "qwen"]  # recoverable: lookup or idempotency keys
CHANNELS = [{"platform": "kimi", "device": "web"}, {"platform": "openai_sim", "device": "web"}]


def _claim(db: Any, sample_id: str, lease_s: float = 30.0) -> int:
    (row,) = ex.claim_ids(db, [sample_id], owner=OWNER, lease_s=lease_s)
    return int(row["fencing_token"])


def _accept(db: Any, sample_id: str, token: int) -> None:
    rec = ex.AcceptanceRecord(sample_id, token, f"task-{sample_id}")
    assert ex.record_acceptances(db, owner=OWNER, items=[rec]) == {sample_id}


def _end(db: Any, fin: complete.Finish) -> None:
    assert complete.finish_batch(db, owner=OWNER, items=[fin]).done, fin


def _state(db_url: str, sample_id: str) -> tuple[str, str, str | None]:
    (r,) = fetch(
        db_url,
        "SELECT collection_state, submission_state, collection_reason FROM geo.samples "
        "WHERE sample_id = %s",
        (sample_id,),
    )
    return r["collection_state"], r["submission_state"], r["collection_reason"]


def test_every_end_state_the_soak_left_is_claimed_again(db_url: str, db: Any) -> None:
    make_run(db_url, "r-strand", questions=5, channels=CHANNELS)
    rows = fetch(
        db_url,
        "SELECT sample_id, platform FROM geo.samples WHERE run_id = 'r-strand' ORDER BY sample_id",
    )
    kimi = [r["sample_id"] for r in rows if r["platform"] == "kimi"]
    sync = [r["sample_id"] for r in rows if r["platform"] == "openai_sim"]
    failed_up, transient, lost, expired, uncertain = kimi
    parked = sync[0]

    # accepted, then the upstream task failed: a new attempt, back to planned
    t = _claim(db, failed_up)
    _accept(db, failed_up, t)
    _end(db, complete.Finish(
        failed_up, t, "queued", sub_to="planned", reason="upstream_failed", outcome="failed",
        error_class="upstream_failed",
    ))  # fmt: skip
    # rejected before acceptance, retry later
    t = _claim(db, transient)
    _end(db, complete.Finish(
        transient, t, "queued", sub_to="planned", reason="transient", outcome="not_accepted",
        error_class="transient", req_state="not_accepted",
    ))  # fmt: skip
    # accepted, then the worker self-fenced and handed it back
    t = _claim(db, lost)
    _accept(db, lost, t)
    _end(db, complete.Finish(lost, t, "queued", reason="lease_lost"))
    # accepted, then the worker died: the lease runs out and the sweeper hands it back
    t = _claim(db, expired, lease_s=0.0)
    _accept(db, expired, t)
    # acceptance unknown on a platform that looks requests up: due for a lookup now
    t = _claim(db, uncertain)
    _end(db, complete.Finish(
        uncertain, t, "queued", sub_to="uncertain", reason="acceptance_unknown:resend_transient",
        outcome="uncertain", req_state="uncertain",
    ))  # fmt: skip
    # acceptance unknown on a platform with neither lookup nor keys: an operator decides
    t = _claim(db, parked)
    _end(db, complete.Finish(
        parked, t, "queued", sub_to="uncertain", reason="acceptance_unknown:no_lookup",
        outcome="uncertain", req_state="uncertain",
    ))  # fmt: skip

    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        swept = sweep_once(
            conn,  # type: ignore[arg-type]
            actor="sweeper:test",
            settings=SweepSettings(grace_s=0.0, hint_ttl_s=0.0),
            lookup_platforms=LOOKUP,
        )
    assert swept["expired"] == 1 and swept["hinted"] >= 5, swept
    assert _state(db_url, failed_up) == ("queued", "planned", "upstream_failed")
    assert _state(db_url, transient) == ("queued", "planned", "transient")
    assert _state(db_url, lost) == ("queued", "accepted", "lease_lost")
    assert _state(db_url, expired) == ("queued", "accepted", "lease_expired")
    assert _state(db_url, uncertain)[:2] == ("queued", "uncertain")

    claimed = ex.claim_fair(
        db, owner=LANE, platforms=["kimi"], want=100, lease_s=30, lookup_platforms=LOOKUP
    )
    assert sorted(r["sample_id"] for r in claimed) == sorted(kimi)
    by_id = {r["sample_id"]: r for r in claimed}
    assert by_id[failed_up]["attempt_no"] == 2 and by_id[transient]["attempt_no"] == 2
    assert by_id[lost]["submission_state"] == by_id[expired]["submission_state"] == "accepted"
    assert by_id[uncertain]["submission_state"] == "uncertain"

    others = ex.claim_fair(
        db, owner=LANE, platforms=["openai_sim"], want=100, lease_s=30, lookup_platforms=LOOKUP
    )
    assert sorted(r["sample_id"] for r in others) == sorted(sync[1:])  # never the parked one
    assert _state(db_url, parked)[:2] == ("queued", "uncertain")
