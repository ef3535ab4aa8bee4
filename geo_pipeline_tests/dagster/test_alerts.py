"""Alerts end to end: the operations_alerts sensor over a real database delivers to a local HTTP
receiver (Slack-compatible webhook) and a local SMTP server (aiosmtpd), once per incident, with
a resolve message when it clears; a failed blocking check in a real Dagster instance alerts."""

from __future__ import annotations

import email
import json
import socket
import threading
from collections.abc import Iterator
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import dagster as dg
import pytest
from aiosmtpd.controller import Controller

from geo_pipeline.defs.operations.alerts import (
    blocking_check_incidents,
    operations_alerts,
    run_alerts,
)
from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline.observability.notify import Alert, WebhookNotifier
from geo_pipeline_tests.ops.helpers import make_run


class _Receiver(BaseHTTPRequestHandler):
    posts: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append(json.loads(body))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        del args


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    posts: list[dict[str, Any]] = []
    handler = type("Receiver", (_Receiver,), {"posts": posts})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks/geo", posts
    finally:
        server.shutdown()
        server.server_close()


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.content, policy=default_policy)
        self.messages.append(msg)  # type: ignore[arg-type]
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[int, _Mailbox]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    box = _Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, box
    finally:
        controller.stop()


@pytest.fixture
def alert_env(monkeypatch: pytest.MonkeyPatch, webhook, smtp) -> None:
    monkeypatch.setenv("GEO_ALERT_WEBHOOK_URL", webhook[0])
    monkeypatch.setenv("GEO_ALERT_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("GEO_ALERT_SMTP_PORT", str(smtp[0]))
    monkeypatch.setenv("GEO_ALERT_EMAIL_FROM", "geo@example.test")
    monkeypatch.setenv("GEO_ALERT_EMAIL_TO", "oncall@example.test, data@example.test")
    monkeypatch.setenv("GEO_ALERT_DEAD_LETTERS", "1")
    monkeypatch.setenv("GEO_ALERT_UNCERTAIN", "0")


def _metrics_row(conn: Any, run_id: str, day: str, n: int, mentions: int) -> None:
    rate = mentions / n
    conn.execute(
        "INSERT INTO analytics.channel_brand_metrics (run_id, tenant_id, monitor_id, "
        "scheduled_for, channel, platform, brand, is_target, samples, valid_samples, "
        "invalid_samples, analysing_samples, review_samples, n, mentions, mention_rate, "
        "mention_rate_lower, mention_rate_upper, domain_cited) VALUES (%s, 'acme', 'daily-acme', "
        "%s, 'deepseek__web', 'deepseek', '瑞幸咖啡', true, %s, %s, 0, 0, 0, %s, %s, %s, "
        "analytics.wilson_lower(%s, %s), analytics.wilson_upper(%s, %s), 0)",
        (run_id, day, n, n, n, mentions, rate, mentions, n, mentions, n),
    )
    # and its one question's row, which analytics.brand_changes tests
    conn.execute(
        "INSERT INTO analytics.brand_metrics (run_id, tenant_id, monitor_id, scheduled_for,"
        " channel, platform, device, region, mode, question_revision, question_index, brand,"
        " is_target, samples, valid_samples, invalid_samples, analysing_samples, review_samples,"
        " n, mentions, mention_rate, domain_cited, domain_retrieved) VALUES (%s, 'acme',"
        " 'daily-acme', %s, 'deepseek__web', 'deepseek', 'web', 'cn', 'standard', 'q1', 0,"
        " '瑞幸咖啡', true, %s, %s, 0, 0, 0, %s, %s, %s, 0, 0)",
        (run_id, day, n, n, n, mentions, rate),
    )


def _plant(conn: Any) -> None:
    samples = make_run(conn, "run-stuck")
    conn.execute(
        "UPDATE geo.runs SET confirmed_at = now(), created_at = now() - interval '7 hours' "
        "WHERE run_id = 'run-stuck'"
    )
    conn.execute(
        "INSERT INTO geo.dead_letters (stream, message_id, sample_id, deliveries, reason) "
        "VALUES ('collect:deepseek', '1-0', %s, 5, 'x'), ('collect:deepseek', '2-0', %s, 5, 'x')",
        (samples[0]["sample_id"], samples[1]["sample_id"]),
    )
    conn.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification, "
        "ours_minor, theirs_minor, currency) "
        "VALUES ('run-stuck', 'u1', 'deepseek', 'amount_mismatch', 8, 20, 'CNY')"
    )
    make_run(conn, "run-day1")
    make_run(conn, "run-day2")
    _metrics_row(conn, "run-day1", "2026-11-30", 200, 120)  # 60 %
    _metrics_row(conn, "run-day2", "2026-12-01", 200, 70)  # 35 %: significant
    for table in ("channel_brand_metrics", "brand_metrics"):
        conn.execute(
            f"UPDATE analytics.{table} SET scheduled_for = current_date - "
            "(CASE run_id WHEN 'run-day1' THEN 1 ELSE 0 END)"
        )
    # and the monitor's stored trends and changes, as refresh_analytics keeps them (0049)
    conn.execute("SELECT analytics.rebuild_brand_rollup('daily-acme')")
    conn.commit()


def _tick(db_url: str, cursor: str | None) -> tuple[str | None, str]:
    ctx = dg.build_sensor_context(cursor=cursor, resources={"db": PostgresResource(url=db_url)})
    result = operations_alerts(ctx)
    return ctx.cursor, str(getattr(result, "skip_message", result))


def test_one_alert_per_incident_then_a_resolve(conn, db_url, alert_env, webhook, smtp):
    _plant(conn)
    cursor, msg = _tick(db_url, None)
    posts, box = webhook[1], smtp[1]
    texts = [p["text"] for p in posts]
    kinds = sorted(t.split("runbook: docs/operations.md#alert-")[1].split("\n")[0] for t in texts)
    assert kinds == [
        "dead-letters",
        "mention-change",
        "reconciliation",
        "stuck-partition",
        "stuck-partition",
    ], texts
    assert len(box.messages) == len(posts)  # the same alerts by e-mail
    mail = box.messages[0]
    assert mail["To"] == "oncall@example.test, data@example.test"
    assert mail["Subject"].startswith("[geo_pipeline ALERT]") and mail["X-Geo-Incident"]
    change = next(t for t in texts if "mention rate" in t)
    assert "fell from 60.0% to 35.0%" in change
    assert "70/200 = 35.0%" in change and "120/200 = 60.0%" in change
    assert "interval (question-clustered, effective n 200.0)" in change
    assert "Benjamini-Hochberg q = " in change
    recon = next(t for t in texts if "fee statements" in t)
    assert "12 minor units CNY" in recon
    stuck = next(t for t in texts if "publish deadline" in t)
    assert "run-stuck / " in stuck and "open samples: 4" in stuck
    assert "2 open dead letters (threshold 1)" in next(t for t in texts if "dead letters" in t)
    assert "5 open incidents; sent 5" in msg

    # The same conditions on the next tick: nothing new is sent.
    cursor, msg = _tick(db_url, cursor)
    assert len(posts) == 5 and len(box.messages) == 5 and "sent 0" in msg

    # The dead letters settle: one resolve message, by both channels.
    conn.execute("DELETE FROM geo.dead_letters")
    conn.commit()
    cursor, msg = _tick(db_url, cursor)
    assert len(posts) == 6 and posts[-1]["text"].startswith("[geo_pipeline RESOLVED]")
    assert "open dead letters" in posts[-1]["text"]
    assert box.messages[-1]["Subject"].startswith("[geo_pipeline RESOLVED]")
    assert "dead_letters" not in json.loads(cursor or "{}")


def test_a_failed_delivery_is_retried_next_tick(webhook):
    url, posts = webhook
    alert = Alert("dead_letters", "dead_letters", "3 open dead letters")
    log = dg.get_dagster_logger()
    down = WebhookNotifier("http://127.0.0.1:9/nowhere", timeout_s=1)
    cursor, sent = run_alerts(None, {alert.key: alert}, [down], log)
    assert sent == [] and json.loads(cursor) == {}
    cursor, sent = run_alerts(cursor, {alert.key: alert}, [WebhookNotifier(url)], log)
    assert [a.key for a in sent] == ["dead_letters"] and len(posts) == 1


def test_a_failed_blocking_check_alerts_until_it_passes():
    state = {"ok": False}

    @dg.asset
    def numbers() -> int:
        return 1

    @dg.asset_check(asset=numbers, blocking=True)
    def numbers_are_right() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=state["ok"])

    @dg.asset_check(asset=numbers)
    def advisory() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False)  # not blocking: no alert

    repo = dg.Definitions(assets=[numbers], asset_checks=[numbers_are_right, advisory])
    with dg.instance_for_test() as instance:
        dg.materialize(
            [numbers, numbers_are_right, advisory], instance=instance, raise_on_error=False
        )
        found = blocking_check_incidents(instance, repo.get_repository_def())
        assert list(found) == ["blocking_check:numbers:numbers_are_right:(unpartitioned)"]
        assert (
            "blocking check numbers_are_right failed on numbers" in found[next(iter(found))].summary
        )
        state["ok"] = True
        dg.materialize(
            [numbers, numbers_are_right, advisory], instance=instance, raise_on_error=False
        )
        assert blocking_check_incidents(instance, repo.get_repository_def()) == {}


def test_a_failed_partition_stays_an_incident_however_many_partitions_pass_after_it():
    """Partitioned checks: the incident is the partition's latest status, not whatever the last
    ``history`` evaluations of the check happened to be (other partitions pass all day)."""
    parts = dg.DynamicPartitionsDefinition(name="parts")
    bad = {"p1"}

    @dg.asset(
        partitions_def=parts,
        check_specs=[
            dg.AssetCheckSpec("rows_right", asset="rows", blocking=True, partitions_def=parts)
        ],
    )
    def rows(context):  # type: ignore[no-untyped-def]  # a string annotation fails here
        ok = context.partition_key not in bad
        return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=ok)])

    repo = dg.Definitions(assets=[rows]).get_repository_def()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("parts", ["p1", "p2", "p3", "p4"])
        for p in ("p1", "p2", "p3", "p4"):
            dg.materialize([rows], partition_key=p, instance=instance, raise_on_error=False)
        found = blocking_check_incidents(instance, repo, history=2)
        assert list(found) == ["blocking_check:rows:rows_right:p1"]
        assert found["blocking_check:rows:rows_right:p1"].details["partition"] == "p1"
        bad.clear()
        dg.materialize([rows], partition_key="p1", instance=instance)
        assert blocking_check_incidents(instance, repo, history=2) == {}
