"""Answer services: a worker SIGKILLed between the service's acceptance and our record of it
(crash point ``accepted_not_recorded``) on a scraped channel. cloro: the next worker re-sends
under the same key, cloro answers 409, and the sample waits for review. DataForSEO: the next
worker finds the task by our tag. Either way one task per attempt, billed at most once, judged
from the simulator's own per-key counts."""

from __future__ import annotations

import signal

import httpx

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline_tests.faults.harness import LEASE_S, SWEEP_S, Cluster
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import (
    PLATFORM,
    make_cloro_run,
    settled,
)

N = 12
RECLAIM_S = LEASE_S + SWEEP_S + 6.0
# Recovery is awaited while the samples move (Cluster.wait_progress), not against a flat bound:
# CI saw 9 of 12 DataForSEO samples complete inside a flat 60 s (id_list allows 10 look-ups a
# minute, then answers 40202 and the rest wait out the window: under a minute with no state
# change, inside wait_progress's 120 s stall bound), and the Bright Data recovery miss 60 s on a
# loaded box.


def test_worker_killed_between_send_and_record(cluster: Cluster, db_url, monkeypatch) -> None:
    for name, value in {
        "GEO_CLORO_URL": f"{cluster.sim_url}/cloro",
        "GEO_CLORO_API_KEY": "sim-cloro-key",
    }.items():
        monkeypatch.setenv(name, value)
        cluster.env[name] = value
    ids = make_cloro_run(db_url, load_registry(), "r-cloro-crash", N)
    cluster.relay()
    cluster.sweeper()
    w1 = cluster.worker(crash_at="accepted_not_recorded", platforms=(PLATFORM,))
    # The first process of a fresh checkout compiles its imports on a busy 2-core box: wait on
    # the crash itself, for as long as the worker makes progress (harness.wait_dead).
    assert cluster.wait_dead(w1) == -signal.SIGKILL
    w2 = cluster.worker(platforms=(PLATFORM,))
    cluster.wait(lambda: cluster.held_by(w1) == 0, RECLAIM_S, "leases of the dead worker")
    cluster.wait_progress(settled(db_url, N), "every sample completed or sent to review")
    cluster.stop(w2)
    check_invariants(db_url, expected_samples=N)

    rows = fetch(
        db_url,
        "SELECT sample_id, attempt_no, collection_state, submission_state, "
        "coalesce(submission_reason, '') || ' ' || coalesce(collection_reason, '') AS why "
        "FROM geo.samples",
    )
    parked = [r for r in rows if r["submission_state"] == "uncertain"]
    completed = [r for r in rows if r["collection_state"] == "completed"]
    assert parked, "the killed worker's accepted-but-unrecorded task must be waiting for review"
    assert len(parked) + len(completed) == N
    assert all("accepted_upstream:id_unknown" in r["why"] for r in parked), parked
    assert all(r["attempt_no"] == 1 for r in rows)

    stats = httpx.get(f"{cluster.sim_url}/_control/services/cloro/stats", timeout=10).json()
    keys = stats["keys"]
    assert set(keys) == {f"{sid}:1" for sid in ids}
    assert max(v["tasks_created"] for v in keys.values()) == 1  # 0 tasks created twice
    assert max(v["tasks_billed"] for v in keys.values()) <= 1
    charges = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    assert all(c["n"] == 1 for c in charges)
    assert {c["sample_id"] for c in charges} == {r["sample_id"] for r in completed}
    for r in completed:  # every charge is for a task cloro billed
        assert keys[f"{r['sample_id']}:1"]["tasks_billed"] == 1


def test_dataforseo_worker_killed_between_send_and_record(
    cluster: Cluster, db_url, monkeypatch
) -> None:
    """DataForSEO takes no key: the next worker finds the task by our tag (tasks_ready /
    id_list) and follows it -- one task per tag, never re-sent, every sample completed."""
    for name, value in {
        "GEO_DATAFORSEO_URL": f"{cluster.sim_url}/dataforseo",
        "GEO_DATAFORSEO_CREDENTIALS": "sim-login:sim-password",
    }.items():
        monkeypatch.setenv(name, value)
        cluster.env[name] = value
    platform = "chatgpt_dataforseo"
    ids = make_cloro_run(db_url, load_registry(), "r-dfs-crash", N, platform=platform)
    cluster.relay()
    cluster.sweeper()
    w1 = cluster.worker(crash_at="accepted_not_recorded", platforms=(platform,))
    assert cluster.wait_dead(w1) == -signal.SIGKILL
    w2 = cluster.worker(platforms=(platform,))
    cluster.wait(lambda: cluster.held_by(w1) == 0, RECLAIM_S, "leases of the dead worker")
    cluster.wait_progress(cluster.all_terminal, "every sample terminal")
    cluster.stop(w2)
    got = check_invariants(db_url, expected_samples=N)
    assert got["states"] == {"completed": N}
    found = fetch(
        db_url, "SELECT count(*) AS n FROM geo.upstream_requests WHERE resolved_by = 'lookup'"
    )[0]["n"]
    assert found >= 1  # the dead worker's acceptance came back through the tag look-up
    stats = httpx.get(f"{cluster.sim_url}/_control/services/dataforseo/stats", timeout=10).json()
    keys = stats["keys"]
    assert {k.rsplit(":", 1)[0] for k in keys} == set(ids)
    assert max(v["tasks_created"] for v in keys.values()) == 1
    assert max(v["submit_calls"] for v in keys.values()) == 1
    charges = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    assert len(charges) == N and all(c["n"] == 1 for c in charges)


def test_brightdata_worker_killed_between_send_and_record(
    cluster: Cluster, db_url, monkeypatch
) -> None:
    """Bright Data takes no key and has no look-up by one: the next worker cannot tell whether
    the dead worker's trigger created a snapshot, so the sample waits for review -- never a
    second trigger (a second billed record), judged from the simulator's per-input counts."""
    for name, value in {
        "GEO_BRIGHTDATA_URL": f"{cluster.sim_url}/brightdata",
        "GEO_BRIGHTDATA_API_KEY": "sim-brightdata-key",
    }.items():
        monkeypatch.setenv(name, value)
        cluster.env[name] = value
    platform = "chatgpt_brightdata"
    ids = make_cloro_run(db_url, load_registry(), "r-bd-crash", N, platform=platform)
    cluster.relay()
    cluster.sweeper()
    w1 = cluster.worker(crash_at="accepted_not_recorded", platforms=(platform,))
    assert cluster.wait_dead(w1) == -signal.SIGKILL
    w2 = cluster.worker(platforms=(platform,))
    cluster.wait(lambda: cluster.held_by(w1) == 0, RECLAIM_S, "leases of the dead worker")
    cluster.wait_progress(settled(db_url, N), "every sample completed or sent to review")
    cluster.stop(w2)
    check_invariants(db_url, expected_samples=N)
    rows = fetch(
        db_url,
        "SELECT s.sample_id, s.attempt_no, s.collection_state, s.submission_state, s.region, "
        "q.text, coalesce(s.submission_reason, '') || ' ' || coalesce(s.collection_reason, '') "
        "AS why FROM geo.samples s JOIN geo.question_revisions q USING (question_revision)",
    )
    parked = [r for r in rows if r["submission_state"] == "uncertain"]
    completed = [r for r in rows if r["collection_state"] == "completed"]
    assert parked, "the killed worker's triggered-but-unrecorded snapshot must wait for review"
    assert len(parked) + len(completed) == N
    assert all("acceptance_unknown:no_lookup" in r["why"] for r in parked), parked
    assert all(r["attempt_no"] == 1 for r in rows)
    stats = httpx.get(f"{cluster.sim_url}/_control/services/brightdata/stats", timeout=10).json()
    keys = stats["keys"]
    inputs = {r["sample_id"]: f"{r['region'].upper()}|{r['text']}" for r in rows}
    # Every input Bright Data saw is one of ours; a completed sample's input was triggered. A
    # parked one may never have reached Bright Data (the dead worker held it between marking it
    # sent and sending it): without a key or a look-up nobody can tell, so it waits for review
    # all the same -- seen when this test ran after the others on a loaded box.
    assert set(keys) <= set(inputs.values()) and len(ids) == N
    assert {inputs[r["sample_id"]] for r in completed} <= set(keys)
    assert max(v["trigger_calls"] for v in keys.values()) == 1  # never triggered twice
    assert stats["max_snapshots_per_input"] == 1
    charges = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    assert all(c["n"] == 1 for c in charges)
    assert {c["sample_id"] for c in charges} == {r["sample_id"] for r in completed}
    for r in completed:  # every charge is for a record Bright Data billed
        assert keys[inputs[r["sample_id"]]]["records_billed"] == 1
