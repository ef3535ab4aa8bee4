"""The simulator's ``--state-file`` journal covers the answer-scraping services (issue 31 on
issue 36): a simulator restarted on the same file is the same cloro, DataForSEO and Bright Data
account. A task created before the restart still answers its poll (not 404: that would read as a
result gone upstream), a reused cloro key still meets its 409, a cancelled snapshot stays
cancelled, a clock moved forward stays moved, and the per-key counts that judge "never twice"
are what they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from geo_pipeline_tests.fixtures.simulator import start_simulator

CLORO = {"Authorization": "Bearer sim-cloro-key"}
BD = {"Authorization": "Bearer sim-brightdata-key"}
DFS = ("sim-login", "sim-password")
DATASET = "gd_m7aof0k82r803d5bjm"


def stats(url: str, name: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/_control/services/{name}/stats", timeout=10).json())


def test_service_tasks_survive_a_restart_on_the_same_state_file(tmp_path: Path) -> None:
    state = tmp_path / "sim-state.jsonl"
    args = ("--state-file", str(state))
    profile = {"services": {"brightdata": {"stuck_rate": 1.0}}}
    sim = start_simulator(profile, seed=31, extra_args=args)
    try:
        url = sim.url
        task = httpx.post(
            f"{url}/cloro/v1/async/task",
            headers=CLORO,
            json={
                "taskType": "CHATGPT",
                "idempotencyKey": "s1:1",
                "payload": {"prompt": "Best coffee in Oslo?", "country": "NO"},
            },
            timeout=10,
        ).json()["task"]
        snap = httpx.post(
            f"{url}/brightdata/datasets/v3/trigger",
            params={"dataset_id": DATASET},
            headers=BD,
            json=[{"url": "https://chatgpt.com/", "prompt": "Best tea in Oslo?", "country": "NO"}],
            timeout=10,
        ).json()["snapshot_id"]
        httpx.post(
            f"{url}/brightdata/datasets/v3/snapshot/{snap}/cancel", headers=BD, timeout=10
        ).raise_for_status()
        posted = httpx.post(
            f"{url}/dataforseo/v3/ai_optimization/chat_gpt/llm_scraper/task_post",
            auth=DFS,
            json=[
                {
                    "keyword": "Best juice in Oslo?",
                    "location_code": 2840,
                    "language_code": "en",
                    "tag": "s2:1",
                }
            ],
            timeout=10,
        ).json()["tasks"][0]
        assert posted["status_code"] == 20100, posted
        dfs = posted["id"]
        httpx.post(
            f"{url}/_control/services/cloro/advance", json={"seconds": 3600}, timeout=10
        ).raise_for_status()
        before = {n: stats(url, n) for n in ("cloro", "brightdata", "dataforseo")}
    finally:
        sim.stop()

    again = start_simulator(profile, seed=31, extra_args=args)
    try:
        url = again.url
        got = httpx.get(f"{url}/cloro/v1/async/task/{task['id']}", headers=CLORO, timeout=10)
        assert got.status_code == 200 and got.json()["task"]["status"] == "COMPLETED"
        assert got.json()["credits"]["creditsCharged"] == 5
        # The key is still bound: a re-send meets the 409, never a second task.
        resent = httpx.post(
            f"{url}/cloro/v1/async/task",
            headers=CLORO,
            json={
                "taskType": "CHATGPT",
                "idempotencyKey": "s1:1",
                "payload": {"prompt": "Best coffee in Oslo?", "country": "NO"},
            },
            timeout=10,
        )
        assert resent.status_code == 409
        progress = httpx.get(
            f"{url}/brightdata/datasets/v3/progress/{snap}", headers=BD, timeout=10
        ).json()
        assert progress["status"] == "failed" and "cancelled" in progress["error_message"]
        entry = httpx.get(
            f"{url}/dataforseo/v3/ai_optimization/chat_gpt/llm_scraper/task_get/advanced/{dfs}",
            auth=DFS,
            timeout=10,
        ).json()["tasks"][0]
        assert entry["status_code"] == 20000, entry
        after = {n: stats(url, n) for n in ("cloro", "brightdata", "dataforseo")}
    finally:
        again.stop()
    key = after["cloro"]["keys"]["s1:1"]
    assert key["tasks_created"] == before["cloro"]["keys"]["s1:1"]["tasks_created"] == 1
    assert after["brightdata"]["keys"] == before["brightdata"]["keys"]
    assert after["brightdata"]["cancelled"] == 1
    assert after["dataforseo"]["keys"]["s2:1"]["tasks_created"] == 1
