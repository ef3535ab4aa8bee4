"""Alerts per tenant (issue 37), end to end: the tenant_alerts sensor over a real database sends
each tenant's alerts — a flagged mention change, a reconciliation difference, a failed re-sample
(a real resample job refused for a short balance) — to that tenant's own webhook / e-mail
(local HTTP receivers and a local SMTP server), never to the other tenant's; once per recipient,
and a failed delivery is tried again on the next tick."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
from click.testing import CliRunner

from geo_pipeline.cli.monitors import monitors_group
from geo_pipeline.defs.operations.tenant_alerts import tenant_alerts
from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline_tests.dagster.test_alerts import _plant, _Receiver, smtp  # noqa: F401
from geo_pipeline_tests.dagster.test_monitors import config_file, resample


def _receiver() -> tuple[ThreadingHTTPServer, str, list[dict[str, Any]]]:
    posts: list[dict[str, Any]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("R", (_Receiver,), {"posts": posts}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/hook", posts


@pytest.fixture
def hooks() -> Iterator[dict[str, tuple[str, list[dict[str, Any]]]]]:
    made = {name: _receiver() for name in ("acme", "poor")}
    try:
        yield {name: (url, posts) for name, (_, url, posts) in made.items()}
    finally:
        for server, _, _ in made.values():
            server.shutdown()
            server.server_close()


def tick(db_url: str) -> str:
    ctx = dg.build_sensor_context(resources={"db": PostgresResource(url=db_url)})
    return str(tenant_alerts(ctx).skip_message)


def kinds(posts: list[dict[str, Any]]) -> list[str]:
    return sorted(p["text"].split("#alert-")[1].split("\n")[0] for p in posts)


def test_each_tenant_hears_its_own_alerts_only(
    conn: Any, db_url: str, tmp_path: Path, hooks: Any, smtp: Any,  # noqa: F811
    dg_instance: dg.DagsterInstance, resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def cli(*args: str, ok: bool = True) -> str:
        result = runner.invoke(monitors_group, list(args))
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    # acme: a flagged mention change and a reconciliation difference (as the operator test);
    # poor: a monitor whose re-sample is refused for a short balance.
    _plant(conn)
    cli("create", config_file(tmp_path, "p", monitor="poor-daily", tenant="poor"))
    today = datetime.now(ZoneInfo("Asia/Shanghai")).date().isoformat()
    assert not resample(dg_instance, resources, "poor-daily", today).success

    cli("recipients", "add", "--tenant", "acme", "--webhook-env", "GEO_ALERT_WEBHOOK_ACME")
    cli("recipients", "add", "--tenant", "poor", "--webhook-env", "GEO_ALERT_WEBHOOK_POOR")
    cli("recipients", "add", "--tenant", "poor", "--monitor", "poor-daily",
        "--email", "owner@poor.example", "--kind", "resample_failed")  # fmt: skip
    # Another tenant's monitor, a URL in place of a variable name, a bad address: refused.
    assert "not a monitor of tenant" in cli(
        "recipients", "add", "--tenant", "acme", "--monitor", "poor-daily", "--email", "a@b.c",
        ok=False,
    )  # fmt: skip
    assert "GEO_ALERT_WEBHOOK_<NAME>" in cli(
        "recipients",
        "add",
        "--tenant",
        "acme",
        "--webhook-env",
        "https://hooks.example/x",
        ok=False,
    )
    assert "not an e-mail address" in cli(
        "recipients", "add", "--tenant", "acme", "--email", "nobody", ok=False
    )
    # The database refuses it too, whatever a caller does (the composite key).
    with pytest.raises(Exception, match="foreign key"):
        conn.execute(
            "INSERT INTO geo.alert_recipients (tenant_id, monitor_id, channel, target) "
            "VALUES ('acme', 'poor-daily', 'email', 'x@acme.example')"
        )
    conn.rollback()

    port, box = smtp
    monkeypatch.setenv("GEO_ALERT_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("GEO_ALERT_SMTP_PORT", str(port))
    monkeypatch.setenv("GEO_ALERT_EMAIL_FROM", "geo@example.test")
    monkeypatch.setenv("GEO_ALERT_WEBHOOK_ACME", hooks["acme"][0])
    # poor's webhook variable is not set yet: that delivery fails and is retried.
    msg = tick(db_url)
    acme_posts, poor_posts = hooks["acme"][1], hooks["poor"][1]
    # _plant's run-stuck has 2 channels past their deadline: one alert each.
    assert kinds(acme_posts) == [
        "mention-change",
        "reconciliation",
        "stuck-partition",
        "stuck-partition",
    ], acme_posts
    assert poor_posts == []
    assert [m["To"] for m in box.messages] == ["owner@poor.example"]
    assert "monitor poor-daily: no run for" in box.messages[0]["Subject"]
    assert "insufficient funds" in box.messages[0].get_content()
    assert "sent 5, failed 1" in msg, msg
    # Each alert links its run (and the evidence); nothing of poor reached acme.
    recon = next(p["text"] for p in acme_posts if "fee statements" in p["text"])
    assert "open: geo-pipeline runs show run-stuck" in recon
    assert "evidence: geo-pipeline runs export run-stuck" in recon
    change = next(p["text"] for p in acme_posts if "mention rate" in p["text"])
    assert "70/200 = 35.0%" in change and "effective n 200.0" in change
    assert "open: geo-pipeline runs show run-day2" in change
    assert not any("poor" in p["text"] for p in acme_posts)
    stuck = next(p["text"] for p in acme_posts if "publish deadline" in p["text"])
    assert "open: geo-pipeline runs show run-stuck" in stuck and "open samples: 4" in stuck

    monkeypatch.setenv("GEO_ALERT_WEBHOOK_POOR", hooks["poor"][0])
    msg = tick(db_url)
    assert "sent 1, failed 0" in msg, msg
    assert kinds(poor_posts) == ["resample-failed"]
    text = poor_posts[0]["text"]
    assert "monitor poor-daily: no run for" in text and "insufficient_balance" in text
    assert "open: geo-pipeline monitors show poor-daily" in text
    assert "dagster run: " in text
    assert not any("acme" in p["text"].lower() for p in poor_posts)
    # Nothing is sent twice.
    assert "sent 0, failed 0" in tick(db_url)
    assert len(acme_posts) == 4 and len(poor_posts) == 1 and len(box.messages) == 1
    rows = conn.execute(
        "SELECT tenant_id, kind, count(*) AS n FROM geo.alert_deliveries GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    assert [(r["tenant_id"], r["kind"], r["n"]) for r in rows] == [
        ("acme", "mention_change", 1),
        ("acme", "reconciliation", 1),
        ("acme", "stuck_partition", 2),
        ("poor", "resample_failed", 2),
    ]
    listed = json.loads(cli("recipients", "list", "--tenant", "poor", "--json"))
    assert {r["target"] for r in listed} == {"GEO_ALERT_WEBHOOK_POOR", "owner@poor.example"}
