"""A lane waits for its platform to answer before it claims (worker/platform_wait.py), saying
where it waits; bounded, after which it claims anyway with a warning. Real sockets on loopback:
a port held and not listening (refused), then a server on it."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from geo_pipeline.worker.platform_wait import PlatformGate
from geo_pipeline_tests.processes import closed_port


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == name]


def _listen_later(sock: socket.socket, caplog: pytest.LogCaptureFixture) -> tuple[bool, bool, str]:
    """Two lanes wait on ``sock``'s port, refused until it listens; returns whether the wait
    ended before it listened, the wait's result, and the URL."""
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def scenario() -> tuple[bool, bool]:
        gate = PlatformGate(
            {"deepseek": f"{url}/v1?key=not-logged", "kimi": url, "inproc": ""}, wait_s=600
        )
        assert await gate.ready("inproc")  # no URL: nothing to wait for
        waiting = asyncio.create_task(gate.ready("deepseek"))
        also = asyncio.create_task(gate.ready("kimi"))  # same origin: one probe
        while not _events(caplog, "worker.platform_waiting"):
            assert not waiting.done()
            await asyncio.sleep(0.05)
        done_before_listening = waiting.done()
        server = await asyncio.start_server(lambda r, w: w.close(), sock=sock)
        async with server:
            result = await asyncio.wait_for(waiting, timeout=60)
            await asyncio.wait_for(also, timeout=60)
        return done_before_listening, result

    with caplog.at_level(logging.INFO, logger="geo_pipeline.worker"):
        done_before, result = asyncio.run(scenario())
    return done_before, result, url


def test_a_lane_waits_until_its_platform_listens_and_says_where(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The port is held, refused, from the start: a port found free and closed again could be
    # taken by a parallel test before the "platform" below listens on it.
    with closed_port() as sock:
        done_before, result, url = _listen_later(sock, caplog)
    assert not done_before and result is True
    waited = _events(caplog, "worker.platform_waiting")[0]
    assert waited.url == url and "Connection" in waited.error  # type: ignore[attr-defined]
    assert waited.platforms == ["deepseek", "kimi"]  # type: ignore[attr-defined]
    reached = _events(caplog, "worker.platform_reachable")
    assert len(reached) == 1 and reached[0].url == url  # type: ignore[attr-defined]
    assert "not-logged" not in caplog.text


def test_the_wait_is_bounded_and_ends_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with closed_port() as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        gate = PlatformGate({"deepseek": url}, wait_s=0.3)
        with caplog.at_level(logging.INFO, logger="geo_pipeline.worker"):
            assert asyncio.run(gate.ready("deepseek")) is False
    (warning,) = _events(caplog, "worker.platform_unreachable")
    assert warning.levelname == "WARNING" and warning.url == url  # type: ignore[attr-defined]


def test_no_wait_when_switched_off() -> None:
    with closed_port() as sock:
        gate = PlatformGate({"deepseek": f"http://127.0.0.1:{sock.getsockname()[1]}"}, wait_s=0)
        assert asyncio.run(gate.ready("deepseek")) is False
