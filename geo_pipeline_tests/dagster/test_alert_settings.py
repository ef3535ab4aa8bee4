"""The alert settings have one source, the typed ``Settings`` (issue 38): the notifiers and the
alert thresholds read ``settings()``'s ``alert_*`` fields, so the 11 GEO_ALERT_* variables
follow the same rules as every other variable (an empty one is unset, a flag is one of
1/true/yes/on, a wrong type is an error naming the variable)."""

from __future__ import annotations

import pytest

from geo_pipeline.defs.operations.alerts import AlertThresholds
from geo_pipeline.observability.notify import SmtpNotifier, WebhookNotifier, notifiers_from_env
from geo_pipeline.settings import SettingsError

SMTP = {
    "GEO_ALERT_SMTP_HOST": "127.0.0.1",
    "GEO_ALERT_EMAIL_FROM": "geo@example.test",
    "GEO_ALERT_EMAIL_TO": "oncall@example.test, data@example.test",
}


@pytest.fixture(autouse=True)
def _no_alert_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("GEO_ALERT_"):
            monkeypatch.delenv(name)


def test_a_flag_means_what_it_means_for_every_other_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SMTP.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GEO_ALERT_SMTP_STARTTLS", "on")  # a true flag to Settings.flag
    monkeypatch.setenv("GEO_ALERT_SMTP_PORT", "")  # empty: unset, the default port
    [smtp] = notifiers_from_env()
    assert isinstance(smtp, SmtpNotifier)
    assert smtp.starttls is True
    assert smtp.port == 25
    assert smtp.recipients == ["oncall@example.test", "data@example.test"]


def test_a_bad_value_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEO_ALERT_DEAD_LETTERS", "ten")
    with pytest.raises(SettingsError, match="GEO_ALERT_DEAD_LETTERS"):
        AlertThresholds.from_env()
    monkeypatch.delenv("GEO_ALERT_DEAD_LETTERS")
    for name, value in SMTP.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GEO_ALERT_SMTP_PORT", "twenty-five")
    with pytest.raises(SettingsError, match="GEO_ALERT_SMTP_PORT"):
        notifiers_from_env()


def test_thresholds_and_notifiers_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AlertThresholds.from_env() == AlertThresholds()  # the documented defaults
    assert notifiers_from_env() == []
    monkeypatch.setenv("GEO_ALERT_DEAD_LETTERS", "3")
    monkeypatch.setenv("GEO_ALERT_UNCERTAIN", "4")
    monkeypatch.setenv("GEO_ALERT_STUCK_GRACE_S", "5")
    monkeypatch.setenv("GEO_ALERT_RECENT_DAYS", "6")
    assert AlertThresholds.from_env() == AlertThresholds(3, 4, 5, 6)
    monkeypatch.setenv("GEO_ALERT_WEBHOOK_URL", "http://127.0.0.1:9/hook")
    monkeypatch.setenv("GEO_ALERT_SMTP_HOST", "127.0.0.1")
    with pytest.raises(ValueError, match="GEO_ALERT_EMAIL_FROM, GEO_ALERT_EMAIL_TO"):
        notifiers_from_env()  # half an SMTP configuration is an error, not a silent drop
    for name, value in SMTP.items():
        monkeypatch.setenv(name, value)
    kinds = [type(n) for n in notifiers_from_env()]
    assert kinds == [WebhookNotifier, SmtpNotifier]
