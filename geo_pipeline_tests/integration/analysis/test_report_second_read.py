"""A second newcomer's read of `make demo` (issue #34): six things the report still said wrong or
did not say. Each is checked on one planted run and every failure is collected, so one run shows
them all:

1. a sub-cent vendor bill (cloro's 0.4 cent credit cost) read "theirs 0.00": money is shown
   exactly beside the rounded figure, the same text in the terminal, the HTML and the JSON;
2. a sample whose screenshot arrived still carried the warning SCREENSHOT_PENDING, and answers of
   a service that never gives screenshots carried SCREENSHOT_UNAVAILABLE (a property of the
   service, said once, not a warning on each answer);
3. an API channel ``x__web`` beside a browser channel ``x_web__desktop``: every report says what
   each channel is, in one set of words;
4. the CSV's ``citation_count`` counted retrieved sources too: cited and retrieved are two columns;
5. the terminal's per-channel status had no reason;
6. a monitor's run without a trend did not say why.
"""

from __future__ import annotations

import html as htmllib
import json
import re

from click.testing import CliRunner

from geo_pipeline.billing import reconcile
from geo_pipeline.cli.main import cli as root
from geo_pipeline.cli.ops import _print_report, _Ui
from geo_pipeline.domain import words
from geo_pipeline.ops import export, report
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

QUESTIONS = ["哪个咖啡品牌最好？", "上班族早上买咖啡推荐哪个品牌？"]


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", " ", page)))


def test_the_second_newcomer_reads_no_contradiction(db, db_url, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    # an API that gives no screenshots, priced in the run's CNY (nothing is sent to it here)
    monkeypatch.setenv("GEO_DEEPSEEK_API_KEY", "unused-in-this-test")
    samples = make_run(
        db,
        "r-second",
        questions=QUESTIONS,
        channels=[
            {"platform": "kimi", "device": "web"},
            {"platform": "deepseek_api", "device": "web"},
        ],
        repeats=1,
        monitor="luckin-coffee",
    )
    kimi = [s for s in samples if s["channel"] == "kimi__web"]
    api = [s for s in samples if s["channel"] == "deepseek_api__web"]
    # kimi: one stored sample whose late screenshot came (the answer still says pending), one
    # with a required screenshot missing
    store_answer(db, kimi[0]["sample_id"], "推荐瑞幸。", citations=[("cited", "a.com"),
                 ("retrieved", "b.com"), ("retrieved", "c.com")])  # fmt: skip
    store_answer(db, kimi[1]["sample_id"], "推荐星巴克。", evidence="partial")
    db.execute(
        "UPDATE geo.samples SET evidence_reason = 'SCREENSHOT_UNAVAILABLE' WHERE sample_id = %s",
        (kimi[1]["sample_id"],),
    )
    db.execute(
        "UPDATE geo.answers SET warnings = '{SCREENSHOT_PENDING}' WHERE sample_id = %s",
        (kimi[0]["sample_id"],),
    )
    # deepseek_api gives no screenshots: its answers carry SCREENSHOT_UNAVAILABLE
    for i, s in enumerate(api):
        if i == 1:  # an invalid answer (a login page)
            store_answer(db, s["sample_id"], "请先登录", validity="invalid", reason="login_page")
        else:
            store_answer(db, s["sample_id"], "推荐瑞幸和星巴克。")
        db.execute(
            "UPDATE geo.answers SET warnings = '{SCREENSHOT_UNAVAILABLE}' WHERE sample_id = %s",
            (s["sample_id"],),
        )
    # two credit_cost lines: we charged 1 fen each, the vendor billed 0.4 fen each (exact)
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class, detail) VALUES"
        " ('r-second', 'u-c1', 'kimi', 'credit_cost', 1, 0, 'CNY', 'completed',"
        '  \'{"cost_exact_minor": "0.400000"}\'),'
        " ('r-second', 'u-c2', 'kimi', 'credit_cost', 1, 0, 'CNY', 'completed',"
        '  \'{"cost_exact_minor": "0.400000"}\'),'
        " ('r-second', 'u-m', 'kimi', 'matched', 8, 8, 'CNY', 'completed', '{}')"
    )
    db.commit()
    analysed = CliRunner().invoke(root, ["runs", "analyse", "r-second"])
    assert analysed.exit_code == 0, analysed.output

    rep = report.build_report(db, "r-second")
    exported = json.loads(export.to_json(rep))
    raw_page = export.to_html(rep)
    page = _text(raw_page)
    csv_rows = export.csv_rows(rep)
    capsys.readouterr()
    paths = {k: tmp_path / f"r.{k}" for k in ("html", "csv", "json")}
    _print_report(rep, paths, _Ui(quiet=False))
    terminal = re.sub(r"\s+", " ", capsys.readouterr().out)
    wrong: list[str] = []

    def check(ok: bool, finding: str) -> None:
        if not ok:
            wrong.append(finding)

    # 1. the vendor's exact 0.8 fen beside the rounded 0.00, the same words everywhere
    # (third read) the rounded figure is the exact amount rounded: 0.008 reads 0.01
    exact = "0.01 CNY (exact 0.008 CNY)"
    check(exact in terminal, f"1: terminal lacks {exact!r}")
    check(exact in page, f"1: HTML lacks {exact!r}")
    check(exact in json.dumps(exported, ensure_ascii=False), f"1: JSON lacks {exact!r}")
    # ... and the explained difference says it too (found re-reading the demo: "we charged 0.04
    # USD more" above a line reading exact -0.024)
    said = "we charged 0.01 CNY (exact 0.012 CNY) more than the platforms billed"
    for name, text in (("terminal", terminal), ("html", page)):
        check(said in text, f"1: {name} does not say {said!r}")
    # (fourth read) one minus sign in human text: U+2212, "-" only in machine fields
    check("−0.01 CNY (exact −0.012 CNY)" in page, "1: the HTML reconciliation table's cell")
    # (third read, F11) one format for the exact vendor amount: "0.8" beside "8", not "0.800000"
    exacts = {
        r["classification"]: r["theirs_exact_minor"] for r in exported["money"]["reconciliation"]
    }
    check(exacts == {"credit_cost": "0.8", "matched": "8"}, f"F11: theirs_exact_minor {exacts}")
    # (third read, F11) the reasons of missing evidence in the evidence table's own words
    why = "why evidence is partial or failed: 1 required screenshot missing"
    check(why in terminal, f"F11: terminal does not say {why!r}")
    check("Why evidence is partial or failed:" in page, "F11: HTML evidence reasons heading")
    # (third read, F12) a source cited and one retrieved from one site read apart: the HTML
    # shows each source's URL (without the scheme), not only its title and domain
    check("[cited] a.com/p" in page, "F12: the HTML does not show the cited source's URL")
    # 2. no pending warning on a stored screenshot; no per-answer warning for a service that
    # never gives screenshots, said once as the service's property
    by_id = {s["sample_id"]: s for s in exported["samples"]}
    check(
        "SCREENSHOT_PENDING" not in by_id[kimi[0]["sample_id"]]["warnings"],
        f"2: a stored screenshot still warns pending: {by_id[kimi[0]['sample_id']]['warnings']}",
    )
    for s in api:
        check(
            "SCREENSHOT_UNAVAILABLE" not in by_id[s["sample_id"]]["warnings"],
            "2: a service that never gives screenshots warns SCREENSHOT_UNAVAILABLE per answer",
        )
    # getattr: on the old code these words did not exist (each check then fails, not the test)
    no_shots = getattr(words, "no_screenshots_text", lambda c: "<unsaid>")(["deepseek_api__web"])
    for name, said in (("terminal", terminal), ("html", page)):
        check(said.count(no_shots) == 1, f"2: {name} does not say once {no_shots!r}")
    check(exported.get("channels_without_screenshots") == ["deepseek_api__web"],
          "2: JSON does not list the channels without screenshots")  # fmt: skip
    # 3. what each channel is, in one set of words
    for ch, access in (("kimi__web", "api"), ("deepseek_api__web", "api")):
        label = getattr(words, "channel_label", lambda c, a: "<unsaid>")(ch, access)
        check(label in terminal, f"3: terminal does not say {label!r}")
        check(label in page, f"3: HTML does not say {label!r}")
        check(exported["channels"][ch].get("label") == label, f"3: JSON label of {ch}")
    # 4. cited and retrieved apart, the same names as the HTML/JSON
    cols = export.CSV_COLUMNS
    check("citation_count" not in cols, "4: the CSV still has citation_count")
    check({"cited_count", "retrieved_count"} <= set(cols), "4: no cited_count/retrieved_count")
    row = next(r for r in csv_rows if r["sample_id"] == kimi[0]["sample_id"])
    check(
        (row.get("cited_count"), row.get("retrieved_count")) in ((1, 2), ("1", "2")),
        f"4: counts {row.get('cited_count')!r} {row.get('retrieved_count')!r}",
    )
    # 5. the terminal's per-channel status with its reason
    check(
        "kimi__web: partial: 1 required screenshot missing" in terminal,
        "5: the terminal's per-channel status has no reason",
    )
    # 6. no trend, and why
    note = exported.get("trend_note")
    check(bool(note), "6: the JSON says nothing of the missing trend")
    if note:
        check(note in terminal, f"6: terminal does not say {note!r}")
        check(note in page, f"6: HTML does not say {note!r}")
    # (re-reading the demo) an invalid answer is "invalid" in the CSV's analysis_label and the
    # HTML sample list, as in the status and the rate tables, never "failed"
    # (fourth read) a rate traced to its answers: each CSV row says whether the answer mentions
    # the target brand and which competitors it names
    cols = export.CSV_COLUMNS
    check({"brand_mentioned", "competitors_mentioned"} <= set(cols), "8: no mention columns")
    said = {
        r["sample_id"]: (r.get("brand_mentioned"), r.get("competitors_mentioned")) for r in csv_rows
    }
    check(
        said.get(kimi[0]["sample_id"]) == (True, ""), f"8: kimi[0] {said.get(kimi[0]['sample_id'])}"
    )
    check(said.get(kimi[1]["sample_id"]) == (False, "星巴克"),
          f"8: kimi[1] {said.get(kimi[1]['sample_id'])}")  # fmt: skip
    check(
        said.get(api[0]["sample_id"]) == (True, "星巴克"),
        f"8: api[0] {said.get(api[0]['sample_id'])}",
    )
    # (fourth read) the status legend said "the rest is complete and counted", which reads as if
    # a sample missing a screenshot were left out of n: it is counted
    counted = "an answer whose screenshot is missing is still counted in the rates"
    for name, text in (("terminal", terminal), ("html", page)):
        check("the rest is complete and counted" not in text, f"9: {name} old legend")
        check(counted in text, f"9: {name} does not say {counted!r}")
    # (fourth read) no "Scraped vs API" heading in a run without a scraped channel; one term,
    # "effective n", everywhere
    check("Scraped vs API" not in page, "10: an API-only run's page reads 'Scraped vs API'")
    for name, text in (("terminal", terminal), ("html", page)):
        check(re.search(r"\bn effective\b", text) is None, f"10: {name} says 'n effective'")
    check("effective n" in page, "10: the HTML does not say 'effective n'")
    bad = next(r for r in csv_rows if r["sample_id"] == api[1]["sample_id"])
    check(bad["analysis_label"] == "invalid", f"7: CSV analysis_label {bad['analysis_label']!r}")
    check("analysis invalid" in page and "analysis failed" not in page, "7: HTML sample list")
    assert not wrong, "\n".join(wrong)


def test_an_invalid_answer_in_review_is_counted_once(db, db_url, monkeypatch, capsys, tmp_path):
    """A third newcomer's read (F1-F3): a truncated answer (invalid, sent to a person) read
    "0 invalid" in the analysis line but "invalid 1" in the report, sat in two columns of the
    mention table, and its channel read full_success with no word of the answer in no rate."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    samples = make_run(
        db, "r-third", questions=QUESTIONS[:1], channels=[{"platform": "kimi", "device": "web"}],
        repeats=2, monitor="luckin-coffee",
    )  # fmt: skip
    store_answer(db, samples[0]["sample_id"], "推荐瑞幸。")
    store_answer(db, samples[1]["sample_id"], "推荐瑞", validity="invalid", reason="truncated")
    db.commit()
    analysed = CliRunner().invoke(root, ["runs", "analyse", "r-third"])
    assert analysed.exit_code == 0, analysed.output
    rep = report.build_report(db, "r-third")
    exported = json.loads(export.to_json(rep))
    page = _text(export.to_html(rep))
    capsys.readouterr()
    paths = {k: tmp_path / f"r.{k}" for k in ("html", "csv", "json")}
    _print_report(rep, paths, _Ui(quiet=False))
    terminal = re.sub(r"\s+", " ", capsys.readouterr().out)
    wrong: list[str] = []

    def check(ok: bool, finding: str) -> None:
        if not ok:
            wrong.append(finding)

    # F1: one count, one name: invalid (in no rate), of which one awaits a person
    line = "1 accepted, 0 for review, 1 invalid (in no rate; 1 of them awaits a person's review)"
    check(line in analysed.output, f"F1: runs analyse says {analysed.output!r}")
    said = "1: truncated x1; 1 of them awaits a person's review"
    check(f"invalid answers (in no rate): {said}" in terminal, "F1: terminal invalid line")
    check(f"Invalid answers (in no rate): {said}" in page, "F1: HTML invalid line")
    # F2: the answer is in one column of the mention table; columns add up to the samples
    for r in exported["mention_rates"]:
        parts = (r["n"], r["invalid_samples"], r["analysing_samples"], r["review_samples"])
        check(parts == (1, 1, 0, 0), f"F2: n/invalid/analysing/review {parts}")
    # F3: the channel's status says the answer in no rate, everywhere it is said
    status = (
        "kimi__web: full_success: all 2 samples completed with their evidence stored; "
        "1 answer invalid (truncated), in no rate"
    )
    check(status in terminal, "F3: terminal channel status")
    check(status in page, "F3: HTML channel status")
    check(exported["channels"]["kimi__web"].get("status_text") == status.split(": ", 1)[1],
          f"F3: JSON {exported['channels']['kimi__web'].get('status_text')!r}")  # fmt: skip
    assert not wrong, "\n".join(wrong)


def _money_views(db, run_id, capsys, tmp_path):
    rep = report.build_report(db, run_id)
    exported = json.loads(export.to_json(rep))
    raw = export.to_html(rep)
    capsys.readouterr()
    paths = {k: tmp_path / f"{run_id}.{k}" for k in ("html", "csv", "json")}
    _print_report(rep, paths, _Ui(quiet=False))
    terminal = re.sub(r"\s+", " ", capsys.readouterr().out)
    cell = re.search(r'id="explained"[^>]*>(.*?)</td>', raw, re.S)
    return exported, _text(raw), terminal, _text(cell.group(1)).strip() if cell else "<no cell>"


def test_the_fourth_read_money_fields_agree_with_the_words(db, db_url, monkeypatch, capsys,
                                                           tmp_path):  # fmt: skip
    """A fourth newcomer's read of `make demo` (issue #34): (1) the scraped run's JSON said
    ``reconciliation_explained_minor: -4`` and the credit line ``theirs_minor: 0`` while its words
    said 0.02 (exact 0.024) and 0.02 (exact 0.016): a sum of per-line roundings beside the exact
    total rounded once; (2) the browser run's money cell read "−0.20 CNY" beside a sentence that
    never said the signed total."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    make_run(db, "r-credit", questions=QUESTIONS[:1],
             channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    # four tasks at 5 credits x 0.08 fen/credit = 0.4 fen each; we charged 1 fen each
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class, detail)"
        " SELECT 'r-credit', 'u-' || i, 'kimi', 'credit_cost', 1, 0, 'CNY', 'completed',"
        '  \'{"cost_exact_minor": "0.400000"}\' FROM generate_series(1, 4) AS i'
    )
    make_run(db, "r-browser", questions=QUESTIONS[:1],
             channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class, detail) VALUES"
        " ('r-browser', 'b-1', 'kimi', 'no_vendor_bill', 20, 0, 'CNY', 'completed', '{}')"
    )
    db.commit()
    wrong: list[str] = []

    def check(ok: bool, finding: str) -> None:
        if not ok:
            wrong.append(finding)

    # 1. the exact total rounded once (half away from zero), in every machine field and word
    summary = reconcile.stored_summary(db, "r-credit")
    check(
        summary.theirs_total_minor == 2,
        f"1: summary theirs_total_minor {summary.theirs_total_minor}",
    )
    check(summary.explained_difference_minor == -2,
          f"1: summary explained_difference_minor {summary.explained_difference_minor}")  # fmt: skip
    exported, page, terminal, cell = _money_views(db, "r-credit", capsys, tmp_path)
    money = exported["money"]
    check(money["reconciliation_explained_minor"] == -2,
          f"1: JSON reconciliation_explained_minor {money['reconciliation_explained_minor']}")  # fmt: skip
    check(money["reconciliation_explained_exact_minor"] == "-2.4",
          f"1: JSON exact {money['reconciliation_explained_exact_minor']!r}")  # fmt: skip
    row = next(r for r in money["reconciliation"] if r["classification"] == "credit_cost")
    got = (row["theirs_minor"], row["theirs_exact_minor"], row["difference_minor"])
    check(got == (2, "1.6", -2), f"1: JSON credit_cost theirs/exact/difference {got}")
    said = "we charged 0.02 CNY (exact 0.024 CNY) more than the platforms billed"
    for name, text in (("terminal", terminal), ("html", page), ("html cell", cell)):
        check(said in text, f"1: {name} does not say {said!r}")
    # one minus sign in human text (U+2212); "-" stays in the machine fields
    for name, text in (("terminal", terminal), ("html", page)):
        check("-0.0" not in text, f"1: {name} has an ASCII minus before an amount")
    check("−0.02 CNY (exact −0.024 CNY)" in page, "1: the HTML credit_cost difference")
    # 2. the browser run: one wording, one sign convention, the total and its parts
    exported, page, terminal, cell = _money_views(db, "r-browser", capsys, tmp_path)
    # no platform billed anything: the total says what it is, never "more than the platforms
    # billed" (sixth read; the older F6/F7 rule of test_browser_fault_rules)
    total = "we charged 0.20 CNY that no platform bills"
    check("than the platforms billed" not in cell, f"2: the cell compares with no bill: {cell!r}")
    check(cell == total, f"2: the HTML explained cell reads {cell!r}, not {total!r}")
    sentence = next(
        (w for w in exported["money"]["reconciliation_words"] if w.startswith("explained")), ""
    )
    check(total in sentence, f"2: the sentence lacks the signed total: {sentence!r}")
    check("0.20 CNY we charged that no platform bills" in sentence, f"2: parts: {sentence!r}")
    check(total in terminal, "2: the terminal lacks the total")
    check(exported["money"]["reconciliation_explained_minor"] == -20, "2: JSON machine figure")
    assert not wrong, "\n".join(wrong)


def test_the_fifth_read_download_commands_fetch_the_item_shown(db, db_url, monkeypatch, tmp_path):
    """A fifth newcomer's read of `make demo` (issue #34): beside a WARC-stored thumbnail the HTML
    printed ``geo-pipeline evidence get SAMPLE --tenant T``, whose default ``--kind answer_raw``
    downloads the answer text, not the image. Each printed command names its kind."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    monkeypatch.delenv("GEO_EVIDENCE_URL", raising=False)
    samples = make_run(db, "r-kinds", questions=QUESTIONS[:1],
                       channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    sid = samples[0]["sample_id"]
    store_answer(db, sid, "推荐瑞幸。")
    tenant = db.execute("SELECT tenant_id FROM geo.runs WHERE run_id = 'r-kinds'").fetchone()
    tenant_id = tenant["tenant_id"] if isinstance(tenant, dict) else tenant[0]
    for kind, offset in (("screenshot", 0), ("thumbnail", 4000)):
        db.execute(
            "INSERT INTO geo.evidence_objects (sample_id, tenant_id, run_id, revision, kind,"
            " storage_key, sha256, size_bytes, mime_type, captured_at) VALUES"
            " (%s, %s, 'r-kinds', 1, %s, %s, repeat('a', 64), 3000, 'image/png', now())",
            (sid, tenant_id, kind, f"{tenant_id}/warc/sha256-x/batch.warc.gz#{offset}-3500"),
        )
    db.commit()
    rep = report.build_report(db, "r-kinds")
    page = _text(export.to_html(rep))
    exported = json.loads(export.to_json(rep))
    wrong = []
    for kind in ("thumbnail", "screenshot"):
        command = f"geo-pipeline evidence get {sid} --tenant {tenant_id} --kind {kind}"
        if command not in page:
            wrong.append(f"the HTML does not print {command!r}")
        got = next(s for s in exported["samples"] if s["sample_id"] == sid)[kind]
        if got.get("download_command") != command:
            wrong.append(f"JSON {kind} download_command {got.get('download_command')!r}")
    assert not wrong, "\n".join(wrong)


def test_the_fifth_read_one_rounding_rule_for_check_gauge_and_json(db, db_url, monkeypatch):
    """A fifth newcomer's read (issue #34): the docs said the blocking check and the gauge add
    per-line whole minor units while the JSON rounds the exact total once. One rule everywhere:
    exact amounts summed, rounded once, half away from zero. Four cloro tasks the vendor billed
    6 credits (0.48 fen each, stored per line as 0) where the price version quotes 5: unexplained
    exact 4 x (0.48 - 1) = -2.08, so -2 (not -4, the sum of per-line roundings)."""
    from geo_pipeline.defs.billing import checks
    from geo_pipeline.store import business_gauges

    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    make_run(db, "r-round", questions=QUESTIONS[:1],
             channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class, detail)"
        " SELECT 'r-round', 'u-' || i, 'kimi', 'amount_mismatch', 1, 0, 'CNY', 'completed',"
        '  \'{"cost_exact_minor": "0.480000"}\' FROM generate_series(1, 4) AS i'
    )
    db.commit()
    summary = reconcile.stored_summary(db, "r-round")
    exported = json.loads(export.to_json(report.build_report(db, "r-round")))
    check = checks.zero_unexplained(db, "r-round")
    figures = {
        "summary": summary.unexplained_difference_minor,
        "JSON": exported["money"]["reconciliation_unexplained_minor"],
        "check": check.metadata["unexplained_difference_minor"].value,
    }
    assert figures == dict.fromkeys(figures, -2), figures
    absolute = {
        "summary": summary.unexplained_absolute_minor,
        "gauge": business_gauges.refresh(db)["reconciliation"].get("CNY"),
    }
    assert absolute == dict.fromkeys(absolute, 2), absolute


def test_the_fifth_read_settlement_says_credit_tasks_have_no_statement(db, db_url, monkeypatch):
    """The demo said "reconciled against 1 fee statement; reservation released" for a run of
    cloro and API lines, whose cloro lines no statement covers, and "released" for nothing."""
    from geo_pipeline.ops import demo

    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    make_run(db, "r-settle", questions=QUESTIONS[:1],
             channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class, detail)"
        " SELECT 'r-settle', 'u-' || i, 'chatgpt_cloro', 'credit_cost', 1, 0, 'CNY', 'completed',"
        '  \'{"cost_exact_minor": "0.4", "statement_source": "credits"}\''
        " FROM generate_series(1, 4) AS i"
    )
    db.commit()
    said = demo.settled_text(db, "r-settle", 1, 0)
    assert said == (
        "reconciled against 1 fee statement; 4 tasks of a credit-billed service priced from each "
        "task's reported credits x the credit price, not from a statement; nothing to release"
    ), said
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class, detail) VALUES"
        " ('r-settle', 'b-1', 'kimi', 'no_vendor_bill', 20, 0, 'CNY', 'completed', '{}')"
    )
    db.execute(
        "DELETE FROM geo.reconciliation_lines WHERE run_id = 'r-settle' AND upstream_id LIKE 'u-%'"
    )
    said = demo.settled_text(db, "r-settle", 0, 5)
    assert said == (
        "1 task no platform bills (a consumer app in our browser), at our own estimated price; "
        "unused reservation released"
    ), said


def test_the_fifth_read_names_what_each_rate_counts(db, db_url, monkeypatch):
    """A brand with no domains configured read "citation rate 0 %" (nothing could be cited); the
    fan-out's "mentioned when searched" did not say whose mention; "agree on rank" counted only
    the pairs where both answers mention the brand under a caption "n = pairs"."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    samples = make_run(db, "r-fifth", questions=QUESTIONS[:1],
                       channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    store_answer(db, samples[0]["sample_id"], "推荐瑞幸和星巴克，Manner也不错。")
    analysed = CliRunner().invoke(root, ["runs", "analyse", "r-fifth"])
    assert analysed.exit_code == 0, analysed.output
    rows = {
        r["brand"]: export.mention_row(r) for r in report.build_report(db, "r-fifth").mention_rates
    }
    wrong = []
    if rows["Manner Coffee"]["citation_rate"] != "n/a (no domains configured)":
        wrong.append(f"Manner Coffee citation rate {rows['Manner Coffee']['citation_rate']!r}")
    if not rows["星巴克"]["citation_rate"].endswith(" %"):
        wrong.append(f"星巴克 citation rate {rows['星巴克']['citation_rate']!r}")
    from geo_pipeline.analysis import ui_api

    note = ui_api.SECTION_NOTES["ui_api_agreement"]
    if "only the pairs where both answers mention the brand" not in note:
        wrong.append(f"agreement note {note!r}")
    fan = {"channel": "c", "access": "api", "questions": 1, "share_searched": 1.0,
           "share_searched_lower": 0.2, "share_searched_upper": 1.0, "answers": 1,
           "share_searched_interval": "wilson", "queries": 1, "distinct_queries": 1,
           "queries_per_answer": 1, "mentions_searched": 1, "answers_searched": 1,
           "mentions_not_searched": 0, "answers_not_searched": 0}  # fmt: skip
    shown = ui_api.display_rows({"fan_out_channels": [fan], "fan_out": [], "citation_gap": [],
                                 "ui_api_agreement": []})["fan_out_channels"][0]  # fmt: skip
    if "target brand mentioned when searched" not in shown:
        wrong.append(f"fan-out headers {list(shown)}")
    assert not wrong, "\n".join(wrong)


def test_the_fifth_read_a_retried_sample_says_which_attempt_was_billed(db, db_url, monkeypatch):
    """A doubao sample read "attempts 2" beside ``retry_fee_rule: charged``, yet the run had one
    charge per sample: the report now says which attempt was billed and why the other was not."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    samples = make_run(db, "r-retry", questions=QUESTIONS[:1],
                       channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    sid = samples[0]["sample_id"]
    store_answer(db, sid, "推荐瑞幸。")
    db.execute("UPDATE geo.samples SET attempt_no = 2 WHERE sample_id = %s", (sid,))
    db.execute(
        "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id, outcome,"
        " error_class, tenant_id) VALUES (%s, 1, 1, 'w', 'failed', 'transport', 'acme'),"
        " (%s, 2, 2, 'w', 'completed', NULL, 'acme')",
        (sid, sid),
    )
    db.execute(
        "INSERT INTO geo.ledger_entries (tenant_id, currency, run_id, sample_id, attempt_no,"
        " kind, amount_minor, idempotency_key) VALUES"
        " ('acme', 'CNY', 'r-retry', NULL, NULL, 'reserve', 10, 'r-r-retry'),"
        " ('acme', 'CNY', 'r-retry', %s, 2, 'charge', 10, 'c-r-retry')",
        (sid,),
    )
    db.commit()
    rep = report.build_report(db, "r-retry")
    said = (
        "attempts 2: attempt 1 not billed (it ended failed, transport before the platform ran a "
        "task: only a task the platform ran is charged); attempt 2 billed"
    )
    page = _text(export.to_html(rep))
    row = next(s for s in json.loads(export.to_json(rep))["samples"] if s["sample_id"] == sid)
    assert said in page and row["attempts_text"] == said, (row.get("attempts_text"), said)


def test_the_fifth_read_says_what_the_quoted_maximum_covers(db, db_url, monkeypatch, capsys,
                                                           tmp_path):  # fmt: skip
    """Quoted max 8.70 beside charged 6.98 with no word on what the maximum covers."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    make_run(db, "r-quote", questions=QUESTIONS[:1],
             channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    exported, page, terminal, _ = _money_views(db, "r-quote", capsys, tmp_path)
    said = "plus a paid retry allowance (up to max_attempts - 1 retries per sample)"
    wrong = [name for name, text in (("terminal", terminal), ("html", page),
             ("json", exported["money"].get("quote_note") or "")) if said not in text]  # fmt: skip
    assert not wrong, wrong


def test_the_sixth_read_a_failed_collection_is_failed_evidence_not_analysing(
    db, db_url, monkeypatch, capsys, tmp_path
):
    """A sixth newcomer's read of the demo (issue #34): one kimi sample whose collection failed
    (invalid_params: no answer stored) read evidence "pending" (the legend: text stored, the
    screenshot to come) and sat in the mention table's "Still analysing" column while its
    channel read analysing false. Its evidence is ``failed`` with the collection's reason, and it
    is counted as a failed sample, the columns still adding up to the samples."""
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    samples = make_run(db, "r-sixth", questions=QUESTIONS[:1],
                       channels=[{"platform": "kimi", "device": "web"}], repeats=2,
                       monitor="luckin-coffee")  # fmt: skip
    ok, bad = samples[0]["sample_id"], samples[1]["sample_id"]
    store_answer(db, ok, "推荐瑞幸。")
    db.execute(
        "UPDATE geo.samples SET submission_state = 'submitting', collection_state = 'running',"
        " attempt_no = attempt_no + 1, fencing_token = fencing_token + 1, lease_owner = 't',"
        " lease_until = now() + interval '5 minutes' WHERE sample_id = %s",
        (bad,),
    )
    db.execute(
        "UPDATE geo.samples SET submission_state = 'planned', collection_state = 'failed',"
        " collection_reason = 'invalid_params', lease_owner = NULL, lease_until = NULL,"
        " completed_at = now() WHERE sample_id = %s",
        (bad,),
    )
    db.commit()
    analysed = CliRunner().invoke(root, ["runs", "analyse", "r-sixth"])
    assert analysed.exit_code == 0, analysed.output
    from geo_pipeline.analysis.run import analyse_run

    again = analyse_run(db, "r-sixth")
    db.commit()
    rep = report.build_report(db, "r-sixth")
    exported = json.loads(export.to_json(rep))
    page = _text(export.to_html(rep))
    csv_rows = export.csv_rows(rep)
    capsys.readouterr()
    paths = {k: tmp_path / f"r.{k}" for k in ("html", "csv", "json")}
    _print_report(rep, paths, _Ui(quiet=False))
    terminal = re.sub(r"\s+", " ", capsys.readouterr().out)
    wrong: list[str] = []

    def check(ok: bool, finding: str) -> None:
        if not ok:
            wrong.append(finding)

    # 1. its evidence reads failed, with the collection's reason, everywhere
    try:
        word = words.evidence_status("pending", None, "failed")  # type: ignore[call-arg]
    except TypeError as exc:  # the old two-argument word function
        word = repr(exc)
    check(word == "failed", f"1: the word function says {word!r}")
    check(exported["status"]["evidence"] == {"stored": 1, "failed": 1},
          f"1: JSON status evidence {exported['status']['evidence']}")  # fmt: skip
    check(rep.status["evidence_reasons"] == {"invalid_params": 1},
          f"1: evidence reasons {rep.status['evidence_reasons']}")  # fmt: skip
    row = next(r for r in csv_rows if r["sample_id"] == bad)
    check(row["evidence_status"] == "failed", f"1: CSV evidence_status {row['evidence_status']!r}")
    js = next(s for s in exported["samples"] if s["sample_id"] == bad)
    check(js["evidence_status"] == "failed", f"1: JSON evidence_status {js['evidence_status']!r}")
    check("evidence failed · analysis -" in page, "1: HTML sample list")
    check("evidence pending" not in page, "1: the HTML still says evidence pending")
    # the terminal's evidence table: no pending screenshot (its note), the failure's reason
    check(words.PENDING_SCREENSHOT_NOTE not in terminal, "1: the terminal explains a pending shot")
    why = "why evidence is partial or failed: " + words.evidence_reason_text("invalid_params", 1)
    check(why in terminal, f"1: the terminal does not say {why!r}")
    check("Why evidence is partial or failed:" in page, "1: the HTML gives no reason")
    # ... and no answer's evidence is "not stored yet": there is no answer to wait for
    check(again.waiting_evidence == 0, f"1: waiting_evidence {again.waiting_evidence}")
    check(
        getattr(words, "evidence_waiting_text", lambda n: "<unsaid>")(1)
        == "(1 answer's evidence not stored yet: not analysed)",
        "1: the waiting line's grammar",
    )
    # 2. not "still analysing": a failed sample, and the columns add up to the samples
    for r in exported["mention_rates"]:
        parts = (r["n"], r["invalid_samples"], r["analysing_samples"], r["review_samples"],
                 r.get("failed_samples"))  # fmt: skip
        check(parts == (1, 0, 0, 0, 1), f"2: JSON n/invalid/analysing/review/failed {parts}")
        check(r["samples"] == sum(p or 0 for p in parts), f"2: columns do not add up {r}")
    table = db.execute(
        "SELECT to_jsonb(m) - ARRAY(SELECT k FROM jsonb_object_keys(to_jsonb(m)) k WHERE k NOT IN"
        " ('samples', 'n', 'invalid_samples', 'analysing_samples', 'review_samples',"
        "  'failed_samples')) AS t FROM analytics.channel_brand_metrics m WHERE run_id = 'r-sixth'"
    ).fetchall()
    check(bool(table), "2: no analyst rows")
    for t in (dict(r)["t"] for r in table):
        check(t["analysing_samples"] == 0, f"2: analyst table analysing {t}")
        check(t["samples"] == sum(v for k, v in t.items() if k != "samples"), f"2: sum {t}")
    check("Failed samples" in page, "2: the HTML mention table has no failed column")
    # 3. the failure said once in the status, not again as missing evidence
    status = "kimi__web: partial: 1 failed (invalid_params x1)"
    check(status + " " in terminal and "invalid_params on kimi__web" not in terminal,
          "3: the terminal's status says the failure twice")  # fmt: skip
    assert not wrong, "\n".join(wrong)
