"""The browser lane's frame parsers and helpers (pure): each app's stream from the simulator's
encoder parses back to the same text, citations (at their markers) and queries; the real
DeepSeek capture's BATCH form parses; a stream that is not the app's shape is Unparseable with
the raw bytes; a truncated stream is marked; CDP's decoded body is turned back into its bytes;
bad device/region settings name their field."""

from __future__ import annotations

import pytest

from geo_pipeline.connectors.base import InvalidParams, Unparseable
from geo_pipeline.connectors.browser import deepseek, doubao, kimi
from geo_pipeline.connectors.browser.accounts import LocalAccounts, Pacing, profile_dir
from geo_pipeline.connectors.browser.connector import body_bytes
from geo_pipeline.connectors.browser.spec import NoAccountReady, device_profile, region_profile
from geo_pipeline.simulator.answers import GeneratedCitation
from geo_pipeline.simulator.webapp.frames import Turn, encode

TEXT = "推荐：1. 瑞幸 [1]；2. 星巴克 [2]。来源见下。"
CITES = (
    GeneratedCitation("1", "https://www.zhihu.com/question/1?utm_source=x", "知乎"),
    GeneratedCitation("2", "https://baike.baidu.com/item/2", "百度百科"),
    GeneratedCitation("3", "https://www.sohu.com/a/3", "搜狐"),
)
TURN = Turn(2, "咖啡？", TEXT, CITES, ("咖啡？", "咖啡？ 推荐"), True)
PARSERS = {"deepseek": deepseek.parse, "doubao": doubao.parse, "kimi": kimi.parse}


@pytest.mark.parametrize("platform", sorted(PARSERS))
def test_each_app_stream_parses_back(platform: str) -> None:
    raw = b"".join(encode(platform, TURN))
    parsed = PARSERS[platform](raw)
    assert parsed.answer_text == TEXT and not parsed.truncated
    assert parsed.search_queries == ("咖啡？", "咖啡？ 推荐") and parsed.web_search_used
    by_id = {c.id: c for c in parsed.citations}
    assert by_id["1"].relation == "cited" and by_id["2"].relation == "cited"
    s1 = by_id["1"]
    assert s1.span_start is not None and TEXT[s1.span_start : s1.span_end] == "[1]"
    assert by_id["3"].relation == "retrieved" and by_id["3"].span_start is None
    assert by_id["1"].url == CITES[0].url


@pytest.mark.parametrize("platform", sorted(PARSERS))
def test_truncated_stream_is_marked_and_garbage_is_unparseable(platform: str) -> None:
    cut = PARSERS[platform](b"".join(encode(platform, TURN, cut=True)))
    assert cut.truncated and "STREAM_INCOMPLETE" in cut.warnings
    junk = b"<html><body>502 Bad Gateway</body></html>"
    with pytest.raises(Unparseable) as err:
        PARSERS[platform](junk)
    assert err.value.raw == junk


def test_deepseek_batch_form_of_the_stored_capture() -> None:
    raw = (
        'event: ready\ndata: {"request_message_id":1,"response_message_id":2}\n\n'
        'data: {"v": {"response": {"message_id": 2, "fragments": []}}}\n\n'
        'data: {"v": [{"v": false, "p": "has_pending_fragment"}, {"v": [{"id": 1, "type": '
        '"RESPONSE", "content": "你好", "references": []}], "p": "fragments", "o": "APPEND"}], '
        '"p": "response", "o": "BATCH"}\n\n'
        'data: {"v": "！", "p": "response/fragments/0/content", "o": "APPEND"}\n\n'
        'data: {"v": "😊"}\n\n'
        'data: {"v": "FINISHED", "p": "response/status", "o": "SET"}\n\n'
    ).encode()
    parsed = deepseek.parse(raw)
    assert parsed.answer_text == "你好！😊" and not parsed.truncated


def test_body_bytes_reverses_chromiums_decoding() -> None:
    raw = "关于「咖啡」 [1] 😊 ok".encode()
    as_cp1252 = "".join(
        bytes([b]).decode("cp1252") if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else chr(b)
        for b in raw
    )
    assert body_bytes(as_cp1252, None) == raw
    assert body_bytes(raw.decode(), None) == raw  # decoded as UTF-8 already
    assert body_bytes(raw.decode(), "utf-8") == raw


def test_device_and_region_settings_are_checked() -> None:
    assert device_profile("mobile", {}).scale == 3.0
    assert device_profile("tablet", {"devices": {"tablet": {"width": 800, "height": 1280}}}).width
    with pytest.raises(InvalidParams, match="device 'watch'"):
        device_profile("watch", {})
    with pytest.raises(InvalidParams, match=r"options\.devices\.mobile"):
        device_profile("mobile", {"devices": {"mobile": {"width": "wide"}}})
    with pytest.raises(InvalidParams, match="region 'mars'"):
        region_profile("mars", {})
    assert region_profile("cn", {}).timezone == "Asia/Shanghai"


def test_local_accounts_lease_pacing_and_fencing(tmp_path: object) -> None:
    import asyncio
    from pathlib import Path

    now = [100.0]
    accounts = LocalAccounts(
        {"doubao": ["a1"]}, Path(str(tmp_path)), Pacing(5.0, 0.0), 2, clock=lambda: now[0]
    )

    async def run() -> None:
        lease = await accounts.acquire("doubao")
        with pytest.raises(NoAccountReady):  # one account = one conversation at a time
            await accounts.acquire("doubao")
        await accounts.release(lease, "sent")
        with pytest.raises(NoAccountReady) as wait:
            await accounts.acquire("doubao")
        assert wait.value.retry_after_s == pytest.approx(5.0)
        now[0] += 5.0
        again = await accounts.acquire("doubao")
        assert again.token == lease.token + 1
        await accounts.release(lease, "suspended")  # a stale token changes nothing
        assert accounts.state("doubao", "a1") == "ready"
        await accounts.release(again, "needs_login")
        assert accounts.state("doubao", "a1") == "needs_login"

    asyncio.run(run())
    with pytest.raises(ValueError, match="account id"):
        profile_dir(Path("/x"), "doubao", "../a")
