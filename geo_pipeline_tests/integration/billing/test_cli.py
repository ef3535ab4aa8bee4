"""``geo-pipeline billing`` against the real database (and the real simulator for statements):
JSON output for machines, messages (never tracebacks) for people."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from click.testing import CliRunner

from geo_pipeline.billing import ledger
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.cli.billing import billing_group
from geo_pipeline_tests.integration.billing.helpers import create


@pytest.fixture
def cli(db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def invoke(*args, ok=True):
        result = runner.invoke(billing_group, list(args))
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def test_money_commands(cli, db):
    out = json.loads(
        cli(
            "deposit", "--tenant", "acme", "--amount", "500", "--json", "--idempotency-key", "k1"
        ).output
    )
    assert out["balances"]["available_minor"] == 500
    again = json.loads(
        cli(
            "deposit", "--tenant", "acme", "--amount", "500", "--json", "--idempotency-key", "k1"
        ).output
    )
    assert again["entry_id"] == out["entry_id"] and again["balances"]["available_minor"] == 500
    bad = cli("deposit", "--tenant", "acme", "--amount", "12.5", ok=False)
    assert bad.exit_code == 2 and "not a valid integer" in bad.output

    plan = create(db, "rc1", confirm=False, questions=30, repeats=2)
    est = plan.quote.estimated_max.amount_minor
    assert est > 500
    short = cli("confirm", "rc1", "--no-dispatch", ok=False)
    assert short.exit_code == 1 and "insufficient funds" in short.output
    assert "Traceback" not in short.output
    assert f"--amount {est - 500}" in short.output
    cli("deposit", "--tenant", "acme", "--amount", str(est))
    conf = json.loads(cli("confirm", "rc1", "--json").output)
    assert conf["reserved_minor"] == est and conf["queued"] == len(plan.samples)
    bal = json.loads(cli("balance", "--tenant", "acme", "--json").output)
    assert (bal["available_minor"], bal["reserved_minor"], bal["spent_minor"]) == (500, est, 0)
    assert "available" in cli("balance", "--tenant", "acme").output

    refused = cli("close", "rc1", ok=False)
    assert refused.exit_code == 1 and "queued or running" in refused.output
    closed = json.loads(cli("close", "rc1", "--force", "--json").output)
    assert closed == {"run_id": "rc1", "released_minor": est, "currency": "CNY", "closed_now": True}
    led = json.loads(cli("ledger", "rc1", "--json").output)
    assert [e["kind"] for e in led["entries"]] == ["estimate", "reserve", "release"]
    assert "ledger of run rc1" in cli("ledger", "rc1").output
    missing = cli("ledger", "nope", ok=False)
    assert missing.exit_code == 1 and "no run with id 'nope'" in missing.output
    unknown = cli("balance", "--tenant", "ghost", ok=False)
    assert unknown.exit_code == 1 and "no tenant" in unknown.output


def _finished_task(url: str, platform: str, key: str, mode: str = "standard") -> str:
    resp = httpx.post(
        f"{url}/v1/{platform}/tasks",
        headers={"Idempotency-Key": key},
        json={"question": "哪家咖啡好？", "device": "web", "region": "cn", "mode": mode},
        timeout=30,
    )
    assert resp.status_code in (200, 202), resp.text
    task_id = resp.json()["task_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/v1/{platform}/tasks/{task_id}", timeout=30).json()["status"]
        if status in ("completed", "failed"):
            assert status == "completed"
            return task_id
        time.sleep(0.2)
    raise AssertionError(f"simulator task {task_id} did not finish")


def test_reconcile_with_statements_from_the_simulator(cli, db, simulator_env):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "rs1", questions=2)
    tag = uuid.uuid4().hex[:8]  # the session simulator is shared: our own keys
    tasks = [_finished_task(simulator_env, "doubao", f"{tag}:{i}") for i in range(2)]
    for i, task_id in enumerate(tasks):
        s = plan.samples[i]
        db.execute(
            "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform,"
            " state, upstream_id, accepted_at) VALUES (%s, %s, 1, 'doubao', 'accepted', %s, now())",
            (f"{s.sample_id}:1", s.sample_id, task_id),
        )
        db.commit()
        if i == 0:  # the second one we "forgot" to charge: missing on our side
            ledger.post_charge(
                db,
                ChargeRequest(
                    "acme", "rs1", s.sample_id, 1, task_id, "doubao", "standard", "completed"
                ),
            )
    out = json.loads(cli("reconcile", "rs1", "--statements-from-simulator", "--json").output)
    assert [i["platform"] for i in out["imports"]] == ["doubao"]
    got = {line["upstream_id"]: line["classification"] for line in out["lines"]}
    assert got == {tasks[0]: "matched", tasks[1]: "missing_ours"}
    assert out["summary"]["unexplained_difference_minor"] == 6
    # Per platform, which source its vendor cost was reconciled from (issue 19).
    assert out["sources"] == {"doubao": "the simulator's statement API (per task)"}
    text = cli("reconcile", "rs1").output
    assert "missing_ours" in text
    assert "unexplained difference: the platforms billed 0.06 CNY more than we charged" in text
    assert "doubao: the simulator's statement API (per task)" in text


def test_refund_and_review_commands(cli, db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "rr1", questions=1, max_attempts=1, screenshot="off")
    s = plan.samples[0]
    for attempt in (1, 2):  # the second exceeds the reservation of 6
        ledger.post_charge(
            db,
            ChargeRequest(
                "acme",
                "rr1",
                s.sample_id,
                attempt,
                f"u{attempt}",
                "doubao",
                "standard",
                "completed",
            ),
        )
    review = json.loads(cli("review", "--run-id", "rr1", "--json").output)
    assert [r["amount_minor"] for r in review["over_reservation"]] == [6]
    assert review["account_drift"] == [] and review["unattributed_lines"] == []
    args = (
        "refund",
        "rr1",
        "--upstream-id",
        "u2",
        "--amount",
        "6",
        "--reason",
        "dup task",
        "--idempotency-key",
        "rf1",
        "--json",
    )
    first = json.loads(cli(*args).output)
    assert json.loads(cli(*args).output)["entry_id"] == first["entry_id"]
    too_much = cli(
        "refund",
        "rr1",
        "--upstream-id",
        "u2",
        "--amount",
        "1",
        "--reason",
        "x",
        "--idempotency-key",
        "rf2",
        ok=False,
    )
    assert too_much.exit_code == 1 and "exceeds what is left to refund" in too_much.output
    never_charged = cli(
        "refund", "rr1", "--upstream-id", "nosuch", "--amount", "1", "--reason", "x",
        "--idempotency-key", "rf3",
        ok=False,
    )  # fmt: skip
    assert never_charged.exit_code == 1
    assert "has no charge for upstream task nosuch" in never_charged.output
    assert ledger.balances(db, "acme").spent.amount_minor == 6
