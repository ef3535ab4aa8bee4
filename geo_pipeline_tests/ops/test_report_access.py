"""How each channel was collected, as the reports show it (issues 31, 32): the platform's
``access`` in the connector registry, whether the platform is offered or disabled for want of
its key, and said as unknown (never guessed) for a platform the registry no longer lists."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.platforms import ACCESS_KINDS
from geo_pipeline.domain.words import ACCESS_WORDS, access_text
from geo_pipeline.ops.report import channel_access


def test_access_of_offered_disabled_and_unknown_platforms(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEO_CLORO_API_KEY", "GEO_BROWSER_PROFILES", "GEO_CONNECTORS_FILE"):
        monkeypatch.delenv(name, raising=False)
    got = channel_access(
        ["deepseek__web", "chatgpt_cloro__web", "deepseek_web__mobile", "gone__web"]
    )
    assert got == {
        "deepseek__web": "api",
        "chatgpt_cloro__web": "scraped",  # disabled here (no key): still labelled
        "deepseek_web__mobile": "browser",
        "gone__web": "unknown",
    }


def test_one_word_set_for_every_access_kind() -> None:
    assert tuple(ACCESS_WORDS) == ACCESS_KINDS
    assert all(f"{k} = " in access_text() for k in ACCESS_KINDS)
