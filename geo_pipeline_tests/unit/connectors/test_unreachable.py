"""A connection that cannot be made names the platform's URL and the cause, in the error a
failed attempt records and in a warning (issue 30: the README's recipe showed 24 bare
``transient`` failures and no line naming the URL). Only the origin is named: a query could
carry a key. Real sockets: a loopback port held and not listening (refused; a port found free
and closed again could be taken by a parallel test and answer)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from geo_pipeline.connectors import http as chttp
from geo_pipeline.connectors.base import TransientError
from geo_pipeline_tests.processes import closed_port


async def _fail(url: str) -> httpx.HTTPError:
    async with httpx.AsyncClient() as client:
        try:
            await client.get(url)
        except httpx.HTTPError as exc:
            return exc
    raise AssertionError(f"{url} answered")


def test_a_refused_connection_names_the_url_once_per_interval(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chttp, "_unreachable", {}, raising=False)
    with closed_port() as sock:
        port = sock.getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/deepseek/tasks?key=SECRET-KEY"
        with caplog.at_level(logging.WARNING, logger="geo_pipeline.connectors"):
            errors = [
                chttp.transport_error(
                    asyncio.run(_fail(url)), sent_means_unknown=True, what="submit"
                )
                for _ in range(3)
            ]
    origin = f"http://127.0.0.1:{port}"
    for err in errors:
        assert isinstance(err, TransientError)  # nothing was sent: a retry cannot duplicate
        assert f"could not connect to {origin}" in str(err) and "ConnectError" in str(err)
        assert "SECRET-KEY" not in str(err)
    warnings = [r for r in caplog.records if r.getMessage() == "platform unreachable"]
    assert len(warnings) == 1, caplog.text  # not one per request
    assert warnings[0].url == origin and "SECRET-KEY" not in caplog.text  # type: ignore[attr-defined]
