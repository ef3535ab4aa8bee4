"""A registry's yes/no fields must be YAML booleans (bad input, R12): ``lookup_by_key: "false"``
quoted in a hand-edited registry was read as *true* (any non-empty string is), so the worker
would have trusted lookups on a platform that has none and re-sent after an unknown outcome on
the strength of a "not found" that proves nothing. Now such a value is refused with its path,
the value and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from geo_pipeline.domain.catalogue import RegistryError, parse_catalogue

FLAGS = ("screenshot", "idempotency_keys", "lookup_by_key", "cancellable", "asynchronous")


def _spec(**extra: Any) -> dict[str, Any]:
    entry = {
        "devices": ["web"],
        "regions": ["cn"],
        "modes": ["standard"],
        "prices": {"version": "v", "currency": "CNY", "base": {"standard": 1}},
        **extra,
    }
    return {"platforms": {"p": entry}}


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", ["false", "no", 0, 1, "true", [], None])
def test_a_flag_that_is_not_a_boolean_is_refused_with_its_path(flag: str, value: Any) -> None:
    if value is None:  # an empty value in YAML means "not given": the default stands
        parse_catalogue(_spec(**{flag: value}))
        return
    with pytest.raises(RegistryError) as caught:
        parse_catalogue(_spec(**{flag: value}))
    text = str(caught.value)
    assert f"platforms.p.{flag}" in text and repr(value) in text and "true or false" in text


@pytest.mark.parametrize("flag", FLAGS)
def test_booleans_are_taken_as_given(flag: str) -> None:
    for value in (True, False):
        caps = parse_catalogue(_spec(**{flag: value})).capabilities()["p"]
        assert getattr(caps, flag) is value


def test_the_poll_with_result_option_is_a_boolean_too() -> None:
    entry = parse_catalogue(_spec(options={"poll_includes_result": False})).entry("p")
    assert entry.options["poll_includes_result"] is False
    with pytest.raises(RegistryError, match=r"platforms\.p\.options\.poll_includes_result"):
        parse_catalogue(_spec(options={"poll_includes_result": "false"}))


def test_requires_key_is_a_boolean_too() -> None:
    with pytest.raises(RegistryError, match=r"platforms\.p\.requires_key"):
        parse_catalogue(_spec(requires_key="false", api_key_env="GEO_P_KEY"))
