"""The production process exports the database-wide gauges: a real ``geo-pipeline sweeper`` with
--metrics-port, scraped over HTTP (not the demo process, not an in-process registry)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from geo_pipeline_tests.ops.helpers import complete, make_run
from geo_pipeline_tests.processes import streams, wait_progressing

# Seeded 120 s in the past, read as < 300 s: the gauges must be scraped within 180 s of the seed.
GAUGE_CAP_S = 170.0
RECONCILIATION = ("geo_reconciliation_difference_minor", (("currency", "CNY"),))


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _plant(db) -> None:
    samples = make_run(db, "run-gauges")  # 4 deepseek__web, 4 kimi__web
    db.execute("UPDATE geo.runs SET confirmed_at = now() WHERE run_id = 'run-gauges'")
    db.execute(
        "INSERT INTO geo.run_dispatches (run_id, channel) "
        "SELECT DISTINCT run_id, channel FROM geo.samples WHERE run_id = 'run-gauges'"
    )
    db.commit()
    ds = [s for s in samples if s["platform"] == "deepseek"]
    kimi = [s for s in samples if s["platform"] == "kimi"]
    complete(db, kimi[0])
    complete(db, kimi[1], evidence="partial", reason="SCREENSHOT_UNAVAILABLE")
    db.execute(  # one deepseek sample running under a lease
        "UPDATE geo.samples SET submission_state='submitting', collection_state='running', "
        "lease_until=now()+interval '5 min', fencing_token=fencing_token+1, attempt_no=1 "
        "WHERE sample_id=%s",
        (ds[0]["sample_id"],),
    )
    db.execute(  # one uncertain: sent, acceptance unknown
        "UPDATE geo.samples SET submission_state='submitting', collection_state='running', "
        "lease_until=now()+interval '5 min', fencing_token=fencing_token+1, attempt_no=1 "
        "WHERE sample_id=%s",
        (ds[1]["sample_id"],),
    )
    db.execute(
        "UPDATE geo.samples SET submission_state='uncertain', collection_state='queued', "
        "lease_until=NULL WHERE sample_id=%s",
        (ds[1]["sample_id"],),
    )
    # The two queued deepseek samples have waited two minutes; the kimi ones back off (not due).
    db.execute(
        "UPDATE geo.samples SET next_attempt_at = now() - interval '120 s' "
        "WHERE sample_id = ANY(%s)",
        ([ds[2]["sample_id"], ds[3]["sample_id"]],),
    )
    db.execute(
        "UPDATE geo.samples SET next_attempt_at = now() + interval '1 hour' "
        "WHERE sample_id = ANY(%s)",
        ([kimi[2]["sample_id"], kimi[3]["sample_id"]],),
    )
    db.execute(
        "INSERT INTO geo.dead_letters (stream, message_id, sample_id, deliveries, reason) "
        "VALUES ('collect:deepseek', '1-0', %s, 5, 'max deliveries')",
        (ds[3]["sample_id"],),
    )
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification, "
        "ours_minor, theirs_minor, currency) "
        "VALUES ('run-gauges', 'u1', 'deepseek', 'amount_mismatch', 8, 15, 'CNY')"
    )
    db.commit()


def _metrics_url(log: Path) -> str | None:
    """The /metrics URL the sweeper's start-up line names (None before the line is written)."""
    for line in log.read_text(errors="replace").splitlines():
        if '"sweeper.starting"' in line:
            try:
                return str(json.loads(line)["metrics"])
            except ValueError:  # read while it is being written
                return None
    return None


def test_sweeper_process_exports_backlog_and_business_gauges(
    db, db_url, redis_url, redis_ns, tmp_path
):
    _plant(db)
    env = {
        **os.environ,
        "GEO_DATABASE_URL": db_url,
        "GEO_REDIS_URL": redis_url,
        "GEO_REDIS_PREFIX": redis_ns,
        "GEO_METRICS_ADDR": "127.0.0.1",
    }
    log = tmp_path / "sweeper.log"  # its stderr: the start-up line, then JSON log lines
    with log.open("w") as stderr:  # the child keeps its copy
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "geo_pipeline.cli.main",
                "sweeper",
                "--interval-s",
                "0.5",
                "--gauge-every-s",
                "0.5",
                # Port 0: the sweeper binds a free port and names it on its start-up line. A port
                # picked free here and bound by the child later can be taken in between by a
                # parallel test: the sweeper then exits "Address already in use", or, worse, the
                # scrape reads another test's sweeper.
                "--metrics-port",
                "0",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        got: dict = {}

        def gauged() -> bool:
            nonlocal got
            url = _metrics_url(log)
            try:
                got = _scrape(url) if url else {}
            except OSError:
                got = {}
            # A gauge pass sets the backlog first and the business gauges after it; the
            # reconciliation series (labelled, so absent until set) is the pass's last write.
            backlog = ("geo_backlog_samples", (("platform", "deepseek"), ("state", "queued")))
            return backlog in got and RECONCILIATION in got

        # Waited for while the sweeper moves (its start-up imports alone can take tens of
        # seconds beside other work; a flat 60 s was a speed). The cap is this test's own
        # window: the seeded queued samples are 120 s old and must read < 300 s.
        wait_progressing(
            gauged, proc, what="the sweeper's first gauge pass", files=[log], stall_s=60,
            cap_s=GAUGE_CAP_S, poll_s=0.3, describe=lambda: f"last scrape: {sorted(got)[:20]}",
        )  # fmt: skip

        def g(name: str, **labels: str) -> float:
            return got[(name, tuple(sorted(labels.items())))]

        assert g("geo_backlog_samples", platform="deepseek", state="queued") == 2
        assert g("geo_backlog_samples", platform="deepseek", state="running") == 1
        assert g("geo_backlog_samples", platform="deepseek", state="uncertain") == 1
        assert g("geo_backlog_samples", platform="deepseek", state="dead_letter") == 1
        assert g("geo_backlog_samples", platform="kimi", state="queued") == 0  # backing off
        assert 120 <= g("geo_oldest_queued_age_seconds", platform="deepseek") < 300
        assert g("geo_oldest_queued_age_seconds", platform="kimi") == 0
        # A platform of the registry with nothing at all still reports zero (scale to zero).
        assert g("geo_backlog_samples", platform="qwen", state="queued") == 0
        assert g("geo_evidence_missing_rate") == 0.5
        assert g("geo_reconciliation_difference_minor", currency="CNY") == 7
        assert g("geo_uncertain_samples") == 1
    except AssertionError as exc:  # say what the sweeper wrote, both streams
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"{exc}\n{streams(out, log.read_text(errors='replace'))}") from None
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate()  # pytest's timeout is the hang guard
    assert proc.returncode == 0, streams(out, log.read_text(errors="replace"))
    assert '"passes"' in out
