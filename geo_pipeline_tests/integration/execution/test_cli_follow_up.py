"""Taking a run from collected to reconciled without Dagster: ``runs wait``, ``runs analyse``
and ``runs settle`` call the same part and flow functions as the brand_analysis and
billing_reconciliation assets, so a CLI-created run does not stay "analysing" forever."""

from __future__ import annotations

import json

import psycopg
from click.testing import CliRunner
from psycopg.rows import dict_row

from geo_pipeline.cli.main import cli
from geo_pipeline_tests.integration.analysis.helpers import store_answer
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run


def _invoke(db_url: str, args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(cli, args, env={"GEO_DATABASE_URL": db_url})
    return res.exit_code, res.output


def _collect_all(db_url: str, ids: list[str]) -> None:
    """Every sample completed with stored evidence, as a worker would leave it."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        for i, sid in enumerate(ids):
            text = "推荐瑞幸，性价比高。" if i % 2 == 0 else "推荐别家咖啡。"
            store_answer(conn, sid, text)


def test_analyse_then_settle_a_cli_created_run(db_url):
    ids = make_run(db_url, "r-follow", questions=4, dispatch=False)
    code, out = _invoke(db_url, ["runs", "settle", "r-follow", "--no-statements"])
    assert code == 1 and "still collecting" in out and "Traceback" not in out, out

    _collect_all(db_url, ids)
    code, out = _invoke(db_url, ["runs", "wait", "r-follow", "--timeout", "5", "--json"])
    assert code == 0 and json.loads(out)["terminal"] is True, out
    code, out = _invoke(db_url, ["runs", "show", "r-follow", "--json"])
    assert json.loads(out)["status"]["analysing"] is True

    code, out = _invoke(db_url, ["runs", "analyse", "r-follow", "--json"])
    assert code == 0, out
    summary = json.loads(out)
    assert summary["analysed"] == len(ids) and summary["status"]["analysing"] is False
    code, out = _invoke(db_url, ["runs", "show", "r-follow", "--json"])
    assert json.loads(out)["status"]["analysing"] is False
    rows = fetch(
        db_url, "SELECT count(*) AS n FROM analytics.brand_metrics WHERE run_id = 'r-follow'"
    )
    assert rows[0]["n"] > 0  # the analyst tables were refreshed too

    code, out = _invoke(db_url, ["runs", "settle", "r-follow", "--no-statements", "--json"])
    assert code == 0, out
    body = json.loads(out)
    assert body["closed"]["closed_now"] is True and body["closed"]["released_minor"] > 0
    kinds = [r["kind"] for r in fetch(db_url, "SELECT kind FROM geo.ledger_entries ORDER BY 1")]
    assert "release" in kinds
    # Settling again is a no-op that says so.
    code, out = _invoke(db_url, ["runs", "settle", "r-follow", "--no-statements"])
    assert code == 0 and "already closed" in out, out


def test_follow_up_commands_name_an_unknown_run(db_url):
    for cmd in ("analyse", "settle", "wait"):
        code, out = _invoke(db_url, ["runs", cmd, "nope"])
        assert code != 0 and "no run with id 'nope'" in out and "Traceback" not in out, out


LONG_ID = "r-" + "long-run-id-" * 5 + "42"  # 64 characters, the longest allowed


def test_identifiers_are_never_cut_when_output_is_not_a_terminal(db_url):
    """CliRunner, a pipe and a log file are not terminals: rich used to lay tables out in 80
    columns and cut run ids, channel names and totals with an ellipsis."""
    make_run(db_url, LONG_ID, questions=1, dispatch=False)
    code, out = _invoke(db_url, ["runs", "list"])
    assert code == 0 and LONG_ID in out and "…" not in out, out
    code, out = _invoke(db_url, ["runs", "show", LONG_ID])
    assert code == 0 and "deepseek__web" in out and "…" not in out, out
    code, out = _invoke(db_url, ["billing", "ledger", LONG_ID])
    assert code == 0 and f"reserve:{LONG_ID}" in out and "…" not in out, out


def test_errors_under_json_are_json(db_url, capsys, monkeypatch):
    from geo_pipeline.cli.main import main

    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    assert main(["runs", "show", "nope", "--json"]) == 1
    out = capsys.readouterr().out
    body = json.loads(out)
    assert body["error"] == "no run with id 'nope'" and body["exit_code"] == 1
    assert main(["runs", "show", "nope"]) == 1
    assert "no run with id 'nope'" in capsys.readouterr().err


def test_an_unmigrated_database_says_to_upgrade(empty_db_url, capsys, monkeypatch):
    from geo_pipeline.cli.main import main

    monkeypatch.setenv("GEO_DATABASE_URL", empty_db_url)
    assert main(["runs", "list"]) == 3
    err = capsys.readouterr().err
    assert "run `geo-pipeline db upgrade`" in err, err
