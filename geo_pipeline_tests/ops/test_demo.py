"""``geo-pipeline demo`` as a newcomer runs it: in a subprocess, with no service in the
environment, on embedded PostgreSQL and Redis (``--embedded``: this machine also has local
servers on the default ports, which the demo would otherwise use). While it runs, /metrics and
/healthz of every process are scraped (R26, D11); afterwards the report's numbers are checked
against the database the demo left in its state directory (R7, D10), and a second invocation
reuses that state.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from psycopg.rows import dict_row

from geo_pipeline.domain.billing import EXPLAINED
from geo_pipeline.domain.stats import wilson_interval
from geo_pipeline_tests.processes import streams

METRICS = (
    "geo_queue_wait_seconds",
    "geo_upstream_accept_seconds",
    "geo_execution_seconds",
    "geo_stream_pending_entries",
    "geo_stream_length",
    "geo_uncertain_samples",
    "geo_dead_letters",
    "geo_evidence_missing_rate",
    "geo_reconciliation_difference_minor",
    "geo_db_write_seconds",
    "geo_retries",
    "geo_samples_processed",
    "geo_outbox_published",
)
# What every run of the demo must move (the others are present, and move only when their event
# happens: a dead letter, an uncertain acceptance).
MUST_MOVE = (
    "geo_queue_wait_seconds_count",
    "geo_upstream_accept_seconds_count",
    "geo_execution_seconds_count",
    "geo_samples_processed_total",
    "geo_db_write_seconds_count",
    "geo_outbox_published_total",
)


def _env() -> dict[str, str]:
    """The environment of a fresh laptop: none of the services' variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEO_", "DAGSTER_"))}
    env["GEO_FORCE_EMBEDDED"] = "1"
    return env


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _scrape(port: int) -> dict[str, float]:
    """Sum of each sample name over its labels, plus the family names (value 0) seen."""
    _, text = _get(f"http://127.0.0.1:{port}/metrics")
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, 0.0)
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def _run_demo(
    state: Path, log: Path
) -> tuple[dict[str, Any], list[dict[str, dict[str, float]]], set[int]]:
    """Run the demo; scrape while it runs. Returns (its JSON, scrapes over time, health codes).
    ``state`` comes from the ``server_state`` fixture: as root the embedded PostgreSQL runs as
    ``nobody``, which must be able to reach it."""
    state.mkdir(parents=True, exist_ok=True)
    out_file = log.with_suffix(".out")
    with log.open("wb") as err, out_file.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "geo_pipeline.cli.main",
                "demo",
                "--embedded",
                "--state-dir",
                str(state),
                "--json",
                "--timeout",
                "240",
            ],
            stdout=out,
            stderr=err,
            env=_env(),
        )
        scrapes: list[dict[str, dict[str, float]]] = []
        health: set[int] = set()
        try:
            while proc.poll() is None:
                procs = state / "processes.json"
                if procs.exists():
                    with_ports = {
                        n: p["metrics_port"]
                        for n, p in json.loads(procs.read_text())["processes"].items()
                        if p["metrics_port"]
                    }
                    snap: dict[str, dict[str, float]] = {}
                    for name, port in with_ports.items():
                        try:
                            snap[name] = _scrape(port)
                            health.add(_get(f"http://127.0.0.1:{port}/healthz")[0])
                        except (OSError, http.client.HTTPException):
                            # starting or already stopped (a process stopping mid-response
                            # gives IncompleteRead, an HTTPException, not an OSError)
                            pass
                    if snap:
                        scrapes.append(snap)
                time.sleep(0.3)
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    stdout = out_file.read_text()
    # Both streams: the demo's error is JSON on stdout, its log lines are on stderr.
    assert proc.returncode == 0, (
        f"demo failed ({proc.returncode}):\n{streams(stdout, log.read_text())}"
    )
    return json.loads(stdout), scrapes, health


def _totals(snap: dict[str, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for values in snap.values():
        for k, v in values.items():
            out[k] = out.get(k, 0.0) + v
    return out


@pytest.fixture
def embedded_db(server_state: Path, monkeypatch: pytest.MonkeyPatch):
    """Open the database the demo left behind (its embedded server, restarted)."""
    from geo_pipeline.ops.demo import DEMO_DATABASE, _with_database
    from geo_pipeline.runtime import services

    opened: list[Any] = []

    def open_db(state: Path) -> psycopg.Connection[dict[str, Any]]:
        monkeypatch.setenv("GEO_FORCE_EMBEDDED", "1")
        svc = services.postgres(state)
        opened.append(svc)
        assert svc.source == "embedded"
        conn = psycopg.connect(_with_database(svc.url, DEMO_DATABASE), row_factory=dict_row)
        opened.append(conn)
        return conn

    yield open_db
    for thing in reversed(opened):
        if isinstance(thing, psycopg.Connection):
            thing.close()
        else:
            thing.stop()


@pytest.mark.timeout(1500)  # a hang guard only: the demo waits on progress
def test_demo_on_embedded_services_reports_what_the_database_holds(
    tmp_path, server_state, embedded_db
):
    state = server_state
    result, scrapes, health = _run_demo(state, tmp_path / "demo1.log")

    assert result["sources"] == {"postgres": "embedded", "redis": "embedded"}
    followup = result["followup"]
    assert "analysis_error" not in followup and "billing_error" not in followup, followup
    st = result["status"]
    assert st["terminal"] and st["total"] == 50  # 5 questions x 5 targets x 2 repeats

    # Metrics: every family is exported, the run's activity moved the counters, probes were OK.
    assert len(scrapes) >= 2, "the demo ended before /metrics could be scraped twice"
    seen = set().union(*(v.keys() for snap in scrapes for v in snap.values()))
    missing = [m for m in METRICS if m not in seen]
    assert not missing, f"metric families not exported: {missing}"
    # Processes stop at the end, so compare the first scrape with the highest one seen.
    totals = [_totals(s) for s in scrapes]
    first = totals[0]
    stuck = [m for m in MUST_MOVE if max(t.get(m, 0.0) for t in totals) <= first.get(m, 0.0)]
    assert not stuck, f"did not move during the run: {stuck}"
    assert 200 in health and health <= {200}

    conn = embedded_db(state)
    run_id = result["run_id"]
    by_state = {
        r["collection_state"]: r["n"]
        for r in conn.execute(
            "SELECT collection_state, count(*) AS n FROM geo.samples WHERE run_id = %s GROUP BY 1",
            (run_id,),
        )
    }
    assert st["collection"] == by_state and sum(by_state.values()) == 50
    reasons = {
        r["reason"]: r["n"]
        for r in conn.execute(
            # a failed collection's evidence is failed for its collection's reason (issue #34)
            "SELECT CASE WHEN evidence_state IN ('partial', 'failed')"
            " THEN coalesce(evidence_reason, 'UNSPECIFIED')"
            " ELSE coalesce(collection_reason, 'COLLECTION_FAILED') END AS reason, count(*) AS n"
            " FROM geo.samples WHERE run_id = %s"
            " AND (evidence_state IN ('partial', 'failed') OR collection_state = 'failed')"
            " GROUP BY 1",
            (run_id,),
        )
    }
    assert st["evidence_reasons"] == reasons

    money = result["money"]
    ledger = {
        r["kind"]: int(r["amount"])
        for r in conn.execute(
            "SELECT kind, sum(amount_minor) AS amount FROM geo.ledger_entries "
            "WHERE run_id = %s GROUP BY kind",
            (run_id,),
        )
    }
    quoted = conn.execute(
        "SELECT q.estimated_max_minor FROM geo.runs r JOIN geo.quote_snapshots q USING (quote_id) "
        "WHERE r.run_id = %s",
        (run_id,),
    ).fetchone()["estimated_max_minor"]
    assert money["quoted_max_minor"] == quoted == ledger["reserve"]
    assert money["charged_minor"] == ledger.get("charge", 0) > 0
    assert money["charged_minor"] <= quoted  # the quote is an upper bound (R4)
    assert money["released_minor"] == ledger.get("release", 0) == quoted - money["charged_minor"]
    diff = conn.execute(
        "SELECT coalesce(sum(difference_minor) FILTER (WHERE NOT classification = ANY(%s)), 0)"
        " AS d, count(*) AS n FROM geo.reconciliation_lines WHERE run_id = %s",
        (list(EXPLAINED), run_id),
    ).fetchone()
    assert money["reconciliation_unexplained_minor"] == diff["d"] and diff["n"] > 0
    # The worker carried each answer's request-level usage into its attempt row (issue 19): the
    # simulator reports usage with every answer, so no answered attempt lacks it. (Reported,
    # not positive: the fault profile's "empty" bad answer has 0 output tokens, which CI drew
    # once -- simulator/protocols.tokens counts len(text) // 2.)
    usage = conn.execute(
        "SELECT count(*) FILTER (WHERE a.usage_input_tokens > 0"
        " AND a.usage_output_tokens IS NOT NULL)"
        " AS with_usage, count(*) AS answered FROM geo.attempts a"
        " JOIN geo.samples s USING (sample_id)"
        " WHERE s.run_id = %s AND a.outcome = 'completed'"
        " AND EXISTS (SELECT 1 FROM geo.answers x WHERE x.sample_id = a.sample_id)",
        (run_id,),
    ).fetchone()
    assert usage["answered"] > 0 and usage["with_usage"] == usage["answered"], usage

    rates = result["mention_rates"]
    assert {r["channel"] for r in rates} == set(result["channels"])
    table = {
        (t["channel"], t["brand"]): t
        for t in conn.execute(
            "SELECT channel, brand, mention_rate_lower, mention_rate_upper, mention_rate_interval"
            " FROM analytics.channel_brand_metrics WHERE run_id = %s",
            (run_id,),
        ).fetchall()
    }
    for r in rates:
        if r["n"]:
            # One interval (issue #34): the analyst table's, with its method named.
            t = table[(r["channel"], r["brand"])]
            assert abs(r["mention_rate_lower"] - t["mention_rate_lower"]) < 0.001
            assert abs(r["mention_rate_upper"] - t["mention_rate_upper"]) < 0.001
            assert r["mention_rate_interval"] == t["mention_rate_interval"]
            lo, hi = wilson_interval(r["mentions"], r["n"])
            assert r["mention_rate_lower"] <= lo + 0.001 and r["mention_rate_upper"] >= hi - 0.001
    html = Path(result["reports"]["html"]).read_text(encoding="utf-8")
    assert run_id in html and "Evidence completeness" in html
    # How each channel was collected (issues 31, 32): the main run's are all API channels.
    assert {d["access"] for d in result["channels"].values()} == {"api"}
    assert html.count('<td class="access">api</td>') == len(result["channels"])

    check_scraped_run(conn, result["scraped"])
    if browser_missing() is None:
        check_browser_run(conn, result["browser"], state)
    else:  # said plainly, and the demo went on
        assert "browser" not in result and result["browser_skipped"] == browser_missing()
    conn.close()


def check_scraped_run(conn: psycopg.Connection[dict[str, Any]], scraped: dict[str, Any]) -> None:
    """The scraped channel (issue 31): chatgpt_cloro through the simulator's cloro profile, a
    run of its own (USD), completed with its samples, each answered by a cloro task; beside it
    the same engine through its API (the simulator's ``chatgpt_api_sim``), so the run shows scraped and
    API apart and their agreement."""
    run_id = scraped["run_id"]
    assert scraped["status"]["terminal"], scraped["status"]
    assert "analysis_error" not in scraped["followup"], scraped["followup"]
    assert "billing_error" not in scraped["followup"], scraped["followup"]
    assert list(scraped["channels"]) == ["chatgpt_api_sim__web", "chatgpt_cloro__web"]
    ch = scraped["channels"]["chatgpt_cloro__web"]
    # 2 questions x 2 repeats (ops/example/scraped.yaml); its cloro profile has no faults on
    assert ch["access"] == "scraped" and ch["total"] == 4, ch
    assert ch["collection"] == {"completed": 4}, ch
    api = scraped["channels"]["chatgpt_api_sim__web"]
    assert api["access"] == "api" and api["total"] == 4, api
    rows = conn.execute(
        "SELECT s.sample_id, s.platform, count(x.sample_id) AS answers,"
        " count(x.upstream_id) AS tasks"
        " FROM geo.samples s LEFT JOIN geo.answers x USING (sample_id)"
        " WHERE s.run_id = %s AND s.platform = 'chatgpt_cloro' GROUP BY 1, 2",
        (run_id,),
    ).fetchall()
    assert len(rows) == 4, rows
    assert all(r["answers"] >= 1 and r["tasks"] >= 1 for r in rows), rows
    assert scraped["money"]["currency"] == "USD"
    rates = {(r["channel"], r["access"]) for r in scraped["mention_rates"]}
    assert rates == {("chatgpt_cloro__web", "scraped"), ("chatgpt_api_sim__web", "api")}, rates
    html = Path(scraped["reports"]["html"]).read_text(encoding="utf-8")
    assert '<td class="access">scraped</td>' in html and '<td class="access">api</td>' in html
    check_scraped_vs_api(conn, scraped, html)


def check_scraped_vs_api(
    conn: psycopg.Connection[dict[str, Any]], scraped: dict[str, Any], html: str
) -> None:
    """The report's fan-out, citation gap and UI-vs-API agreement (issue 31) are the database's
    numbers: the agreement worked out here from each counted answer's brand mention (pairs of
    one cloro and one API answer to a question; THE clustered interval of domain.stats), the
    fan-out from the answers' stored queries, the gap rows equal to the view's."""
    from geo_pipeline.domain.stats import clustered_rate

    run_id = scraped["run_id"]
    answers = conn.execute(
        "SELECT f.channel, f.question_revision, f.target_mentioned, a.search_queries,"
        " a.web_search_used FROM analytics.sample_facts f"
        " JOIN analytics.sample_status st USING (sample_id)"
        " JOIN geo.answers a ON a.sample_id = f.sample_id AND a.revision = st.analysed_revision"
        " WHERE f.run_id = %s AND f.mention_status = 'known'",
        (run_id,),
    ).fetchall()
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in answers:
        by.setdefault((a["channel"], a["question_revision"]), []).append(a)
    questions = sorted({q for _, q in by})
    per_q = []
    for q in questions:
        ui, api = by.get(("chatgpt_cloro__web", q), []), by.get(("chatgpt_api_sim__web", q), [])
        pairs = [(u, v) for u in ui for v in api]
        if pairs:
            agree = sum(u["target_mentioned"] == v["target_mentioned"] for u, v in pairs)
            per_q.append((agree, len(pairs)))
    want = clustered_rate(per_q)
    assert want.n > 0, "the demo's scraped run has no UI/API pair to compare"
    [row] = scraped["ui_api_agreement"]
    assert (row["engine"], row["ui_channel"], row["ui_access"], row["api_channel"]) == (
        "chatgpt", "chatgpt_cloro__web", "scraped", "chatgpt_api_sim__web")  # fmt: skip
    assert (row["questions"], row["pairs"], row["agreeing_pairs"]) == (
        want.questions, want.n, want.successes)  # fmt: skip
    assert row["agreement_lower"] == pytest.approx(want.lower)
    assert row["agreement_upper"] == pytest.approx(want.upper)
    fan = {r["channel"]: r for r in scraped["fan_out_channels"]}
    for channel in ("chatgpt_cloro__web", "chatgpt_api_sim__web"):
        mine = [a for (c, _), xs in by.items() if c == channel for a in xs]
        assert fan[channel]["answers"] == len(mine)
        assert fan[channel]["answers_searched"] == sum(bool(a["web_search_used"]) for a in mine)
        assert fan[channel]["queries"] == sum(len(a["search_queries"] or []) for a in mine)
    # cloro returns ChatGPT's searchQueries: the scraped answers carry their fan-out
    assert fan["chatgpt_cloro__web"]["queries"] > 0, fan
    gap = conn.execute(
        "SELECT channel, domain, n, cited_with_competitor FROM analytics.citation_gap"
        " WHERE run_id = %s ORDER BY channel, domain",
        (run_id,),
    ).fetchall()
    shown = sorted(
        (r["channel"], r["domain"], r["n"], r["cited_with_competitor"])
        for r in scraped["citation_gap"]
    )
    assert shown == [tuple(r.values()) for r in gap]
    for table in ("fan-out-channels", "fan-out", "citation-gap", "ui-api-agreement"):
        assert f'id="{table}-table"' in html or f'id="{table}-none"' in html, table
    assert 'id="ui-api-agreement-table"' in html and "chatgpt_cloro__web (scraped)" in html


def check_browser_run(
    conn: psycopg.Connection[dict[str, Any]], browser: dict[str, Any], state: Path
) -> None:
    """The browser channel (issue 32): deepseek_web on desktop and mobile in headless Chromium
    against the simulator's web app; each sample's screenshot is real, of its device's size."""
    from geo_pipeline.connectors.browser.spec import DEVICES
    from geo_pipeline.evidence.access import read_object
    from geo_pipeline.evidence.backend import archive_from_url

    run_id = browser["run_id"]
    assert browser["status"]["terminal"], browser["status"]
    assert set(browser["channels"]) == {"deepseek_web__desktop", "deepseek_web__mobile"}
    for ch in browser["channels"].values():
        assert ch["access"] == "browser" and ch["collection"] == {"completed": 1}, ch
    shots = conn.execute(
        "SELECT s.device, o.storage_key, o.sha256 FROM geo.samples s"
        " JOIN geo.evidence_objects o USING (sample_id)"
        " WHERE s.run_id = %s AND o.kind = 'screenshot'",
        (run_id,),
    ).fetchall()
    assert sorted(r["device"] for r in shots) == ["desktop", "mobile"], shots
    archive = archive_from_url((state / "evidence").resolve().as_uri())
    for r in shots:
        png = read_object(archive, r["storage_key"], "screenshot", r["sha256"])
        width, height = Image.open(io.BytesIO(png)).size
        device = DEVICES[r["device"]]
        assert width == int(device.width * device.scale), (r["device"], width)
        assert height >= int(device.height * device.scale), (r["device"], height)
    html = Path(browser["reports"]["html"]).read_text(encoding="utf-8")
    assert html.count('<td class="access">browser</td>') == 2
    # No consumer app bills per answer: the run's lines say so (explained), never a difference.
    lines = conn.execute(
        "SELECT classification, theirs_minor FROM geo.reconciliation_lines WHERE run_id = %s",
        (run_id,),
    ).fetchall()
    assert {r["classification"] for r in lines} <= {"no_vendor_bill", "matched"}, lines
    assert any(r["classification"] == "no_vendor_bill" for r in lines), lines
    assert all(r["theirs_minor"] == 0 for r in lines), lines


def browser_missing() -> str | None:
    from geo_pipeline.ops.demo_browser import missing

    return missing()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_second_demo_reuses_the_state_and_reset_starts_afresh(
    tmp_path, server_state, embedded_db
):
    state = server_state
    first, _, _ = _run_demo(state, tmp_path / "demo1.log")
    second, _, _ = _run_demo(state, tmp_path / "demo2.log")
    assert first["run_id"] != second["run_id"]
    conn = embedded_db(state)
    runs = {r["run_id"] for r in conn.execute("SELECT run_id FROM geo.runs")}
    # each demo: its main run and the runs beside it (scraped; browser where Chromium is)
    assert runs == run_ids(first) | run_ids(second)
    assert len(runs) == 2 * (2 if browser_missing() else 3)


def run_ids(result: dict[str, Any]) -> set[str]:
    return {result["run_id"]} | {result[k]["run_id"] for k in ("scraped", "browser") if k in result}
