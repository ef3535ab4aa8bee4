"""Issue 37's "done when", walked as a new user would with docs/monitors.md and the README, each
step a separate process against the real services (PostgreSQL, Redis, the simulator over HTTP,
Dagster's own CLI): a monitor from a CSV of tagged questions, paused and resumed; a short balance
makes the day's re-sample fail, shown by `monitors show` and sent to the tenant's webhook only;
after a deposit the day's run is collected by the README's processes and analysed; the brand
dashboard's queries (deploy/grafana/dashboards/brand.json, Grafana's substitution as in
test_brand_dashboard) run as the tenant's analyst role and return that tenant only (its login
lives on the tenant's analyst replica: `grant-analyst` on the service's server refuses); and the
stance rates by topic are read. Grafana itself is not installable here (no Debian, PyPI or npm package of
the server), so its dashboard is executed, not rendered."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
import yaml
from psycopg import sql
from psycopg.rows import dict_row

from geo_pipeline_tests.dagster.test_alerts import _Receiver
from geo_pipeline_tests.deploy.test_brand_dashboard import DASHBOARD, render
from geo_pipeline_tests.integration.tenancy.helpers import analyst_role, analyst_session
from geo_pipeline_tests.processes import outcome, streams, wait_progressing

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "monitors.md"
BIN = Path(sys.executable).parent
SAFETY_S = 1800  # a hang guard only: every wait below is on progress or a process's exit


def blocks(lang: str, text: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def commands(text: str, prefix: str) -> list[list[str]]:
    """The doc's bash lines starting with ``prefix`` (continuations joined, comments cut)."""
    out = []
    for block in blocks("bash", text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(prefix):
                out.append(shlex.split(line))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def hooks() -> Iterator[dict[str, tuple[str, list[dict[str, Any]]]]]:
    made = {}
    for name in ("acme", "initech"):
        posts: list[dict[str, Any]] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("R", (_Receiver,), {"posts": posts}))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made[name] = (server, f"http://127.0.0.1:{server.server_port}/hook", posts)
    try:
        yield {name: (url, posts) for name, (_, url, posts) in made.items()}
    finally:
        for server, _, _ in made.values():
            server.shutdown()
            server.server_close()


class User:
    """A shell in a working directory with the README's environment; every command a process."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def run(self, argv: list[str], ok: bool = True) -> subprocess.CompletedProcess[str]:
        exe = str(BIN / argv[0]) if (BIN / argv[0]).exists() else argv[0]
        proc = subprocess.run(
            [exe, *argv[1:]], cwd=self.cwd, env=self.env, capture_output=True, text=True,
            timeout=SAFETY_S, check=False,
        )  # fmt: skip
        assert (proc.returncode == 0) == ok, outcome(proc)
        return proc

    def json(self, argv: list[str]) -> Any:
        return json.loads(self.run([*argv, "--json"]).stdout)

    def start(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        log = self.cwd / f"{name}.log"
        proc = subprocess.Popen(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.cwd, env=self.env,
            stdout=subprocess.DEVNULL, stderr=log.open("wb"),
        )  # fmt: skip
        self.started.append((proc, log))
        return proc

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name} (exit {p.poll()}) ---\n{log.read_text(errors='replace')[-2000:]}"
            for p, log in self.started
        )

    def stop(self) -> None:
        for proc, _ in self.started:
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in self.started:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def rows(url: str, query: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:  # type: ignore[arg-type]
        return [dict(r) for r in conn.execute(query).fetchall()]  # type: ignore[arg-type]


# Some twenty processes, a Dagster code location loaded four times: minutes on a loaded box. The
# bound is a hang guard (every wait inside is on progress or on a process's exit).
@pytest.mark.timeout(2400)
def test_the_monitor_journey_from_the_docs(
    db_url: str, redis_url: str, redis_ns: str, tmp_path: Path, hooks: Any
) -> None:
    text = DOC.read_text(encoding="utf-8")
    monitor_yaml = blocks("yaml", text)[0]
    (tmp_path / "questions.csv").write_text(blocks("csv", text)[0], encoding="utf-8")
    (tmp_path / "monitor.yaml").write_text(monitor_yaml, encoding="utf-8")
    # A second tenant with the same questions: what the first tenant's analyst must never see.
    other = yaml.safe_load(monitor_yaml)
    other.update(tenant="initech", monitor="initech-daily")
    (tmp_path / "initech.yaml").write_text(yaml.safe_dump(other, allow_unicode=True), "utf-8")
    [sim_profile] = [b for b in blocks("yaml", text) if b.startswith("defaults:")]
    (tmp_path / "sim.yaml").write_text(sim_profile, encoding="utf-8")
    sim_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEO_", "DAGSTER_"))} | {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "GEO_DATABASE_URL": db_url,
        "GEO_REDIS_URL": redis_url,
        "GEO_REDIS_PREFIX": redis_ns,
        "GEO_EVIDENCE_URL": (tmp_path / "evidence").as_uri(),
        "GEO_SIMULATOR_URL": f"http://127.0.0.1:{sim_port}",
        "GEO_ACTOR": "newcomer",
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "GEO_ALERT_WEBHOOK_ACME": hooks["acme"][0],
        "GEO_ALERT_WEBHOOK_INITECH": hooks["initech"][0],
    }
    (tmp_path / "dagster").mkdir()
    user = User(tmp_path, env)
    login = None
    sessions = ExitStack()
    try:
        user.run(["geo-pipeline", "db", "upgrade"])

        # 1. The monitor from the CSV of tagged questions, exactly as the doc types it.
        doc_monitors = commands(text, "geo-pipeline monitors")
        create = next(c for c in doc_monitors if c[1:3] == ["monitors", "create"])
        assert "--questions" in create
        assert "monitor acme-daily created" in user.run(create).stdout
        user.run([*create[:3], "initech.yaml", *create[4:]])
        shown = user.json(["geo-pipeline", "monitors", "show", "acme-daily"])
        assert shown["cron"] == "0 7 * * 1-5" and shown["config"]["question_tags"]

        # 2. Paused and resumed, with the doc's commands; each in the history with who and why.
        for verb in ("pause", "resume"):
            argv = next(c for c in doc_monitors if c[1:3] == ["monitors", verb])
            user.run(argv)
            status = user.json(["geo-pipeline", "monitors", "list"])
            assert [m["status"] for m in status if m["monitor_id"] == "acme-daily"] == [
                "paused" if verb == "pause" else "active"
            ]
        history = user.json(["geo-pipeline", "monitors", "show", "acme-daily"])["history"]
        assert [(e["event"], e["actor"]) for e in history] == [
            ("created", "newcomer"), ("paused", "newcomer"), ("resumed", "newcomer")
        ]  # fmt: skip
        assert history[1]["reason"] == "client holiday"

        # 3. Recipients per tenant (the doc's webhook line), then a re-sample on a short balance.
        add = next(
            c for c in doc_monitors if c[1:4] == ["monitors", "recipients", "add"]
            and "--webhook-env" in c
        )  # fmt: skip
        user.run(add)
        user.run([*add[:4], "--tenant", "initech", "--webhook-env", "GEO_ALERT_WEBHOOK_INITECH"])
        day = datetime.now(ZoneInfo("Asia/Shanghai")).date().isoformat()
        [resample_cfg] = [b for b in blocks("yaml", text) if b.startswith("ops:")]
        assert "acme-daily" in resample_cfg
        for m in ("acme-daily", "initech-daily"):
            cfg = re.sub(r'day: "[0-9-]+"', f'day: "{day}"', resample_cfg)
            (tmp_path / f"{m}.resample.yaml").write_text(cfg.replace("acme-daily", m), "utf-8")
        [execute] = commands(text, "dagster job execute")
        [preview] = commands(text, "dagster sensor preview")
        resample = [*execute[:-1], "acme-daily.resample.yaml"]
        failed = user.run(resample, ok=False)
        assert "insufficient funds" in failed.stdout + failed.stderr, outcome(failed)
        shown_text = user.run(["geo-pipeline", "monitors", "show", "acme-daily"]).stdout
        assert "FAILED RE-SAMPLES: 1 day(s) without a run" in shown_text
        assert f"{day}: insufficient_balance" in shown_text
        [listed] = [
            m for m in user.json(["geo-pipeline", "monitors", "list"])
            if m["monitor_id"] == "acme-daily"
        ]  # fmt: skip
        assert listed["open_failures"] == 1

        # 4. One tick of the tenant_alerts sensor: acme's webhook hears it, initech's does not.
        tick = user.run(preview)
        [post] = hooks["acme"][1]
        assert "monitor acme-daily: no run for" in post["text"], post
        assert "insufficient_balance" in post["text"] and "initech" not in post["text"]
        assert hooks["initech"][1] == [], streams(tick.stdout, tick.stderr)
        user.run(preview)
        assert len(hooks["acme"][1]) == 1  # delivered once

        # 5. The deposit the failure named; the day's runs created, queued and collected by the
        # README's processes (the simulator answering about the monitor's brands).
        # The failure says what to run, as the doc says it would.
        named = re.search(r"`(geo-pipeline billing deposit [^`]+)`", failed.stdout + failed.stderr)
        assert named, outcome(failed)
        deposit = shlex.split(named[1])
        assert deposit[3:5] == ["--tenant", "acme"], deposit
        for tenant in ("acme", "initech"):
            user.run([*deposit[:4], tenant, *deposit[5:]])
        run_ids = {}
        for m in ("acme-daily", "initech-daily"):
            user.run([*execute[:-1], f"{m}.resample.yaml"])
            run_ids[m] = f"{m}-{day.replace('-', '')}"
        shown = user.json(["geo-pipeline", "monitors", "show", "acme-daily"])
        assert [f["later_run_id"] for f in shown["failed_resamples"]] == [run_ids["acme-daily"]]
        sim = ["geo-pipeline", "simulator", "--port", str(sim_port), "--profiles", "sim.yaml"]
        user.start(sim, "simulator")
        user.start(["geo-pipeline", "relay", "--metrics-port", "0"], "relay")
        worker = user.start(["geo-pipeline", "worker", "--metrics-port", "0"], "worker")
        user.start(["geo-pipeline", "sweeper", "--metrics-port", "0"], "sweeper")
        [confirm] = commands(text, "geo-pipeline billing confirm")
        for rid in run_ids.values():
            queued = user.json([*confirm[:3], rid])
            assert queued["queued"] > 0, queued
        [count] = rows(db_url, "SELECT count(*) AS n FROM geo.samples")
        total = int(count["n"])

        def terminal() -> bool:
            [r] = rows(
                db_url,
                "SELECT count(*) FILTER (WHERE collection_state IN ('completed', 'failed')) AS done"
                " FROM geo.samples",
            )
            return int(r["done"]) == total

        wait_progressing(
            terminal, worker, what="the monitors' runs collected",
            files=[log for _, log in user.started], describe=user.logs,
        )  # fmt: skip
        for rid in run_ids.values():
            user.run(["geo-pipeline", "runs", "wait", rid, "--timeout", "60"])
            user.run(["geo-pipeline", "runs", "analyse", rid])
        user.stop()

        # 6. The tenant's analyst, and the brand dashboard's queries run as it. No analyst logs
        # in to the service's server (issue 35): `grant-analyst` there refuses and names the
        # replica and endpoint commands (whose login test_analyst_replica / _pooler exercise;
        # the primary here has no logical decoding). The read side is checked as acme's
        # NOLOGIN analyst role, reached by a login that starts as it.
        refused = user.run(["geo-pipeline", "tenants", "grant-analyst", "acme"], ok=False)
        assert "analyst-replica create acme" in refused.stderr, outcome(refused)
        login = analyst_role(db_url, "acme")
        analyst_url = sessions.enter_context(analyst_session(db_url, login))
        dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        t_from = datetime.now(UTC) - timedelta(days=3)
        t_to = datetime.now(UTC) + timedelta(days=2)
        variables: dict[str, list[str]] = {}
        for v in dash["templating"]["list"]:
            got = [
                next(iter(r.values()))
                for r in rows(analyst_url, render(v["query"], variables, t_from, t_to))
            ]
            assert got, (v["name"], "no value for tenant acme's analyst")
            variables[v["name"]] = got if v["multi"] else got[:1]
        assert variables["monitor"] == ["acme-daily"]  # initech's monitor is not even listed
        assert variables["brand"][0] == "Acme" and variables["tag"] == ["topic"]
        admin_monitors = rows(db_url, render(dash["templating"]["list"][0]["query"], {}, t_from,
                                             t_to))  # fmt: skip
        assert sorted(r["monitor_id"] for r in admin_monitors) == ["acme-daily", "initech-daily"]
        acme_runs = {run_ids["acme-daily"]}
        for p in dash["panels"]:
            q = render(p["targets"][0]["rawSql"], variables, t_from, t_to)
            got = rows(analyst_url, q)
            if p["id"] != 3:  # flagged changes need two days; every other panel has rows
                assert got, p["title"]
            # initech's monitor asked for by name: nothing for acme's login, rows for the admin.
            other_q = render(p["targets"][0]["rawSql"], {**variables, "monitor": ["initech-daily"]},
                             t_from, t_to)  # fmt: skip
            assert rows(analyst_url, other_q) == [], p["title"]
            if p["id"] != 3:
                assert rows(db_url, other_q), p["title"]
        assert {r["run_id"] for r in rows(analyst_url, "SELECT run_id FROM geo.runs")} == acme_runs

        # 7. Stance rates by topic, with the doc's query, as the analyst: the CSV's topics, n and
        # the view's interval, and the same rows the dashboard's stance panel shows.
        [stance_sql] = [b for b in blocks("sql", text) if "stance_rates_by_tag" in b]
        by_topic = rows(analyst_url, stance_sql)
        assert {r["topic"] for r in by_topic} == {"pm", "crm"}, by_topic
        for r in by_topic:
            assert r["n"] >= r["stance_count"] >= 0 and r["n"] > 0
            # (at a rate of 0 the view's lower bound is a rounding error above 0, as on the
            # dashboard test)
            assert r["stance_rate_lower"] - 1e-12 <= r["stance_rate"]
            assert r["stance_rate"] <= r["stance_rate_upper"] + 1e-12
        panel = next(
            p for p in dash["panels"] if "stance_rates_by_tag" in p["targets"][0]["rawSql"]
        )
        shown_rows = rows(
            analyst_url, render(panel["targets"][0]["rawSql"], variables, t_from, t_to)
        )
        assert sorted((r["channel"], r["tag value"], r["stance"], r["n"], r["stance rate"])
                      for r in shown_rows) == sorted(
            (r["channel"], r["topic"], r["stance"], r["n"], r["stance_rate"]) for r in by_topic
        )  # fmt: skip
        # The admin sees initech's stance rows too: acme's analyst sees acme's only.
        assert rows(db_url, stance_sql.replace("acme-daily", "initech-daily"))
        assert rows(analyst_url, stance_sql.replace("acme-daily", "initech-daily")) == []
    finally:
        user.stop()
        sessions.close()
        if login:
            with psycopg.connect(db_url, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(login)))
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(login)))
