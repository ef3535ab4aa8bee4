"""A partition publishes on its run's deadline: past it, the downstream assets materialise with
what is terminal, the rest listed as excluded with their reasons; rates count only what was
included; a late completion re-publishes once through the completion sensor."""

from __future__ import annotations

from typing import Any

import dagster as dg
import redis as redis_lib

from geo_pipeline.defs import names
from geo_pipeline.defs.analysis.assets import brand_analysis, brand_visibility
from geo_pipeline.defs.collection.assets import collection_results
from geo_pipeline.defs.collection.sensors import completion_sensor
from geo_pipeline.defs.evidence.assets import validated_evidence
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.resources import PipelineSettingsResource
from geo_pipeline_tests.dagster.conftest import (
    check_results,
    collection_config,
    create_run,
    finish,
    sample_ids,
)
from geo_pipeline_tests.dagster.test_assets import materialise, metadata
from geo_pipeline_tests.dagster.test_sensors import keys, stream, tick

WEB, APP = "deepseek__web", "qwen__app"
DOWNSTREAM = [collection_results, validated_evidence, brand_analysis, brand_visibility]


def stick(conn: Any, sample_id: str) -> None:
    """Leave a sample running with its acceptance unknown (a timeout after the send, R12)."""
    conn.execute(
        """UPDATE geo.samples SET submission_state = 'submitting', collection_state = 'running',
             attempt_no = attempt_no + 1, fencing_token = fencing_token + 1,
             lease_owner = 'test', lease_until = now() + interval '5 minutes'
           WHERE sample_id = %s""",
        (sample_id,),
    )
    conn.execute(
        "UPDATE geo.samples SET submission_state = 'uncertain' WHERE sample_id = %s", (sample_id,)
    )


def age_run(conn: Any, run_id: str, hours: float) -> None:
    conn.execute(
        "UPDATE geo.runs SET created_at = now() - make_interval(secs => %s) WHERE run_id = %s",
        (hours * 3600, run_id),
    )


def test_a_stuck_sample_no_longer_empties_the_partition_after_the_deadline(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)  # the default deadline: 6 hours after creation
    done = finish(conn, run_id, WEB, only=3)
    [stuck] = sorted(set(sample_ids(conn, run_id, WEB)) - set(done.completed))
    stick(conn, stuck)
    age_run(conn, run_id, 7)
    # The sensor's first tick sweeps PostgreSQL: past the deadline the partition is requested
    # although one sample is still open (no completion event will come for it).
    first = tick(completion_sensor, dg_instance, resources, None)
    # Both partitions in one run (their range), each with its terminal count in the key.
    both = names.downstream_range_key(run_id, [(WEB, 3, 4), (APP, 0, 4)])
    assert both in keys(first), keys(first)

    # 1 of 4 is a large share of a tiny test partition: allow it here.
    lenient = {**resources, "settings": PipelineSettingsResource(max_excluded_share=0.3)}
    result = materialise(DOWNSTREAM, partition_key(run_id, WEB), dg_instance, lenient)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert all(check_results(result).values())
    col = metadata(result, names.COLLECTION_RESULTS)
    assert col["published_on"] == "deadline"
    assert (col["included"], col["excluded"]) == (3, 1)
    assert col["excluded_reasons"] == {"uncertain": 1}
    assert col["excluded_share"] == 0.25
    for asset in (names.VALIDATED_EVIDENCE, names.BRAND_ANALYSIS, names.BRAND_VISIBILITY):
        assert metadata(result, asset)["excluded"] == 1
    # The analyst table queries the exclusion, sample by sample, with its states.
    [row] = conn.execute(
        "SELECT * FROM analytics.excluded_samples WHERE run_id = %s AND channel = %s",
        (run_id, WEB),
    ).fetchall()
    assert row["sample_id"] == stuck and row["reason"] == "uncertain"
    assert (row["submission_state"], row["collection_state"]) == ("uncertain", "running")
    assert row["still_excluded"] is True
    # Rates count only what was included: 3 known answers, the open one is not "not mentioned".
    vis = conn.execute(
        "SELECT n, mentions, mention_rate, collecting_samples FROM analytics.channel_brand_metrics"
        " WHERE run_id = %s AND channel = %s AND is_target",
        (run_id, WEB),
    ).fetchone()
    assert (vis["n"], vis["mentions"], vis["mention_rate"], vis["collecting_samples"]) == (
        3,
        3,
        1.0,
        1,
    )
    fact = conn.execute(
        "SELECT mentioned, mention_status FROM analytics.sample_brand_facts "
        "WHERE sample_id = %s AND is_target",
        (stuck,),
    ).fetchone()
    assert fact["mentioned"] is None and fact["mention_status"] != "known"


def test_before_the_deadline_an_open_partition_is_still_refused(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    cfg = collection_config()
    cfg["publish_deadline_seconds"] = 3600
    run_id = create_run(conn, dg_instance, config=cfg)
    finish(conn, run_id, WEB, only=3)
    age_run(conn, run_id, 0.5)
    result = materialise([collection_results], partition_key(run_id, WEB), dg_instance, resources)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "publish deadline" in failure.step_failure_data.user_failure_data.description
    assert not tick(completion_sensor, dg_instance, resources, None).run_requests


def test_the_excluded_share_check_blocks_above_its_threshold(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB, only=3)
    age_run(conn, run_id, 7)
    key = partition_key(run_id, WEB)
    # 1 of 4 excluded: above a 10 % limit, blocking; the evidence set is not published.
    strict = {**resources, "settings": PipelineSettingsResource(max_excluded_share=0.1)}
    blocked = materialise(DOWNSTREAM, key, dg_instance, strict)
    assert not blocked.success
    assert check_results(blocked)[names.CHECK_EXCLUDED_SHARE] is False
    assert {e.asset_key for e in blocked.get_asset_materialization_events()} == {
        names.COLLECTION_RESULTS
    }
    # Within a 30 % limit it passes and everything downstream publishes.
    lenient = {**resources, "settings": PipelineSettingsResource(max_excluded_share=0.3)}
    published = materialise(DOWNSTREAM, key, dg_instance, lenient)
    assert published.success
    assert check_results(published)[names.CHECK_EXCLUDED_SHARE] is True


def test_a_late_completion_republishes_once(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB, only=2)
    finish(conn, run_id, APP)
    age_run(conn, run_id, 7)
    first = tick(completion_sensor, dg_instance, resources, None)
    # WEB on its deadline and the finished APP, in one run (their range).
    deadline_key = names.downstream_range_key(run_id, [(WEB, 2, 4), (APP, 4, 4)])
    assert deadline_key in keys(first), keys(first)
    assert names.billing_run_key(run_id, terminal=6, samples=8) in keys(first)
    lenient = {**resources, "settings": PipelineSettingsResource(max_excluded_share=0.5)}
    assert materialise(DOWNSTREAM, partition_key(run_id, WEB), dg_instance, lenient).success
    # Nothing changed: the same key again at most (the daemon launches a key once), never new.
    again = tick(completion_sensor, dg_instance, resources, first.cursor)
    assert set(keys(again)) <= {deadline_key}
    # One sample completes late: a new key, once.
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources), only=1)
    late = tick(completion_sensor, dg_instance, resources, again.cursor)
    late_key = names.downstream_run_key(run_id, WEB, terminal=3, samples=4)
    assert late_key in keys(late) and deadline_key not in keys(late)
    assert names.billing_run_key(run_id, terminal=7, samples=8) in keys(late)
    republished = materialise(DOWNSTREAM, partition_key(run_id, WEB), dg_instance, lenient)
    assert metadata(republished, names.COLLECTION_RESULTS)["included"] == 3
    quiet = tick(completion_sensor, dg_instance, resources, late.cursor)
    assert late_key not in keys(quiet) or set(keys(quiet)) <= {late_key}
    # The last one completes, its completion event lost: the periodic sweep still finds it
    # (its partition was published with exclusions) and requests the final key.
    finish(conn, run_id, WEB)
    swept = completion_sensor_sweep(dg_instance, resources, quiet.cursor)
    # (APP, never materialised here, is swept up with it: one run for both.)
    final = names.downstream_range_key(run_id, [(WEB, 4, 4), (APP, 4, 4)])
    assert final in keys(swept), keys(swept)
    assert names.billing_run_key(run_id) in keys(swept)


def completion_sensor_sweep(
    instance: dg.DagsterInstance, resources: dict[str, Any], cursor: str | None
) -> dg.SensorResult:
    """A tick whose periodic PostgreSQL sweep is due."""
    import json

    data = json.loads(cursor or "{}")
    data["swept"] = 0.0
    return tick(completion_sensor, instance, resources, json.dumps(data))


def test_the_launchpad_sets_the_deadline_and_it_is_frozen_with_the_run(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    from geo_pipeline_tests.dagster.conftest import fund
    from geo_pipeline_tests.dagster.test_schedule_and_job import failure_text, launch

    fund(conn)
    assert launch(collection_config(), dg_instance, resources, run_id="r-default").success
    assert launch(
        collection_config(), dg_instance, resources, run_id="r-2h", publish_deadline_seconds=7200
    ).success
    rows = {
        r["run_id"]: r
        for r in conn.execute(
            "SELECT d.run_id, d.publish_deadline_seconds, c.config ->> 'publish_deadline_seconds'"
            " AS frozen, d.publish_deadline_at - d.created_at AS delay"
            " FROM geo.run_publish_deadlines d JOIN geo.runs r USING (run_id)"
            " JOIN geo.config_snapshots c USING (snapshot_id)"
        ).fetchall()
    }
    assert (rows["r-default"]["publish_deadline_seconds"], rows["r-default"]["frozen"]) == (
        21600,
        "21600",
    )
    assert rows["r-2h"]["publish_deadline_seconds"] == 7200
    assert rows["r-2h"]["delay"].total_seconds() == 7200
    bad = launch(collection_config(), dg_instance, resources, publish_deadline_seconds=5)
    assert not bad.success
    assert "publish_deadline_seconds: 5 is out of range" in failure_text(bad)


def test_a_deadline_passing_is_noticed_on_the_next_tick_without_any_event(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB, only=3)
    age_run(conn, run_id, 5)  # the deadline is an hour away
    first = tick(completion_sensor, dg_instance, resources, None)  # sweeps: nothing publishable
    assert not first.run_requests
    # The deadline passes (database time: it is now, after the first tick's look); no
    # completion event, and the periodic sweep is not due. Moved, not waited for: with the
    # deadline 2 s away and a 2.5 s sleep, a first tick slower than 2 s on a loaded box saw
    # it passed already.
    age_run(conn, run_id, 6)
    second = tick(completion_sensor, dg_instance, resources, first.cursor)
    assert keys(second) == sorted(
        [
            names.downstream_range_key(run_id, [(WEB, 3, 4), (APP, 0, 4)]),
            names.billing_run_key(run_id, terminal=3, samples=8),
        ]
    )
    # Each passed deadline is looked at once: the next tick asks about later ones only.
    assert not tick(completion_sensor, dg_instance, resources, second.cursor).run_requests
