"""The simulator's consumer chat web apps (/ui/<platform>/, issue #32) over real HTTP: the login
wall and its session cookie, each app's own SSE frame shape, the per-account counts and the
faults a browser collector must survive."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from geo_pipeline_tests.fixtures.simulator import SimulatorProcess

STREAM = {
    "deepseek": "api/v0/chat/completion",
    "doubao": "samantha/chat/completion",
    "kimi": "api/chat/c1/completion/stream",
}


def _login(sim: SimulatorProcess, platform: str, account: str) -> httpx.Client:
    client = httpx.Client(base_url=sim.url, timeout=30)
    resp = client.post(f"/ui/{platform}/login", data={"account": account})
    assert resp.status_code == 302, resp.text
    assert "sim_session" in client.cookies
    return client


def _frames(body: str) -> list[dict[str, Any]]:
    out = []
    for block in body.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


def _counts(sim: SimulatorProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/ui/_control/counts", timeout=10).json())


def _faults(sim: SimulatorProcess, platform: str, **faults: Any) -> httpx.Response:
    return httpx.post(f"{sim.url}/ui/_control/faults/{platform}", json=faults, timeout=10)


def test_login_wall_then_chat_page_and_each_apps_frames(
    own_simulator: Callable[..., SimulatorProcess],
) -> None:
    sim = own_simulator()
    anon = httpx.get(f"{sim.url}/ui/deepseek/", timeout=10)
    assert anon.status_code == 200 and "登录" in anon.text and "chat-input" not in anon.text
    for platform, path in STREAM.items():
        client = _login(sim, platform, f"{platform}-a1")
        page = client.get(f"/ui/{platform}/")
        assert "联网搜索" in page.text and "history" in page.text
        resp = client.post(
            f"/ui/{platform}/{path}",
            json={"prompt": "国内最好喝的咖啡品牌？", "search_enabled": True},
        )
        assert resp.headers["content-type"].startswith("text/event-stream")
        frames = _frames(resp.text)
        if platform == "deepseek":
            assert resp.text.startswith("event: ready")
            search = frames[2]["v"][0]
            assert search["type"] == "SEARCH" and search["queries"][0] == "国内最好喝的咖啡品牌？"
            assert all(r["url"].startswith("https://") for r in search["results"])
            assert frames[-2] == {"v": "FINISHED", "p": "response/status", "o": "SET"}
        elif platform == "doubao":
            block = frames[0]["patch_op"][0]["patch_value"]["content_block"][0]
            assert block["block_type"] == 10025
            assert block["content"]["search_query_result_block"]["results"][0]["text_card"]["url"]
            text = "".join(
                b["content"]["text_block"]["text"]
                for f in frames
                for op in f.get("patch_op", [])
                for b in op["patch_value"]["content_block"]
                if b["block_type"] == 10000
            )
            assert "国内最好喝的咖啡品牌" in text
        else:
            assert frames[0]["event"] == "req" and frames[-1] == {"event": "all_done"}
            assert any(f["event"] == "cmpl" for f in frames)
        history = client.get(f"/ui/{platform}/api/conversations").json()
        assert [h["title"] for h in history] == ["国内最好喝的咖啡品牌？"]
    counts = _counts(sim)
    assert counts["deepseek"]["deepseek-a1"]["sends"] == 1
    assert counts["doubao"]["doubao-a1"]["answered"] == 1


def test_captcha_refuses_sends_and_login_expiry_shows_the_wall(
    own_simulator: Callable[..., SimulatorProcess],
) -> None:
    sim = own_simulator()
    assert _faults(sim, "doubao", captcha_after=1).status_code == 200
    client = _login(sim, "doubao", "d1")
    ok = client.post("/ui/doubao/samantha/chat/completion", json={"prompt": "q1"})
    assert ok.status_code == 200
    assert "请完成安全验证" in client.get("/ui/doubao/").text
    refused = client.post("/ui/doubao/samantha/chat/completion", json={"prompt": "q2"})
    assert refused.status_code == 403 and refused.json() == {"code": "risk_control"}
    assert _counts(sim)["doubao"]["d1"]["sends"] == 1

    assert _faults(sim, "deepseek", expire_after=1).status_code == 200
    ds = _login(sim, "deepseek", "k1")
    ds.post("/ui/deepseek/api/v0/chat/completion", json={"prompt": "q1"})
    assert "请登录后继续使用" in ds.get("/ui/deepseek/").text
    # One-shot: a new login works again.
    ds2 = _login(sim, "deepseek", "k1")
    assert "chat-input" in ds2.get("/ui/deepseek/").text


def test_changed_layout_truncated_stream_and_bad_fault_settings(
    own_simulator: Callable[..., SimulatorProcess],
) -> None:
    sim = own_simulator()
    assert _faults(sim, "deepseek", layout="changed", truncate=True).status_code == 200
    client = _login(sim, "deepseek", "x")
    page = client.get("/ui/deepseek/").text
    assert "chat-input" not in page and "composer-v2" in page
    body = client.post("/ui/deepseek/api/v0/chat/completion", json={"prompt": "q"}).text
    assert "FINISHED" not in body and "event: close" not in body
    bad = _faults(sim, "deepseek", captcha_after="soon")
    assert bad.status_code == 400
    assert "faults.deepseek.captcha_after" in bad.json()["error"] and "soon" in bad.json()["error"]
    unknown = _faults(sim, "deepseek", catpcha_after=1)
    assert unknown.status_code == 400 and "allowed" in unknown.json()["error"]


@pytest.mark.parametrize("platform", ["nope"])
def test_unknown_platform_is_404(
    own_simulator: Callable[..., SimulatorProcess], platform: str
) -> None:
    sim = own_simulator()
    assert httpx.get(f"{sim.url}/ui/{platform}/", timeout=10).status_code == 404


def test_two_answers_at_once_on_one_account_are_recorded_and_the_conversation_is_kept(
    own_simulator: Callable[..., SimulatorProcess],
) -> None:
    """The judge of "one account = one conversation at a time": two questions streaming at once
    on one account show as max_concurrent 2 (one after the other stays 1). A question the
    client walks away from mid-answer is still in the account's history."""
    import threading

    sim = own_simulator()
    client = _login(sim, "deepseek", "a1")
    httpx.post(
        f"{sim.url}/ui/_control/faults/deepseek", json={"chunk_delay_s": 0.05}, timeout=10
    ).raise_for_status()
    url = f"/ui/deepseek/{STREAM['deepseek']}"
    client.post(url, json={"prompt": "一个问题", "conversation_id": "x0"})
    assert _counts(sim)["deepseek"]["a1"]["max_concurrent"] == 1
    cookies = dict(client.cookies)

    def ask(n: int) -> None:
        httpx.post(
            f"{sim.url}{url}",
            json={"prompt": f"问题{n}", "conversation_id": f"x{n}"},
            cookies=cookies,
            timeout=60,
        )

    threads = [threading.Thread(target=ask, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _counts(sim)["deepseek"]["a1"]["max_concurrent"] == 2
    with client.stream("POST", url, json={"prompt": "走开了", "conversation_id": "x3"}) as r:
        next(r.iter_bytes())  # the first frame, then the client goes away
    titles = [c["title"] for c in client.get("/ui/deepseek/api/conversations").json()]
    assert titles[0] == "走开了" and "一个问题" in titles
