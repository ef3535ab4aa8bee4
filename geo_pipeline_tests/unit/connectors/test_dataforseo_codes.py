"""DataForSEO's status codes (inside HTTP 200, top level and per task) as the R13 classes."""

from __future__ import annotations

import pytest

from geo_pipeline.connectors.dataforseo import classify


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (20000, None),
        (20100, None),
        (40102, "upstream_failed"),  # no results
        (40103, "upstream_failed"),  # failed, resubmit -- not an auth error despite 401xx
        (40100, "no_permission"),
        (40101, "no_permission"),
        (40210, "no_permission"),
        (40202, "rate_limited"),
        (40209, "rate_limited"),
        (40205, "rate_limited"),
        (40401, "not_found"),
        (40403, "not_found"),  # results expired
        (40501, "invalid_params"),
        (50301, "transient"),
        (50401, "transient"),
    ],
)
def test_codes(code: int, error_class: str | None) -> None:
    err = classify(code, "msg", "what", b"{}")
    assert (err.error_class if err else None) == error_class
    if err is not None:
        assert str(code) in str(err) and err.raw == b"{}"
