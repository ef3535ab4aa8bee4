"""The run report reads without a contradiction to someone who has not seen the code (issue #34,
a newcomer's read of `make demo`): one word set for evidence (a screenshot still to come is
"pending" in the counts, the sample list and the machine formats alike, with a word on whether
it will still come), "invalid" -- never "failed" -- for answers judged invalid, reconciliation
lines in words and major units (not "explained True" and ``ours_minor``), and every quantity of
the mention-rate table (the Korn-Graubard interval, effective n, average rank, citation rate)
defined once and shown in both the terminal and the HTML report."""

from __future__ import annotations

import html as htmllib
import json
import re

from click.testing import CliRunner

from geo_pipeline.cli.main import cli as root
from geo_pipeline.cli.ops import _print_report, _Ui
from geo_pipeline.domain.words import (
    DEFINITIONS,
    EVIDENCE_WORDS,
    PENDING_SCREENSHOT_NOTE,
    STATUS_WORDS,
    TERMINAL_DEFINED,
)
from geo_pipeline.ops import export, report
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

QUESTIONS = ["哪个咖啡品牌最好？", "上班族早上买咖啡推荐哪个品牌？"]


def _text(page: str) -> str:
    """The HTML page's text as a reader sees it (tags out, entities decoded, spaces folded)."""
    return re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", " ", page)))


def _said(db, db_url, monkeypatch, capsys, tmp_path):
    """One run with a pending screenshot, a missing required one, an invalid answer and two
    reconciliation lines; returns what each view says of it."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    samples = make_run(
        db, "r-said", questions=QUESTIONS, channels=[{"platform": "kimi", "device": "web"}],
        repeats=2,
    )  # fmt: skip
    pending_id = samples[0]["sample_id"]
    for i, s in enumerate(samples):
        if i == 0:
            store_answer(db, s["sample_id"], "推荐瑞幸。", evidence="partial")
            reason = "SCREENSHOT_PENDING"
        elif i == 1:
            store_answer(db, s["sample_id"], "推荐星巴克。", evidence="partial")
            reason = "SCREENSHOT_UNAVAILABLE"
        elif i == 2:
            store_answer(db, s["sample_id"], "请先登录", validity="invalid", reason="login_page")
            continue
        else:
            store_answer(db, s["sample_id"], "推荐瑞幸和星巴克。")
            continue
        db.execute(
            "UPDATE geo.samples SET evidence_reason = %s WHERE sample_id = %s",
            (reason, s["sample_id"]),
        )
    db.commit()
    analysed = CliRunner().invoke(root, ["runs", "analyse", "r-said"])
    assert analysed.exit_code == 0, analysed.output
    # The analysis layer's "failed" is an invalid answer: said as the tables say it.
    assert "1 invalid (in no rate)" in analysed.output, analysed.output
    assert " failed" not in analysed.output, analysed.output
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class) VALUES"
        " ('r-said', 'u-match', 'kimi', 'matched', 8, 8, 'CNY', 'completed'),"
        " ('r-said', 'u-mismatch', 'kimi', 'amount_mismatch', 10, 24, 'CNY', 'completed')"
    )
    db.commit()

    rep = report.build_report(db, "r-said")
    exported = json.loads(export.to_json(rep))
    page = _text(export.to_html(rep))
    capsys.readouterr()
    paths = {k: tmp_path / f"r.{k}" for k in ("html", "csv", "json")}
    _print_report(rep, paths, _Ui(quiet=False))
    terminal = re.sub(r"\s+", " ", capsys.readouterr().out)
    return rep, exported, page, terminal, pending_id


def test_the_report_says_each_thing_in_one_set_of_words(db, db_url, monkeypatch, capsys, tmp_path):
    rep, exported, page, terminal, pending_id = _said(db, db_url, monkeypatch, capsys, tmp_path)

    # ---- evidence: one word set, and whether a pending screenshot will still come
    by_id = {s["sample_id"]: s for s in exported["samples"]}
    assert by_id[pending_id]["evidence_status"] == "pending"
    assert (
        export.csv_rows(rep)[0]["evidence_status"]
        == by_id[export.csv_rows(rep)[0]["sample_id"]]["evidence_status"]
    )
    assert sorted(s["evidence_status"] for s in exported["samples"]) == [
        "partial", "pending", "stored", "stored"
    ]  # fmt: skip
    assert rep.status["evidence"] == {"pending": 1, "partial": 1, "stored": 2}
    sample_line = re.search(rf"sample {pending_id} · .*? · attempts", page)
    assert sample_line and "evidence pending" in sample_line.group(0), page
    assert page.count("evidence partial ·") == 1, page
    for said in (terminal, page):
        assert "1 screenshot still pending" in said and "1 required screenshot missing" in said
        assert PENDING_SCREENSHOT_NOTE in said, said
        assert "SCREENSHOT_PENDING x1" not in said and "SCREENSHOT_PENDING × 1" not in said

    # ---- reconciliation lines: words and major units, never the predicate's True/False
    assert "True" not in terminal and "False" not in terminal, terminal
    assert "ours_minor" not in terminal and "difference_minor" not in terminal, terminal
    assert "counted as" in terminal and "unexplained" in terminal
    assert "0.14 CNY" in terminal and "0.24 CNY" in terminal, terminal

    # ---- every quantity of the rate table defined once, the same in both reports
    for term, definition in DEFINITIONS.items():
        assert f"{term}: {definition}" in page, (term, page)
    for term in TERMINAL_DEFINED:  # the terminal defines the columns it shows
        assert f"{term}: {DEFINITIONS[term]}" in terminal, (term, terminal)


def test_a_newcomer_reads_no_contradiction(db, db_url, monkeypatch, capsys, tmp_path):
    """The findings of a newcomer's read of `make demo` (issue #34), each checked; all failures
    are collected so that one run shows every one."""
    rep, exported, page, terminal, _ = _said(db, db_url, monkeypatch, capsys, tmp_path)
    raw_page = export.to_html(rep)
    wrong: list[str] = []

    def check(ok: bool, finding: str) -> None:
        if not ok:
            wrong.append(finding)

    # 1. one evidence word per sample in the CSV: not a stored state beside a status word
    columns = export.CSV_COLUMNS
    check(
        "evidence_status" in columns and "evidence_state" not in columns,
        "1: the CSV carries evidence_state and evidence_status for one thing",
    )
    # 2. a pending screenshot is not styled as a pending analysis ("analysing")
    check(
        not re.search(r'class="[^"]*analysing[^"]*evidence-pending', raw_page),
        "2: the pending-screenshot note is classed 'analysing'",
    )
    # 3. the note promises no run status, and spells no status word differently from the tables
    check(
        "full success" not in PENDING_SCREENSHOT_NOTE
        and "full_success" not in PENDING_SCREENSHOT_NOTE,
        "3: the pending note promises the status 'full success'",
    )
    # 4. 'partial' is defined wherever a reader meets it: evidence and run/channel status
    for name, said in (("terminal", terminal), ("html", page)):
        check(EVIDENCE_WORDS["partial"] in said, f"4: evidence 'partial' undefined in {name}")
        check(STATUS_WORDS["partial"] in said, f"4: status 'partial' undefined in {name}")
    # 7. the export's mention-rate keys are the analyst table's names
    row = exported["mention_rates"][0]
    check(
        {"mention_rate_lower", "mention_rate_upper", "mention_rate_interval"} <= set(row)
        and not {"rate_lower_95", "rate_upper_95", "interval_method"} & set(row),
        f"7: export keys differ from the analyst table's: {sorted(row)}",
    )
    # 8. the terminal defines only what it shows, and shows the review column
    for term in ("average rank", "citation rate"):
        check(f"{term}: {DEFINITIONS[term]}" not in terminal, f"8: terminal defines {term}")
    check(" review " in terminal, "8: terminal has no review column")
    # 12. which modes a channel pools is said
    check("1 mode: standard" in terminal and "1 mode: standard" in page, "12: modes unsaid")
    # 13. the CSV's 0-based indexes are tied to the page's Q1 / repeat 1
    check("question_index 0 = Q1" in page, "13: Q1 vs question_index 0 unsaid in the page")
    # 16. the explained list names every classification counted as explained
    check("matched" in " ".join(rep.money["reconciliation_words"]), "16: matched not listed")
    # 17. no 4096-character rule off a terminal; one timestamp format in the header
    check(not re.search(r"[─━-]{200}", terminal), "17: rule longer than 200 characters")
    check(
        not re.search(r"\d{2}:\d{2}:\d{2}\.\d+\+00:00", page),
        "17: two timestamp formats in the page header",
    )
    assert not wrong, "\n".join(wrong)


def test_the_demo_points_to_reasons_only_when_there_are_some():
    """Finding 18: "their reasons are in the report below" was said of 0 review and 0 invalid."""
    from geo_pipeline.domain.words import analysis_followup_text

    none = analysis_followup_text({"analysed": 50, "accepted": 50, "review": 0, "failed": 0})
    assert "reasons" not in none, none
    some = analysis_followup_text({"analysed": 50, "accepted": 49, "review": 0, "failed": 1})
    assert some.endswith("their reasons are in the report below"), some
