"""Retention as a Dagster asset and a daily schedule: a dry run's metadata shows exactly what the
real pass then removes; the schedule requests one pass per day with a run key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest
import redis as redis_lib

from geo_pipeline.defs import names
from geo_pipeline.defs.operations.retention import (
    build_daily_retention,
    daily_retention,
    retention_pass,
)
from geo_pipeline_tests.ops.helpers import complete, fail, make_run


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    mats = result.asset_materializations_for_node("retention_pass")
    assert len(mats) == 1
    return {k: getattr(v, "value", v) for k, v in mats[0].metadata.items()}


def _old_finished_run(conn: Any) -> None:
    samples = make_run(conn, "run-old")
    for s in samples[:4]:
        complete(conn, s)
    for s in samples[4:]:
        fail(conn, s, "X")
    conn.execute(
        "UPDATE geo.samples SET analysis_state='accepted' WHERE collection_state='completed'"
    )
    conn.execute("UPDATE geo.runs SET created_at = now() - interval '40 days'")
    conn.commit()


def test_dry_run_metadata_then_the_real_pass(conn, resources, redis_url: str, redis_ns: str):
    _old_finished_run(conn)
    r = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    key = f"{redis_ns}:collect:deepseek"
    for i in range(10):
        r.xadd(key, {"event_id": str(i)})
    r.xgroup_create(key, "workers", id="0")
    got = r.xreadgroup("workers", "w", {key: ">"}, count=6)
    r.xack(key, "workers", *[mid for mid, _ in got[0][1][:5]])  # the 6th stays pending

    resources = {**resources, "retention_db": resources["db"]}
    dry = dg.materialize(
        [retention_pass],
        resources=resources,
        run_config={"ops": {"retention_pass": {"config": {"dry_run": True}}}},
    )
    meta = _metadata(dry)
    assert meta["dry_run"] is True and meta["runs"] == 1
    assert meta["raw_answer_texts"] == 4 and meta["state_transitions"] > 0
    assert "| acme | 1 |" in meta["per_tenant"]
    assert (
        conn.execute("SELECT count(*) AS n FROM geo.answers WHERE raw_text IS NULL").fetchone()["n"]
        == 0
    )
    assert r.xlen(key) == 10

    real = _metadata(dg.materialize([retention_pass], resources=resources))
    assert real["dry_run"] is False
    assert {k: real[k] for k in ("runs", "raw_answer_texts", "state_transitions", "attempts")} == {
        k: meta[k] for k in ("runs", "raw_answer_texts", "state_transitions", "attempts")
    }
    assert (
        conn.execute("SELECT count(*) AS n FROM geo.answers WHERE raw_text IS NULL").fetchone()["n"]
        == 4
    )
    assert real["stream_entries_trimmed"] == 5 and r.xlen(key) == 5  # the pending one survives
    r.close()


def test_schedule_requests_one_pass_a_day(monkeypatch: pytest.MonkeyPatch):
    ctx = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 3, 1, 19, tzinfo=UTC))
    req = daily_retention(ctx)
    assert isinstance(req, dg.RunRequest)
    assert req.run_key == "retention:2026-03-02"  # 03:00 in Asia/Shanghai
    assert req.run_config["ops"]["retention_pass"]["config"]["dry_run"] is False
    monkeypatch.setenv("GEO_RETENTION_DRY_RUN", "1")
    sched = build_daily_retention(at="04:30", tz="UTC")
    assert sched.cron_schedule == "30 4 * * *"
    req = sched(dg.build_schedule_context(scheduled_execution_time=datetime(2026, 3, 1, 4, 30)))
    assert isinstance(req, dg.RunRequest)
    assert req.run_config["ops"]["retention_pass"]["config"]["dry_run"] is True


def test_retention_is_in_the_definitions():
    from geo_pipeline.definitions import defs

    repo = defs.get_repository_def()
    assert names.RETENTION_PASS in set(repo.asset_graph.get_all_asset_keys())
    assert repo.get_schedule_def("daily_retention").job_name == "retention_job"
