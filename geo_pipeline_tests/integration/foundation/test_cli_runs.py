"""The runs CLI as a user runs it: a real subprocess against a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from geo_pipeline_tests.processes import outcome

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "collection.yaml"


def run_cli(db_url, *args, check=True):
    env = {**os.environ, "GEO_DATABASE_URL": db_url}
    proc = subprocess.run(
        [sys.executable, "-m", "geo_pipeline.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(outcome(proc))
    return proc


def test_plan_writes_nothing_and_create_list_show(db_url, db):
    from geo_pipeline.billing import ledger

    ledger.deposit(db, "acme", 1_000_000, "CNY", "cli-test")
    db.commit()
    plan = json.loads(run_cli(db_url, "runs", "plan", str(EXAMPLE), "--json").stdout)
    assert plan["samples"] == 5 * 5 * 2
    assert plan["duplicates_removed"] == ["questions[3]: duplicate of questions[2], removed"]
    assert db.execute("SELECT count(*) AS n FROM geo.runs").fetchone()["n"] == 0

    created = json.loads(
        run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "cli-1", "--json").stdout
    )
    assert created == {"run_id": "cli-1", "created": True, "samples": 50, "batches": 1}
    again = json.loads(
        run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "cli-1", "--json").stdout
    )
    assert again["created"] is False

    listed = json.loads(run_cli(db_url, "runs", "list", "--json").stdout)
    assert [r["run_id"] for r in listed] == ["cli-1"] and listed[0]["status"] == "in_progress"
    shown = json.loads(run_cli(db_url, "runs", "show", "cli-1", "--json").stdout)
    assert shown["status"]["total"] == 50
    assert set(shown["channels"]) == {"deepseek__web", "deepseek__app", "doubao__web", "kimi__web"}
    human = run_cli(db_url, "runs", "show", "cli-1").stdout
    # The status a person reads comes with its reason (issue #34), per channel.
    assert "status in_progress: 10 of 10 still collecting on deepseek__app" in human


def test_bad_config_lists_every_problem_without_traceback(db_url, tmp_path):
    bad = yaml.safe_load(EXAMPLE.read_text())
    bad["repeats"] = 99
    bad["questions"].append("")
    bad["channels"].append({"platform": "bing", "device": "web"})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad, allow_unicode=True))
    proc = run_cli(db_url, "runs", "create", str(path), check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "questions[6]: question is empty after trimming" in proc.stderr
    assert "repeats: 99 is out of range; allowed 1..20" in proc.stderr
    assert "channels[4].platform: unknown platform 'bing'" in proc.stderr


def test_bad_run_id_is_refused_before_anything_is_written(db_url, db):
    proc = run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "bad|id", check=False)
    assert proc.returncode == 2 and "run_id: 'bad|id' is not a run id" in proc.stderr
    assert db.execute("SELECT count(*) AS n FROM geo.runs").fetchone()["n"] == 0


def test_unknown_run_and_missing_database_are_clear(db_url):
    proc = run_cli(db_url, "runs", "show", "nope", check=False)
    assert proc.returncode == 1 and "no run with id 'nope'" in proc.stderr
    env = {k: v for k, v in os.environ.items() if k != "GEO_DATABASE_URL"}
    proc = subprocess.run(
        [sys.executable, "-m", "geo_pipeline.cli.main", "runs", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 3 and "set GEO_DATABASE_URL" in proc.stderr, outcome(proc)


def test_create_runs_the_plan_checks_and_refuses_to_dispatch_a_failing_plan(db_url, db):
    """`runs create` gates its dispatch on the sampling_plan checks, as the launchpad does: a
    batch whose recorded size disagrees with its samples fails `batches_within_cap`, the run is
    kept undispatched, and re-running the same command after the fix dispatches it."""
    from geo_pipeline.billing import ledger

    ledger.deposit(db, "acme", 1_000_000, "CNY", "cli-gate")
    # A corrupt write the plan checks must catch: every batch recorded one sample too large.
    db.execute(
        "CREATE FUNCTION public.corrupt_batch() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN NEW.size := NEW.size + 1; RETURN NEW; END $$"
    )
    db.execute(
        "CREATE TRIGGER corrupt_batch BEFORE INSERT ON geo.batches "
        "FOR EACH ROW EXECUTE FUNCTION public.corrupt_batch()"
    )
    db.commit()

    proc = run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "cli-gate", check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    assert "batches_within_cap" in proc.stderr and "counts sum 50 != size 51" in proc.stderr
    assert "NOT dispatched" in proc.stderr
    assert "geo-pipeline runs create CONFIG --run-id cli-gate" in proc.stderr

    def dispatched() -> tuple[int, int]:
        d = db.execute(
            "SELECT count(*) AS n FROM geo.run_dispatches WHERE run_id = 'cli-gate'"
        ).fetchone()["n"]
        o = db.execute(
            "SELECT count(*) AS n FROM geo.outbox WHERE run_id = 'cli-gate' AND kind = 'collect'"
        ).fetchone()["n"]
        db.commit()
        return d, o

    assert (
        db.execute("SELECT count(*) AS n FROM geo.samples WHERE run_id = 'cli-gate'").fetchone()[
            "n"
        ]
        == 50
    )  # the run is kept (and reserved), only not dispatched
    assert dispatched() == (0, 0)

    as_json = run_cli(
        db_url, "runs", "create", str(EXAMPLE), "--run-id", "cli-gate", "--json", check=False
    )
    err = json.loads(as_json.stdout)
    assert as_json.returncode == err["exit_code"] != 0 and "batches_within_cap" in err["error"]
    assert dispatched() == (0, 0)

    # Fixed: the same command re-runs the checks and dispatches (once).
    db.execute("DROP TRIGGER corrupt_batch ON geo.batches")
    db.execute("UPDATE geo.batches SET size = size - 1 WHERE run_id = 'cli-gate'")
    db.commit()
    fixed = run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "cli-gate", "--json")
    assert json.loads(fixed.stdout)["created"] is False
    channels, hints = dispatched()
    assert channels == 4 and hints > 0
    run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "cli-gate")
    assert dispatched() == (channels, hints)


def test_billing_confirm_passes_through_the_same_gate(db_url, db):
    """`billing confirm` (a run created with --no-confirm, confirmed later) dispatches only
    through the plan checks, like `runs create` and the launchpad."""
    from geo_pipeline.billing import ledger

    ledger.deposit(db, "acme", 1_000_000, "CNY", "confirm-gate")
    db.execute(
        "CREATE FUNCTION public.corrupt_batch() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN NEW.size := NEW.size + 1; RETURN NEW; END $$"
    )
    db.execute(
        "CREATE TRIGGER corrupt_batch BEFORE INSERT ON geo.batches "
        "FOR EACH ROW EXECUTE FUNCTION public.corrupt_batch()"
    )
    db.commit()
    run_cli(db_url, "runs", "create", str(EXAMPLE), "--run-id", "cg", "--no-confirm")
    proc = run_cli(db_url, "billing", "confirm", "cg", check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    assert "batches_within_cap" in proc.stderr and "NOT dispatched" in proc.stderr
    row = db.execute(
        "SELECT r.confirmed_at IS NOT NULL AS confirmed,"
        " (SELECT count(*) FROM geo.run_dispatches d WHERE d.run_id = r.run_id) AS dispatches"
        " FROM geo.runs r WHERE r.run_id = 'cg'"
    ).fetchone()
    db.commit()
    assert row["confirmed"] and row["dispatches"] == 0  # reserved, kept, not dispatched

    db.execute("UPDATE geo.batches SET size = size - 1 WHERE run_id = 'cg'")
    db.commit()
    ok = run_cli(db_url, "billing", "confirm", "cg", "--json")
    assert json.loads(ok.stdout)["queued"] == 50
