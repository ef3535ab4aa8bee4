"""The browser lane under real worker processes (issue #32), judged by the simulator web app's own
per-account counts:

- a worker SIGKILLed right after its browser sent a question (the app was already answering) is
  recovered by the next worker from the sending account's conversation history: the question is
  never asked twice, every sample completes, at most one send per sample;
- two workers sharing one account never have it answer two questions at once (the account lease),
  as the web app's record of concurrent streams per account shows.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline_tests.faults.harness import LEASE_S, SWEEP_S, Cluster
from geo_pipeline_tests.integration.execution.helpers import CAPS, check_invariants, fetch
from geo_pipeline_tests.ops.conftest import chromium_or_skip
from geo_pipeline_tests.ops.test_browser_lane import QUESTION
from geo_pipeline_tests.ops.test_browser_worker import make_browser_run, pg_log_in, web_run

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

PLATFORM = "deepseek_web"
APP = "deepseek"
ACCOUNT_LEASE_S = 6.0  # renewed every 2 s while a capture runs; a dead worker's runs out in 6 s
START_S = 240.0  # a first worker process compiles, launches chromium and types on a busy box
# After the kill: the dead worker's sample lease (LEASE_S) and account lease run out, the
# sweeper hands the sample back, the next worker re-opens the conversation; then the other
# samples are asked one after another by the one account (each a few seconds of typing and
# answering in a browser, polled at stable_poll_s).
RECOVERY_S = 300.0


class _Sim:
    def __init__(self, url: str) -> None:
        self.url = url


def browser_cluster(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    env = {
        "GEO_BROWSER_PROFILES": str(root),
        "GEO_CHROMIUM": chromium_or_skip(),
        "GEO_BROWSER_ACCOUNT_LEASE_S": str(ACCOUNT_LEASE_S),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
        cluster.env[name] = value
    monkeypatch.setenv("GEO_SIMULATOR_URL", cluster.sim_url)
    monkeypatch.delenv("GEO_CONNECTORS_FILE", raising=False)
    cluster.env.pop("GEO_CONNECTORS_FILE", None)


def web_counts(cluster: Cluster) -> dict[str, Any]:
    r = httpx.get(f"{cluster.sim_url}/ui/_control/counts", timeout=10)
    r.raise_for_status()
    return dict(r.json())


def web_faults(cluster: Cluster, **values: Any) -> None:
    httpx.post(
        f"{cluster.sim_url}/ui/_control/faults/{APP}", json=values, timeout=10
    ).raise_for_status()


def test_worker_killed_after_the_send_click_looks_it_up_in_history(
    cluster: Cluster, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "profiles"
    browser_cluster(cluster, monkeypatch, root)
    pg_log_in(_Sim(cluster.sim_url), db_url, PLATFORM, "a1", root)  # type: ignore[arg-type]
    # A slow answer: the first worker dies while the app is still streaming it.
    web_faults(cluster, chunk_delay_s=0.2)
    questions = [QUESTION, QUESTION + "？"]
    caps = {**CAPS, **load_registry().capabilities()}
    raw = web_run(questions, devices=("desktop",), platforms=(PLATFORM,))
    ids = make_browser_run(db_url, "r-browser-crash", caps, raw)
    cluster.relay()
    cluster.sweeper()
    w1 = cluster.worker(crash_at="browser_sent_not_answered", platforms=(PLATFORM,))
    assert cluster.wait_dead(w1) == -signal.SIGKILL
    sent_before = web_counts(cluster)[APP]["a1"]["sends"]
    assert sent_before == 1  # the question reached the app before the kill
    web_faults(cluster, chunk_delay_s=0.0)
    w2 = cluster.worker(platforms=(PLATFORM,))
    cluster.wait(cluster.all_terminal, RECOVERY_S + LEASE_S + SWEEP_S, "every sample terminal")
    cluster.stop(w2)
    got = check_invariants(db_url, expected_samples=len(ids))
    assert got["states"] == {"completed": len(ids)}
    seen = web_counts(cluster)[APP]["a1"]
    # At most one send per sample: the killed one was found in the history, not asked again.
    assert seen["sends"] == len(ids), seen
    rows = fetch(
        db_url,
        "SELECT sample_id, attempt_no, resolved_by FROM geo.upstream_requests "
        "WHERE resolved_by = 'lookup'",
    )
    assert len(rows) == 1 and rows[0]["attempt_no"] == 1, rows
    recovered = rows[0]["sample_id"]
    answer = fetch(
        db_url,
        "SELECT raw_text AS answer_text, warnings FROM geo.answers WHERE sample_id = %s",
        (recovered,),
    )
    assert answer and "RECOVERED_FROM_HISTORY" in answer[0]["warnings"], answer
    assert answer[0]["answer_text"].strip()
    charges = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    assert len(charges) == len(ids) and all(c["n"] == 1 for c in charges)


def test_two_workers_never_send_on_one_account_at_once(
    cluster: Cluster, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "profiles"
    browser_cluster(cluster, monkeypatch, root)
    pg_log_in(_Sim(cluster.sim_url), db_url, PLATFORM, "a1", root)  # type: ignore[arg-type]
    # Answers long enough that a second worker tries the account while it is answering.
    web_faults(cluster, chunk_delay_s=0.05)
    questions = [f"{QUESTION}{i}" for i in range(3)]
    caps = {**CAPS, **load_registry().capabilities()}
    raw = web_run(questions, devices=("desktop", "mobile"), platforms=(PLATFORM,))
    ids = make_browser_run(db_url, "r-browser-two", caps, raw)
    cluster.relay()
    cluster.sweeper()
    workers = [cluster.worker(platforms=(PLATFORM,)) for _ in range(2)]
    cluster.wait(cluster.all_terminal, 2 * RECOVERY_S, "every sample terminal")
    reports = [cluster.stop(w) for w in workers]
    got = check_invariants(db_url, expected_samples=len(ids))
    assert got["states"] == {"completed": len(ids)}
    seen = web_counts(cluster)[APP]["a1"]
    assert seen["sends"] == len(ids), seen
    assert seen["max_concurrent"] == 1, seen  # never two answers at once on one account
    # The account was contended: a worker found it leased by the other and its sample waited
    # (never two browsers on it, never a failure).
    waits = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.state_transitions WHERE reason = 'unavailable:no_account'",
    )[0]["n"]
    assert waits >= 1, reports
