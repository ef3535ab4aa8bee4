"""Registry fields that describe how a platform's answers are collected (docs/design.md section
9): ``access``, ``cancel_scope`` and ``result_retention_s``; a bad value is refused with its path,
the value and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from geo_pipeline.domain.catalogue import RegistryError, parse_catalogue


def spec(**extra: Any) -> dict[str, Any]:
    return {
        "platforms": {
            "svc": {
                "protocol": "cloro",
                "devices": ["web"],
                "regions": ["us"],
                "modes": ["standard"],
                "prices": {"version": "v", "currency": "USD", "base": {"standard": 1}},
                **extra,
            }
        }
    }


def test_defaults_are_an_api_with_per_task_cancel_and_no_stated_retention() -> None:
    caps = parse_catalogue(spec()).entries["svc"].capabilities
    assert (caps.access, caps.cancel_scope, caps.result_retention_s) == ("api", "task", None)


def test_a_scraped_service_says_so() -> None:
    caps = (
        parse_catalogue(spec(access="scraped", cancel_scope="queue", result_retention_s=86400))
        .entries["svc"]
        .capabilities
    )
    assert (caps.access, caps.cancel_scope, caps.result_retention_s) == ("scraped", "queue", 86400)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("access", "scrapped", "platforms.svc.access: 'scrapped' is not allowed; allowed: api"),
        ("cancel_scope", "one", "platforms.svc.cancel_scope: 'one' is not allowed"),
        ("result_retention_s", -5, "platforms.svc.result_retention_s: -5 is not a positive"),
        ("result_retention_s", "1d", "platforms.svc.result_retention_s: '1d' is not a positive"),
    ],
)
def test_bad_values_are_refused_with_their_path(field: str, value: Any, message: str) -> None:
    with pytest.raises(RegistryError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_catalogue(spec(**{field: value}))
