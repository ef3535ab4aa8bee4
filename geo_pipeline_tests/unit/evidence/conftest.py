from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from geo_pipeline.domain import urls
from geo_pipeline.settings import configure_domain


@pytest.fixture
def url_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str | None], None]]:
    """Set (or, with None, unset) a GEO_URL_* variable and hand the environment to the domain as
    a process's entry point does; the defaults come back after the test."""

    def set_var(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        configure_domain()

    yield set_var
    urls.configure()
