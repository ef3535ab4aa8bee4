"""Alert delivery: a Slack-compatible webhook and e-mail (SMTP), configured by the
typed ``alert_*`` settings (geo_pipeline.settings, the variables below).

    GEO_ALERT_WEBHOOK_URL    POST {"text": ...} (Slack incoming webhooks, Mattermost, Rocket.Chat)
    GEO_ALERT_SMTP_HOST      with GEO_ALERT_SMTP_PORT (25), GEO_ALERT_EMAIL_FROM, GEO_ALERT_EMAIL_TO
                             (comma-separated), optional GEO_ALERT_SMTP_USER / _PASSWORD and
                             GEO_ALERT_SMTP_STARTTLS=1

Neither set: alerts are only logged (a laptop, CI). A notifier that fails raises; the caller
keeps the incident unreported and tries again on its next tick, so a webhook outage delays an
alert rather than losing it. Secrets come only from the environment (D2) and never appear in a
message or an error.
"""

from __future__ import annotations

import smtplib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any, Protocol

import httpx

from geo_pipeline.settings import Settings, settings

RUNBOOK = "docs/operations.md"


@dataclass(frozen=True)
class Alert:
    """One incident, or the message that it has cleared (``resolved``)."""

    key: str  # the incident's identity: one alert per key until it clears
    kind: str  # the runbook section: docs/operations.md#alert-<kind>
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    resolved: bool = False

    def subject(self) -> str:
        return f"[geo_pipeline {'RESOLVED' if self.resolved else 'ALERT'}] {self.summary}"

    def text(self) -> str:
        lines = [self.subject()]
        lines += [f"{k}: {v}" for k, v in self.details.items()]
        lines.append(f"runbook: {RUNBOOK}#alert-{self.kind.replace('_', '-')}")
        lines.append(f"incident: {self.key}")
        return "\n".join(lines)


class Notifier(Protocol):
    name: str

    def send(self, alert: Alert) -> None: ...


@dataclass
class WebhookNotifier:
    url: str
    timeout_s: float = 10.0
    name: str = "webhook"

    def send(self, alert: Alert) -> None:
        resp = httpx.post(self.url, json={"text": alert.text()}, timeout=self.timeout_s)
        if resp.status_code >= 300:
            # The URL of an incoming webhook is itself a secret: say where, not what.
            raise RuntimeError(f"alert webhook answered HTTP {resp.status_code}")


@dataclass
class SmtpNotifier:
    host: str
    port: int
    sender: str
    recipients: Sequence[str]
    username: str | None = None
    password: str | None = None
    starttls: bool = False
    timeout_s: float = 10.0
    name: str = "smtp"

    def send(self, alert: Alert) -> None:
        msg = EmailMessage()
        msg["Subject"] = alert.subject()
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.recipients)
        msg["X-Geo-Incident"] = alert.key
        msg.set_content(alert.text())
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(msg)


def notifiers_from_env(env: Settings | None = None) -> list[Notifier]:
    """The notifiers the settings configure (module docstring; the typed ``alert_*`` fields of
    geo_pipeline.settings, default ``settings()``); a half-configured SMTP is an error naming
    the missing variables, not a silent drop."""
    env = settings() if env is None else env
    out: list[Notifier] = []
    if env.alert_webhook_url:
        out.append(WebhookNotifier(env.alert_webhook_url))
    if env.alert_smtp_host:
        missing = [
            name
            for name, value in (
                ("GEO_ALERT_EMAIL_FROM", env.alert_email_from),
                ("GEO_ALERT_EMAIL_TO", env.alert_email_to),
            )
            if not value
        ]
        if missing or env.alert_email_from is None or env.alert_email_to is None:
            raise ValueError(f"GEO_ALERT_SMTP_HOST is set but {', '.join(missing)} not")
        out.append(
            SmtpNotifier(
                host=env.alert_smtp_host,
                port=env.alert_smtp_port,
                sender=env.alert_email_from,
                recipients=[a.strip() for a in env.alert_email_to.split(",") if a.strip()],
                username=env.alert_smtp_user,
                password=env.alert_smtp_password,
                starttls=Settings.flag(env.alert_smtp_starttls),
            )
        )
    return out


def deliver(notifiers: Sequence[Notifier], alert: Alert) -> list[str]:
    """Send to every notifier; returns the failures (``name: error``), empty when all worked."""
    failures = []
    for n in notifiers:
        try:
            n.send(alert)
        except Exception as exc:
            failures.append(f"{n.name}: {type(exc).__name__}: {exc}")
    return failures
