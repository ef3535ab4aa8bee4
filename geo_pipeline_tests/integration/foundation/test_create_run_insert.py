"""How create_run writes a run's samples (issue 39: `bench/plan.py` under 1.5 s per 100k round),
and what the cheaper insert still guarantees. Counted or read back from PostgreSQL, never timed:

* the samples arrive channel by channel, each channel's in primary-key order (the key's index
  filled in order, not at random pages), in pieces, each escaped on its own when it needs it;
* a plan's sample ids are hashed as the COPY reaches their channel, each once (the database
  inserts the first channel while the next is hashed), in the same bytes as the rows formatted
  from the plan's tuples, names needing COPY's escapes included;
* the creating transaction sorts and hashes in memory (no temporary file at any work_mem the
  session had), and leaves the session's work_mem as it found it;
* the insert guard (migration 0067, one pass) still refuses a sample whose initial state is not
  an allowed one, naming the sample, besides a sample of a missing run or of another tenant's run
  (test_sample_insert_cost);
* the first dispatch's collect hints (now from the plan checks' grouped read) are the samples'
  groups: one per (batch, channel), with its samples' count and priority, in plan order.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from geo_pipeline.billing import ledger
from geo_pipeline.domain import plan as plan_module
from geo_pipeline.domain.plan import PlanSamples, build_plan
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store.runs import copy_chunks, copy_text
from geo_pipeline_tests.growth import plan_of


def _in_copy_order(ids: list[str], channels: list[str]) -> bool:
    """Channel by channel (each channel once), within a channel by id."""
    runs = [ch for i, ch in enumerate(channels) if i == 0 or channels[i - 1] != ch]
    if len(runs) != len(set(runs)):
        return False
    return all(
        a < b
        for a, b, ca, cb in zip(ids, ids[1:], channels, channels[1:], strict=False)
        if ca == cb
    )


def test_the_copy_sends_samples_channel_by_channel_in_primary_key_order() -> None:
    plan = plan_of(1, "key-order")
    rows = [line.split(b"\t") for line in copy_text(plan).splitlines()]
    ids = [r[0].decode() for r in rows]
    channels = [f"{r[6].decode()}__{r[7].decode()}" for r in rows]  # platform, device
    assert sorted(ids) == sorted(s.sample_id for s in plan.samples)
    assert len(set(channels)) == 6 and _in_copy_order(ids, channels)


def test_the_copy_is_sent_in_pieces_each_escaped_on_its_own() -> None:
    plan = plan_of(1, "pieces")  # 200 samples
    odd = dataclasses.replace(
        plan, samples=[plan.samples[0]._replace(region="c\tn\\x"), *plan.samples[1:]]
    )
    pieces = list(copy_chunks(odd, rows=7))
    assert [len(p.splitlines()) for p in pieces] == [7] * 28 + [4]
    text = b"".join(pieces)
    assert text.count(b"\n") == 200 and text.count(b"\t") == 12 * 200  # the tab is escaped
    assert b"c\\tn\\\\x" in text  # COPY's escapes: the tab and the backslash
    escaped = [p for p in pieces if b"\\" in p]
    assert len(escaped) == 1  # only the piece holding the odd value


def test_the_copy_hashes_each_sample_once_as_it_reaches_its_channel(monkeypatch: Any) -> None:
    """Counted sha256 calls: planning hashes nothing, the first piece needs only the first
    channel's ids (deepseek app: 6 targets x 5 questions x 10 repeats), the whole COPY each id
    once, and reading the samples afterwards (summary, tests, Dagster) none again."""
    hashed: list[bytes] = []
    real = plan_module.sha256

    def counting(data: bytes) -> Any:
        hashed.append(data)
        return real(data)

    monkeypatch.setattr(plan_module, "sha256", counting)
    plan = plan_of(5, "hashed-once")  # 1,000 samples
    assert (len(plan.samples), plan.summary()["samples"], len(hashed)) == (1000, 1000, 0)
    pieces = copy_chunks(plan)
    next(pieces)
    assert len(hashed) == 300
    rest = list(pieces)
    assert len(rest) == 5 and len(hashed) == 1000  # one piece a channel at this size
    assert len({s.sample_id for s in plan.samples}) == 1000 and len(hashed) == 1000
    assert len(set(hashed)) == 1000


def test_the_streamed_copy_is_the_bytes_of_the_plans_tuples_escapes_included() -> None:
    """The COPY of a plan formatted from its ids (PlanSamples) is byte for byte the COPY of the
    same samples as a list of tuples (each value formatted, and escaped when its piece needs
    it) -- for bench/plan.py's shape, and with a tab, backslash, newline and carriage return in
    the tenant, a question revision, a region and a mode."""
    plan = plan_of(5, "same-bytes")
    c = plan.config
    odd_target = dataclasses.replace(c.targets[3], region="c\tn\\x", mode="m\r\n")
    odd_config = dataclasses.replace(
        c,
        tenant="t\\en\tant",
        questions=(dataclasses.replace(c.questions[0], revision="rev\\\n1"), *c.questions[1:]),
        targets=(*c.targets[:3], odd_target, *c.targets[4:]),
    )
    odd = build_plan(odd_config, plan.quote, "same-bytes")
    for p in (plan, odd):
        assert isinstance(p.samples, PlanSamples)
        as_tuples = dataclasses.replace(p, samples=list(p.samples))
        streamed = copy_text(p)
        assert streamed == copy_text(as_tuples)
        assert streamed.count(b"\n") == 1000 and streamed.count(b"\t") == 12 * 1000
    # 3 escapes in each row's tenant, 3 + 2 in the odd target's 50 rows, 3 in question 0's 200
    assert copy_text(odd).count(b"\\") == 3 * 1000 + 5 * 50 + 3 * 200
    assert b"\tc\\tn\\\\x\tm\\r\\n\t" in copy_text(odd)


@pytest.fixture
def funded(db: Any) -> Any:
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    return db


def test_stored_samples_are_channel_by_channel_in_primary_key_order(funded: Any) -> None:
    db = funded
    create_run(db, plan_of(5, "stored-order"))  # 1,000 samples, 10 batches
    db.commit()
    rows = db.execute(
        "SELECT sample_id, channel FROM geo.samples WHERE run_id = 'stored-order' ORDER BY ctid"
    ).fetchall()
    ids, channels = [r["sample_id"] for r in rows], [r["channel"] for r in rows]
    assert len(ids) == 1000 and _in_copy_order(ids, channels)


def test_the_creating_transaction_sorts_in_memory_and_restores_work_mem(funded: Any) -> None:
    """At a session work_mem of 64 kB the insert guard's transition table (1,000 rows) and the
    grouping would spill to temporary files; PostgreSQL logs each one (log_temp_files = 0)."""
    db = funded
    logged: list[str] = []
    db.add_notice_handler(lambda d: logged.append(d.message_primary or ""))
    db.execute("SET work_mem = '64kB'")
    db.execute("SET log_temp_files = 0")
    db.execute("SET client_min_messages = log")
    db.commit()
    with db.transaction():
        create_run(db, plan_of(5, "in-memory"))
        inside = db.execute("SHOW work_mem").fetchone()["work_mem"]
    after = db.execute("SHOW work_mem").fetchone()["work_mem"]
    db.execute("RESET client_min_messages")
    temp_files = [m for m in logged if m.startswith("temporary file")]
    assert temp_files == [], temp_files
    assert (inside, after) == ("64kB", "64kB")
    assert db.execute("SELECT count(*) AS n FROM geo.samples").fetchone()["n"] == 1000


INSERT_LIKE = """INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no,
                   question_revision, question_index, platform, device, region, mode,
                   repeat_index, screenshot_policy, submission_state)
                 SELECT geo.sample_id_for(run_id, question_revision, platform, device, region,
                                          mode, repeat_index + 1000),
                        run_id, tenant_id, batch_no, question_revision, question_index, platform,
                        device, region, mode, repeat_index + 1000, screenshot_policy,
                        CASE WHEN sample_id = %(odd)s THEN %(state)s ELSE 'planned' END
                 FROM geo.samples WHERE sample_id = ANY(%(of)s)
                 RETURNING sample_id"""


def test_a_new_sample_in_a_state_that_is_no_initial_state_is_refused(funded: Any) -> None:
    """Three new samples in one statement (another repeat of three stored ones): all accepted
    in the allowed initial state; with one of them 'uncertain', refused, naming that one."""
    db = funded
    create_run(db, plan_of(1, "guarded"), dispatch=False)
    db.commit()
    of = [
        r["sample_id"]
        for r in db.execute(
            "SELECT sample_id FROM geo.samples WHERE run_id = 'guarded' ORDER BY sample_id LIMIT 3"
        )
    ]
    ok = db.execute(INSERT_LIKE, {"of": of, "odd": of[1], "state": "planned"}).fetchall()
    assert len(ok) == 3
    db.rollback()
    odd = db.execute(
        "SELECT geo.sample_id_for(run_id, question_revision, platform, device, region, mode,"
        " repeat_index + 1000) AS id FROM geo.samples WHERE sample_id = %s",
        (of[1],),
    ).fetchone()["id"]
    with pytest.raises(
        psycopg.errors.CheckViolation,
        match=f"submission transition \\(new\\) -> uncertain is not allowed for sample {odd}",
    ):
        db.execute(INSERT_LIKE, {"of": of, "odd": of[1], "state": "uncertain"})
    db.rollback()


def test_a_new_runs_collect_hints_are_its_samples_groups_in_plan_order(funded: Any) -> None:
    db = funded
    plan = plan_of(5, "hinted")  # 1,000 samples in 10 batches
    plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, priority=7))
    create_run(db, plan)
    db.commit()
    hints = db.execute(
        "SELECT batch_no, channel, tenant_id, stream, (payload ->> 'samples')::int AS n,"
        " (payload ->> 'priority')::int AS priority FROM geo.outbox"
        " WHERE run_id = 'hinted' AND kind = 'collect' ORDER BY outbox_id"
    ).fetchall()
    groups = db.execute(
        "SELECT batch_no, channel, tenant_id, platform, count(*)::int AS n,"
        " max(priority) AS priority FROM geo.samples WHERE run_id = 'hinted'"
        " GROUP BY batch_no, channel, tenant_id, platform ORDER BY batch_no, channel"
    ).fetchall()
    assert len(hints) == len(groups) > 10
    for h, g in zip(hints, groups, strict=True):
        assert (h["batch_no"], h["channel"], h["tenant_id"], h["n"], h["priority"]) == (
            g["batch_no"], g["channel"], g["tenant_id"], g["n"], 7
        )  # fmt: skip
        assert h["stream"].endswith(":" + g["platform"]) or h["stream"].endswith(g["platform"])
    dispatched = db.execute(
        "SELECT channel FROM geo.run_dispatches WHERE run_id = 'hinted' ORDER BY channel"
    ).fetchall()
    assert [d["channel"] for d in dispatched] == sorted({g["channel"] for g in groups})
