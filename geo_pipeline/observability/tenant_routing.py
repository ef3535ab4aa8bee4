"""Alerts per tenant (issue 37): who hears about which of a tenant's alerts.

The operator's routing (notify.notifiers_from_env: one webhook / e-mail for every incident of the
deployment) stays as it is. A tenant's own alerts — a flagged mention-rate change, a failed
re-sample, a reconciliation difference — go to the recipients that tenant registered (for the
tenant, or for one of its monitors), and to nobody else (a stuck partition of the tenant's
run is sent too): routing compares tenant ids, and the
database refuses a recipient bound to another tenant's monitor.

A webhook recipient names the environment variable holding its URL (GEO_ALERT_WEBHOOK_<NAME>):
an incoming webhook's URL is a credential (D2), so it is never stored, logged or shown. An e-mail
recipient is sent through the deployment's SMTP server (GEO_ALERT_SMTP_HOST, _PORT,
GEO_ALERT_EMAIL_FROM and the optional login of notify.py) to its own address only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from geo_pipeline.observability.notify import Alert, Notifier, SmtpNotifier, WebhookNotifier


@dataclass(frozen=True)
class TenantAlert:
    """An alert that belongs to one tenant (and monitor, where there is one) and links a run."""

    alert: Alert
    tenant_id: str
    monitor_id: str | None
    run_id: str | None


@dataclass(frozen=True)
class Recipient:
    recipient_id: int
    tenant_id: str
    monitor_id: str | None  # None: every monitor of the tenant
    channel: str  # webhook | email
    target: str  # an e-mail address, or the NAME of the variable holding the webhook's URL
    kinds: tuple[str, ...]


def route(alert: TenantAlert, recipients: Sequence[Recipient]) -> list[Recipient]:
    """The recipients of ``alert``: the same tenant, the tenant-wide ones or those of its
    monitor, and subscribed to its kind. Never a recipient of another tenant."""
    return [
        r
        for r in recipients
        if r.tenant_id == alert.tenant_id
        and (r.monitor_id is None or r.monitor_id == alert.monitor_id)
        and alert.alert.kind in r.kinds
    ]


class RecipientUnavailable(RuntimeError):
    """A recipient that cannot be sent to with this environment (a variable not set)."""


def notifier_for(recipient: Recipient, env: Mapping[str, str]) -> Notifier:
    """The notifier that reaches one recipient; RecipientUnavailable says what to set."""
    if recipient.channel == "webhook":
        url = env.get(recipient.target)
        if not url:
            raise RecipientUnavailable(
                f"recipient {recipient.recipient_id}: environment variable {recipient.target} "
                "(the webhook's URL) is not set"
            )
        return WebhookNotifier(url, name=f"webhook {recipient.target}")
    host = env.get("GEO_ALERT_SMTP_HOST")
    sender = env.get("GEO_ALERT_EMAIL_FROM")
    if not host or not sender:
        raise RecipientUnavailable(
            f"recipient {recipient.recipient_id}: e-mail needs GEO_ALERT_SMTP_HOST and "
            "GEO_ALERT_EMAIL_FROM"
        )
    return SmtpNotifier(
        host=host,
        port=int(env.get("GEO_ALERT_SMTP_PORT", "25")),
        sender=sender,
        recipients=[recipient.target],
        username=env.get("GEO_ALERT_SMTP_USER") or None,
        password=env.get("GEO_ALERT_SMTP_PASSWORD") or None,
        starttls=(env.get("GEO_ALERT_SMTP_STARTTLS") or "").strip().lower() in ("1", "true", "yes"),
        name=f"email {recipient.target}",
    )
