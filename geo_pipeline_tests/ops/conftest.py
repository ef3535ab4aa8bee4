"""Headless Debian chromium driven by Playwright (browser downloads do not work here, so the
system package is used through ``executable_path``). Tests skip with a clear reason when it is
absent; .ci/run installs it with ``apt-get install -y chromium``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("GEO_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("GEO_TEST_ARTIFACTS", "test-artifacts"))


def chromium_or_skip() -> str:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(
            f"browser test: no chromium at {CHROMIUM} (install Debian's package: "
            "apt-get update && apt-get install -y chromium; or set GEO_CHROMIUM)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("browser test: the playwright wheel is not installed (pip install playwright)")
    return CHROMIUM


@pytest.fixture
def browser_page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    path = chromium_or_skip()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
        finally:
            browser.close()
