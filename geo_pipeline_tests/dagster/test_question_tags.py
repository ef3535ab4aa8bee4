"""Tagged questions (issue 37), end to end against real PostgreSQL: a monitor created from a CSV
of tagged questions, a dry-run import that shows what changes and writes nothing, the tags frozen
into the day's run snapshot, and every analyst rate broken down by tag with n and THE clustered
interval (a tag covering every question shows exactly channel_brand_metrics' numbers)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from geo_pipeline.analysis import analyse_run
from geo_pipeline.cli.monitors import monitors_group, questions_group
from geo_pipeline_tests.dagster.conftest import (
    CHANNELS,
    collection_config,
    finish,
    fund,
    op_metadata,
)
from geo_pipeline_tests.dagster.test_monitors import resample

CSV = """question,topic,intent,persona,market
best project tool for teams?,pm,compare,lead,cn
which crm is cheapest?,crm,price,founder,cn
top crm for startups?,crm,shortlist,founder,cn
"""


def test_tagged_questions_from_csv_to_rates_by_tag(
    conn: Any, db_url: str, tmp_path: Path, dg_instance: dg.DagsterInstance,
    resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def cli(group: Any, *args: str, ok: bool = True) -> str:
        result = runner.invoke(group, list(args))
        assert (result.exit_code == 0) == ok, (result.output, result.exception)
        return result.output

    fund(conn)
    cfg = tmp_path / "m.yaml"
    cfg.write_text(yaml.safe_dump(collection_config(monitor="tagged")), encoding="utf-8")
    sheet = tmp_path / "questions.csv"
    sheet.write_text(CSV, encoding="utf-8")
    cli(monitors_group, "create", str(cfg), "--questions", str(sheet))
    saved = conn.execute("SELECT config FROM geo.monitors WHERE monitor_id = 'tagged'").fetchone()
    assert saved["config"]["questions"][2] == "top crm for startups?"
    assert saved["config"]["question_tags"]["which crm is cheapest?"]["intent"] == "price"

    # A bad sheet: every problem with its line, nothing written.
    bad = tmp_path / "bad.csv"
    bad.write_text("question,topic,colour\nq?,x,red\n,pm,\n", encoding="utf-8")
    out = cli(questions_group, "import", str(bad), "--monitor", "tagged", ok=False)
    assert "unknown column(s) 'colour'" in out and "bad.csv line 3: tags without a question" in out

    # The dry run shows the changes and writes nothing.
    new = tmp_path / "new.csv"
    new.write_text(CSV.replace("top crm for startups?,crm", "top crm for startups?,sales")
                   .replace("best project tool for teams?,pm,compare,lead,cn\n", "")
                   + "which erp suits a factory?,erp,compare,cfo,cn\n", encoding="utf-8")  # fmt: skip
    before = conn.execute(
        "SELECT revision, config FROM geo.monitors WHERE monitor_id = 'tagged'"
    ).fetchone()
    dry = json.loads(
        cli(questions_group, "import", str(new), "--monitor", "tagged", "--dry-run", "--json")
    )
    assert [(c["change"], c["question"]) for c in dry["changes"]] == [
        ("added", "which erp suits a factory?"),
        ("removed", "best project tool for teams?"),
        ("re-tagged", "top crm for startups?"),
    ]
    assert (
        dry["changes"][2]["before"]["topic"] == "crm"
        and dry["changes"][2]["tags"]["topic"] == "sales"
    )
    assert (
        conn.execute(
            "SELECT revision, config FROM geo.monitors WHERE monitor_id = 'tagged'"
        ).fetchone()
        == before
    )

    # Today's run freezes revision 1's questions and tags.
    today = datetime.now(ZoneInfo("Asia/Shanghai")).date()
    result = resample(dg_instance, resources, "tagged", today.isoformat())
    assert result.success
    run_id = op_metadata(result, "resample_monitor_op")["run_id"]
    # Answers: everything mentions Acme, except the first repeat of "which crm is cheapest?".
    for ch in CHANNELS:
        finish(conn, run_id, ch)
    conn.execute(
        """UPDATE geo.answers a SET raw_text = 'Globex is a good choice'
             FROM geo.samples s JOIN geo.question_revisions q USING (question_revision)
            WHERE a.sample_id = s.sample_id AND s.run_id = %s AND s.repeat_index = 0
              AND q.text = 'which crm is cheapest?'""",
        (run_id,),
    )
    conn.commit()
    analyse_run(conn, run_id)
    conn.commit()

    rows = conn.execute(
        "SELECT * FROM analytics.brand_rates_by_tag WHERE run_id = %s AND brand = 'Acme' "
        "AND channel = 'deepseek__web' ORDER BY tag, value",
        (run_id,),
    ).fetchall()
    by = {(r["tag"], r["value"]): r for r in rows}
    crm = by[("topic", "crm")]
    # 2 questions x 2 repeats on one channel (one region, one mode): 4 answers, 3 name Acme.
    assert (crm["questions"], crm["n"], crm["mentions"]) == (2, 4, 3)
    assert crm["mention_rate"] == pytest.approx(0.75)
    assert crm["interval_method"] == "question-clustered, 2 questions"
    assert crm["mention_rate_lower"] < 0.75 < crm["mention_rate_upper"]
    pm = by[("topic", "pm")]
    assert (pm["questions"], pm["n"], pm["mentions"], pm["interval_method"]) == (
        1,
        2,
        2,
        "Wilson, 1 question",
    )
    # One truth: market=cn tags every question, so it is the channel's own row, to the last digit.
    cn = by[("market", "cn")]
    channel = conn.execute(
        "SELECT n, mentions, mention_rate, mention_rate_lower, mention_rate_upper, n_effective, "
        "citation_rate_lower, citation_rate_upper FROM analytics.channel_brand_metrics "
        "WHERE run_id = %s AND brand = 'Acme' AND channel = 'deepseek__web'",
        (run_id,),
    ).fetchone()
    assert (cn["n"], cn["mentions"]) == (channel["n"], channel["mentions"]) == (6, 5)
    for col in ("mention_rate", "mention_rate_lower", "mention_rate_upper", "n_effective",
                "citation_rate_lower", "citation_rate_upper"):  # fmt: skip
        assert cn[col] == pytest.approx(channel[col], abs=1e-12), col

    # The import for real: revision 2, used from the next run on; today's run keeps its tags.
    cli(questions_group, "import", str(new), "--monitor", "tagged")
    assert (
        conn.execute("SELECT revision FROM geo.monitors WHERE monitor_id = 'tagged'").fetchone()[
            "revision"
        ]
        == 2
    )
    nxt = resample(dg_instance, resources, "tagged", (today + timedelta(days=1)).isoformat())
    assert nxt.success
    tags = conn.execute(
        "SELECT r.run_id, t.value FROM analytics.question_tags t JOIN geo.runs r USING (run_id) "
        "JOIN geo.question_revisions q USING (question_revision) "
        "WHERE t.tag = 'topic' AND q.text = 'top crm for startups?' ORDER BY r.scheduled_for"
    ).fetchall()
    assert [r["value"] for r in tags] == ["crm", "sales"]
