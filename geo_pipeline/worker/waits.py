"""A sample that waits because nothing could be sent (the ``unavailable`` class, R13): a login
wall, a captcha page, a changed page, no free account. The sample is handed back with a growing
delay (domain.retry); this says so in the log, at WARNING where a person must act."""

from __future__ import annotations

import logging

log = logging.getLogger("geo_pipeline.worker")

# Causes only a person can clear: the account must be logged in again or looked at (a captcha
# suspended it), or the platform's selectors must be updated.
NEEDS_A_PERSON = {
    "needs_login": "log the account in again: geo-pipeline accounts login",
    "account_suspended": "a captcha / risk-control page suspended the account: look, then resume",
    "invalid_capability": "the page changed: update the platform's selectors",
}


def waiting(platform: str, sample_id: str, reason: str, delay_s: float, exc: Exception) -> None:
    """One log line per waiting sample; the account and page details are in ``exc``'s message
    (never a credential or cookie)."""
    cause = reason.removeprefix("unavailable:")
    action = NEEDS_A_PERSON.get(cause)
    log.log(
        logging.WARNING if action else logging.INFO,
        "sample.waits",
        extra={
            "platform": platform,
            "sample_id": sample_id,
            "reason": reason,
            "delay_s": round(delay_s, 1),
            "detail": str(exc)[:200],
            **({"action": action} if action else {}),
        },
    )
