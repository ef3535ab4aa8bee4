"""A worker SIGKILLed between the PUT of its batch's WARC object and the fenced transaction
that records it (issue 33, faults): a real worker process writing to a real SeaweedFS, killed
at ``stored_not_completed``, and a second worker that takes the samples over.

What must hold: the dead worker's object is in the store and no row ever names it (nothing
recorded that is not stored, nothing stored twice recorded); every sample completes once,
charged once; every object the database names reads back verified; retention finds the
orphan under the run's prefix (a dry run lists it) and removes it with the run."""

from __future__ import annotations

import signal
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.evidence.s3_async import ObjectStoreArchive
from geo_pipeline.evidence.wacz import verify_run
from geo_pipeline.evidence.warc_store import run_prefix
from geo_pipeline.flows.retention import apply_retention
from geo_pipeline_tests.faults.test_crash_recovery import verify
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run

N = 12


def _named(db_url: str) -> set[str]:
    return {
        r["object_key"] for r in fetch(db_url, "SELECT DISTINCT object_key FROM geo.warc_records")
    }


def test_worker_killed_between_put_and_record_leaves_an_orphan_retention_removes(
    cluster, db_url, s3_server, monkeypatch
) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)  # this process's archive, as the workers' below
    bucket = f"geo-t-{uuid.uuid4().hex[:16]}"
    s3_server.client().create_bucket(Bucket=bucket)
    cluster.env.update(s3_server.env())
    cluster.env["GEO_EVIDENCE_URL"] = f"s3://{bucket}/ev"
    cluster.env["GEO_EVIDENCE_FORMAT"] = "warc"
    archive = ObjectStoreArchive(bucket, "ev")
    make_run(db_url, "r-warc-kill", questions=N)
    s = fetch(db_url, "SELECT tenant_id, run_id FROM geo.samples LIMIT 1")[0]
    prefix = run_prefix(s["tenant_id"], s["run_id"])
    cluster.relay()
    cluster.sweeper()
    w1 = cluster.worker(crash_at="stored_not_completed")
    assert cluster.wait_dead(w1) == -signal.SIGKILL
    # Killed after its PUT, before its transaction: its object is stored, no row names it.
    orphans = set(archive.list_keys(prefix))
    assert orphans, "the killed worker stored no object"
    assert _named(db_url) & orphans == set()
    assert fetch(db_url, "SELECT count(*) AS n FROM geo.evidence_objects")[0]["n"] == 0
    w2 = cluster.worker()
    cluster.wait_progress(cluster.all_terminal, "recovery after the kill")  # progress, not a clock
    cluster.stop(w2)
    verify(cluster, N)  # completed once each, charged once, one task per attempt
    charges = fetch(db_url, "SELECT sample_id, count(*) AS n FROM geo.ledger_entries"
                            " WHERE kind = 'charge' GROUP BY 1")  # fmt: skip
    assert len(charges) == N and {r["n"] for r in charges} == {1}, charges
    named = _named(db_url)
    # Never referenced later either: the takeover stored and recorded an object of its own.
    assert named and named & orphans == set()
    keys = set(archive.list_keys(prefix))
    # Every object a row names is stored. Unnamed ones may be more than those listed at the
    # kill: an upload the dead worker had fully sent may land after it died.
    assert named | orphans <= keys
    unnamed = keys - named
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        checked, torn = verify_run(conn, archive, s["run_id"])
        assert torn == [] and checked == len(named)
        later = datetime.now(UTC) + timedelta(days=400)
        plan = apply_retention(conn, archive, later, dry_run=True)
        (run,) = [r for r in plan.runs if r.run_id == s["run_id"]]
        assert set(run.warc_objects) == named | unnamed  # the orphans are found
        assert set(archive.list_keys(prefix)) == keys  # a dry run deletes nothing
        apply_retention(conn, archive, later, dry_run=False)
    assert archive.list_keys(prefix) == []
    assert fetch(db_url, "SELECT count(*) AS n FROM geo.warc_records")[0]["n"] == 0
