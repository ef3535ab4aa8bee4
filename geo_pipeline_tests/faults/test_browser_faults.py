"""The browser lane's account and page faults under real worker processes (issue #32), judged by
the simulator web app's own per-account counts (``GET /ui/_control/counts``) and its history:

- a login expiring mid-run: the account's samples wait (never failed, never charged), an
  operations alert names the account; after the documented `geo-pipeline accounts login` they
  finish, each question sent upstream exactly once;
- a captcha on one of two accounts: that account is suspended at once, sends nothing more (its
  count frozen at the captcha, the captcha page loaded once: no retry storm), an alert fires, the
  other account finishes the run;
- a changed page (no selector matches the composer): nothing is sent or charged, an alert names
  the platform, the samples end failed with a reason naming the layout after a bounded wait.

Each profile behaviour the simulator models names its source (simulator/webapp WebFaults).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs.operations.alerts import account_incidents
from geo_pipeline_tests.faults.harness import CLI, Cluster
from geo_pipeline_tests.faults.test_browser_crash import (
    _Sim,
    browser_cluster,
    web_counts,
    web_faults,
)
from geo_pipeline_tests.integration.execution.helpers import CAPS, check_invariants, fetch
from geo_pipeline_tests.ops.test_browser_lane import QUESTION
from geo_pipeline_tests.ops.test_browser_worker import make_browser_run, pg_log_in, web_run
from geo_pipeline_tests.processes import run_ok

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

PLATFORM = "deepseek_web"
APP = "deepseek"
# A sample lease long enough that a browser capture on a loaded box never loses it: a takeover
# (tested in test_browser_crash) would send the sample through a history look-up instead.
SAMPLE_LEASE_S = 30.0
# A first worker process imports, connects and launches chromium before any sample moves: on a
# loaded box that was seen taking over 2 minutes, so the first wait allows for it.
START_STALL_S = 400.0


def _incidents(db_url: str, which: Any) -> dict[str, Any]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        return dict(which(conn))


def _account(db_url: str, account: str) -> dict[str, Any]:
    return fetch(
        db_url,
        "SELECT state, state_reason FROM geo.accounts WHERE platform = %s AND account_id = %s",
        (PLATFORM, account),
    )[0]


def _charges(db_url: str) -> dict[str, int]:
    rows = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    return {r["sample_id"]: int(r["n"]) for r in rows}


def _history(cluster: Cluster, account: str) -> list[str]:
    """The titles of the account's conversations as its history sidebar lists them (a person's
    fresh login, over HTTP)."""
    with httpx.Client(base_url=cluster.sim_url, timeout=30) as client:
        assert client.post(f"/ui/{APP}/login", data={"account": account}).status_code == 302
        r = client.get(f"/ui/{APP}/api/conversations")
        r.raise_for_status()
        return [c["title"] for c in r.json()]


def _storage_state(cluster: Cluster, account: str, path: Path) -> Path:
    """A person logs in in their own browser and exports it (Playwright storage state)."""
    resp = httpx.post(f"{cluster.sim_url}/ui/{APP}/login", data={"account": account}, timeout=30)
    assert resp.status_code == 302, resp.text
    cookie = {
        "name": "sim_session",
        "value": resp.cookies["sim_session"],
        "domain": "127.0.0.1",
        "path": f"/ui/{APP}/",
        "expires": int(time.time()) + 86400,
        "httpOnly": True,
        "secure": False,
        "sameSite": "Lax",
    }
    path.write_text(json.dumps({"cookies": [cookie], "origins": []}))
    return path


def _env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    browser_cluster(cluster, monkeypatch, root)
    # The default account lease: a renewal late on a loaded box must not free the account in
    # the middle of a capture (the crash test shortens it to test exactly that takeover).
    cluster.env["GEO_BROWSER_ACCOUNT_LEASE_S"] = "60"
    monkeypatch.setenv("GEO_BROWSER_ACCOUNT_LEASE_S", "60")


def _start(cluster: Cluster, db_url: str, run_id: str, questions: list[str]) -> list[str]:
    caps = {**CAPS, **load_registry().capabilities()}
    raw = web_run(questions, devices=("desktop",), platforms=(PLATFORM,))
    ids = make_browser_run(db_url, run_id, caps, raw)
    cluster.relay()
    cluster.sweeper()
    return ids


def test_login_expiry_mid_run_waits_until_accounts_login(
    cluster: Cluster, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "profiles"
    _env(cluster, monkeypatch, root)
    pg_log_in(_Sim(cluster.sim_url), db_url, PLATFORM, "a1", root)  # type: ignore[arg-type]
    # The session expires once, after the account's first answer (simulator WebFaults).
    web_faults(cluster, expire_after=1)
    questions = [f"{QUESTION}{i}" for i in range(3)]
    ids = _start(cluster, db_url, "r-browser-expiry", questions)
    worker = cluster.worker(platforms=(PLATFORM,), lease_s=SAMPLE_LEASE_S)
    cluster.wait_progress(
        lambda: _account(db_url, "a1")["state"] == "needs_login",
        "the login wall seen",
        stall_s=START_STALL_S,
    )
    # The samples it did not answer wait: queued, never failed, nothing charged for them.
    cluster.wait_progress(
        lambda: cluster.states() == {"completed": 1, "queued": len(ids) - 1},
        "one answered, the others waiting",
    )
    waiting = fetch(
        db_url,
        "SELECT sample_id, collection_reason FROM geo.samples WHERE collection_state = 'queued'",
    )
    assert {r["collection_reason"] for r in waiting} <= {
        "unavailable:needs_login",
        "unavailable:no_account",
    }, waiting
    assert set(_charges(db_url)) & {r["sample_id"] for r in waiting} == set()
    alerts = _incidents(db_url, account_incidents)
    alert = alerts[f"account:{PLATFORM}:a1"]
    assert alert.kind == "account_needs_login" and "a1" in alert.summary, alerts
    assert "accounts login" in alert.details["do"]
    sent_before = web_counts(cluster)[APP]["a1"]["sends"]
    assert sent_before == 1
    tokens = {
        r["sample_id"]: r["fencing_token"]
        for r in fetch(
            db_url,
            "SELECT sample_id, fencing_token FROM geo.samples WHERE collection_state = 'queued'",
        )
    }

    # The operator does what the alert says: the documented command, as a process.
    state = _storage_state(cluster, "a1", tmp_path / "a1.json")
    out = run_ok(
        [*CLI, "accounts", "login", PLATFORM, "a1", "--storage-state", str(state)],
        env=cluster.env,
        text=True,
    ).stdout
    assert "ready" in out and json.loads(state.read_text())["cookies"][0]["value"] not in out
    # The login wakes the samples that waited for it (not their doubled wait): each one no
    # worker has taken since is due now.
    later = fetch(
        db_url,
        "SELECT sample_id, fencing_token, next_attempt_at <= now() AS due FROM geo.samples "
        "WHERE collection_state = 'queued'",
    )
    untouched = [r for r in later if tokens.get(r["sample_id"]) == r["fencing_token"]]
    assert all(r["due"] for r in untouched), (later, out)
    cluster.wait_progress(cluster.all_terminal, "every sample terminal after the login")
    cluster.stop(worker)
    got = check_invariants(db_url, expected_samples=len(ids))
    assert got["states"] == {"completed": len(ids)}
    seen = web_counts(cluster)[APP]["a1"]
    assert seen["sends"] == len(ids) and seen["expired"] == 1, seen
    # Exactly one send per question upstream: the account's history lists each once.
    asked = fetch(
        db_url,
        "SELECT q.text FROM geo.samples s JOIN geo.question_revisions q USING (question_revision)",
    )
    assert len(asked) == len(questions)
    assert Counter(_history(cluster, "a1")) == Counter(r["text"] for r in asked)
    assert all(n == 1 for n in _charges(db_url).values()) and len(_charges(db_url)) == len(ids)
    assert f"account:{PLATFORM}:a1" not in _incidents(db_url, account_incidents)


def test_a_captcha_suspends_one_account_and_the_other_finishes(
    cluster: Cluster, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "profiles"
    _env(cluster, monkeypatch, root)
    for account in ("a1", "a2"):
        pg_log_in(_Sim(cluster.sim_url), db_url, PLATFORM, account, root)  # type: ignore[arg-type]
    # Risk control flags a1 after its first answer; a2 is never flagged (simulator WebFaults).
    web_faults(cluster, captcha_after=1, captcha_accounts=["a1"])
    questions = [f"{QUESTION}{i}" for i in range(4)]
    ids = _start(cluster, db_url, "r-browser-captcha", questions)
    worker = cluster.worker(platforms=(PLATFORM,), lease_s=SAMPLE_LEASE_S)
    cluster.wait_progress(
        lambda: _account(db_url, "a1")["state"] == "suspended",
        "the captcha seen",
        stall_s=START_STALL_S,
    )
    alerts = _incidents(db_url, account_incidents)
    alert = alerts[f"account:{PLATFORM}:a1"]
    assert alert.kind == "account_suspended" and "a1" in alert.summary, alerts
    at_captcha = web_counts(cluster)[APP]["a1"]
    cluster.wait_progress(cluster.all_terminal, "every sample terminal")
    cluster.stop(worker)
    got = check_invariants(db_url, expected_samples=len(ids))
    assert got["states"] == {"completed": len(ids)}
    seen = web_counts(cluster)[APP]
    # a1's count is frozen at the captcha, and the captcha page was met once: no retry storm.
    assert seen["a1"]["sends"] == at_captcha["sends"] == 1, seen
    assert seen["a1"].get("captcha_shown", 0) + seen["a1"].get("refused_captcha", 0) == 1, seen
    assert seen["a2"]["sends"] == len(ids) - 1, seen
    assert seen["a2"]["max_concurrent"] == 1
    assert _account(db_url, "a1")["state"] == "suspended"
    assert _account(db_url, "a2")["state"] == "ready"
    assert all(n == 1 for n in _charges(db_url).values()) and len(_charges(db_url)) == len(ids)


def test_a_changed_layout_alerts_charges_nothing_and_ends_named(
    cluster: Cluster, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geo_pipeline.defs.operations.alerts import page_incidents

    root = tmp_path / "profiles"
    _env(cluster, monkeypatch, root)
    pg_log_in(_Sim(cluster.sim_url), db_url, PLATFORM, "a1", root)  # type: ignore[arg-type]
    # The app's composer is redesigned: none of the known selectors match (simulator WebFaults).
    web_faults(cluster, layout="changed")
    questions = [f"{QUESTION}{i}" for i in range(2)]
    ids = _start(cluster, db_url, "r-browser-layout", questions)
    worker = cluster.worker(platforms=(PLATFORM,), lease_s=SAMPLE_LEASE_S)
    cluster.wait_progress(
        lambda: bool(_incidents(db_url, page_incidents)), "the page alert", stall_s=START_STALL_S
    )
    alerts = _incidents(db_url, page_incidents)
    alert = alerts[f"page_changed:{PLATFORM}"]
    assert alert.kind == "page_changed" and PLATFORM in alert.summary, alerts
    assert "layout" in alert.summary
    # Not retried forever: every sample ends, failed with a reason naming the layout.
    cluster.wait_progress(cluster.all_terminal, "every sample terminal")
    report = cluster.stop(worker)
    got = check_invariants(db_url, expected_samples=len(ids))
    assert got["states"] == {"failed": len(ids)}, report
    reasons = fetch(db_url, "SELECT DISTINCT collection_reason AS r FROM geo.samples")
    assert [r["r"] for r in reasons] == ["unavailable:layout_changed:waits_spent"], reasons
    # Bounded: one wait on the changed page, then the end (two page loads per sample, never a
    # third; a wait for the account the other sample held loads no page).
    waits = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.state_transitions "
        "WHERE layer = 'collection' AND reason = 'unavailable:layout_changed' GROUP BY 1",
    )
    assert sorted(int(r["n"]) for r in waits) == [1] * len(ids), waits
    assert _charges(db_url) == {}  # nothing was sent, nothing is charged
    seen = web_counts(cluster)[APP]["a1"]
    assert "sends" not in seen, seen
    assert seen["page_loads"] == 2 * len(ids), seen
    assert _account(db_url, "a1")["state"] == "ready"  # the page changed, not the account
