"""Retention (D9) on a real database and a real local evidence archive."""

from __future__ import annotations

from datetime import timedelta

from geo_pipeline.evidence.archive import LocalArchive
from geo_pipeline.flows import retention
from geo_pipeline.ops import export, report
from geo_pipeline_tests.ops.helpers import add_evidence, complete, make_run
from geo_pipeline_tests.processes import run_ok


def _setup(db, tmp_path, run_id="run-ops"):
    samples = make_run(db, run_id)
    archive = LocalArchive(tmp_path / "evidence")
    keys = []
    for i, s in enumerate(samples[:3]):
        complete(db, s)
        key = f"acme/{run_id}/{s['sample_id']}/1/screenshot.png"
        archive.put(key, b"png%d" % i, mime_type="image/png")
        add_evidence(db, s, "screenshot", key, b"png%d" % i)
        db.execute(
            "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id, outcome) "
            "VALUES (%s, 1, 1, 'w1', 'completed')",
            (s["sample_id"],),
        )
        keys.append(key)
    for s in samples[3:]:  # the rest fail, so the run is terminal
        db.execute(
            "UPDATE geo.samples SET collection_state='failed', collection_reason='X' "
            "WHERE sample_id=%s",
            (s["sample_id"],),
        )
    db.execute(
        "INSERT INTO geo.ledger_entries (tenant_id, kind, amount_minor, currency, "
        "idempotency_key) VALUES ('acme', 'deposit', 123, 'CNY', %s)",
        (f"k-{run_id}",),
    )
    db.commit()
    return samples, archive, keys


def _counts(db, run_id="run-ops"):
    q = {
        "objects": "SELECT count(*) AS n FROM geo.evidence_objects WHERE run_id=%s",
        "attempts": "SELECT count(*) AS n FROM geo.attempts JOIN geo.samples USING (sample_id) "
        "WHERE run_id=%s",
        "answers": "SELECT count(*) AS n FROM geo.answers JOIN geo.samples USING (sample_id) "
        "WHERE run_id=%s",
        "samples": "SELECT count(*) AS n FROM geo.samples WHERE run_id=%s",
        "ledger": "SELECT count(*) AS n FROM geo.ledger_entries WHERE tenant_id='acme' "
        "AND %s::text IS NOT NULL",
    }
    return {k: db.execute(v, (run_id,)).fetchone()["n"] for k, v in q.items()}


def test_young_runs_are_kept(db, tmp_path):
    _, archive, keys = _setup(db, tmp_path)
    now = retention.database_now(db) + timedelta(days=29)
    rep = retention.apply_retention(db, archive, now, dry_run=False)
    assert rep.runs == [] and all(archive.exists(k) for k in keys)


def test_dry_run_reports_exactly_what_the_real_pass_removes(db, tmp_path):
    _, archive, keys = _setup(db, tmp_path)
    before = _counts(db)
    now = retention.database_now(db) + timedelta(days=31)
    dry = retention.apply_retention(db, archive, now, dry_run=True)
    assert _counts(db) == before and all(archive.exists(k) for k in keys)
    assert [r.run_id for r in dry.runs] == ["run-ops"]
    assert sorted(dry.runs[0].object_keys) == sorted(keys)
    assert dry.attempts == 3 and dry.bytes == sum(len(b"png0") for _ in keys)

    real = retention.apply_retention(db, archive, now, dry_run=False)
    assert real.as_dict() | {"dry_run": True} == dry.as_dict()
    after = _counts(db)
    assert after["objects"] == 0 and after["attempts"] == 0
    assert not any(archive.exists(k) for k in keys)
    # Aggregates' inputs and the ledger stay.
    assert {k: after[k] for k in ("answers", "samples", "ledger")} == {
        k: before[k] for k in ("answers", "samples", "ledger")
    }
    # A second pass has nothing left to do, and the report explains the missing evidence.
    assert retention.apply_retention(db, archive, now, dry_run=False).runs == []
    page = export.to_html(report.build_report(db, "run-ops"))
    assert "removed by the retention policy" in page and "30 days" in page


def test_tenant_policy_and_in_flight_runs_are_respected(db, tmp_path):
    _, archive, _ = _setup(db, tmp_path)
    db.execute("UPDATE geo.tenants SET retention_days = 90 WHERE tenant_id = 'acme'")
    db.commit()
    now = retention.database_now(db) + timedelta(days=60)
    assert retention.apply_retention(db, archive, now, dry_run=True).runs == []
    db.execute("UPDATE geo.tenants SET retention_days = 7 WHERE tenant_id = 'acme'")
    # An old run with work still queued is never touched, whatever its age.
    make_run(db, "run-busy")
    db.commit()
    rep = retention.apply_retention(db, archive, now, dry_run=True)
    assert [r.run_id for r in rep.runs] == ["run-ops"]


def test_a_crash_between_bytes_and_rows_is_finished_by_the_next_pass(db, tmp_path):
    _, archive, keys = _setup(db, tmp_path)
    for k in keys[:2]:  # bytes already gone, rows still there
        archive.delete(k)
    now = retention.database_now(db) + timedelta(days=31)
    rep = retention.apply_retention(db, archive, now, dry_run=False)
    assert rep.objects == 3 and _counts(db)["objects"] == 0


def test_cli_dry_run_lists_and_apply_removes(db, db_url, tmp_path):
    import json
    import sys

    _, _, keys = _setup(db, tmp_path)
    db.execute("UPDATE geo.runs SET created_at = now() - interval '40 days'")
    db.commit()
    env = {
        "GEO_DATABASE_URL": db_url,
        "GEO_EVIDENCE_URL": (tmp_path / "evidence").as_uri(),
        "PATH": "/usr/bin:/bin",
    }
    cmd = [sys.executable, "-m", "geo_pipeline.cli.main", "retention", "--json"]
    dry = run_ok(cmd, text=True, env=env)
    assert json.loads(dry.stdout)["objects"] == 3 and _counts(db)["objects"] == 3
    real = run_ok([*cmd, "--apply"], text=True, env=env)
    assert json.loads(real.stdout)["dry_run"] is False and _counts(db)["objects"] == 0
    assert not any((tmp_path / "evidence" / k).exists() for k in keys)
