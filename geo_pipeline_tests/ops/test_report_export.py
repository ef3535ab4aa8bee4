"""Run reports and ``runs export`` (R7, R19, R6) on a real database."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

from geo_pipeline.ops import export, report
from geo_pipeline.store import status
from geo_pipeline_tests.ops.helpers import add_evidence, complete, fail, make_run

EVIL = '<img src=x onerror="alert(1)">'


def _scenario(db, tmp_path):
    samples = make_run(db)
    deep = [s for s in samples if s["platform"] == "deepseek"]
    kimi = [s for s in samples if s["platform"] == "kimi"]
    complete(db, deep[0], html="<p>瑞幸咖啡 is <strong>cheap</strong></p>", raw="raw " + EVIL)
    complete(db, deep[1], evidence="partial", reason="SCREENSHOT_UNAVAILABLE")
    complete(db, kimi[0])
    fail(db, kimi[1], "INVALID_PARAMS")
    db.execute(
        "INSERT INTO geo.citations (sample_id, revision, ordinal, relation, raw_url, "
        "normalized_url, registrable_domain, title) VALUES "
        "(%s, 1, 0, 'cited', 'https://a.example/x?utm_source=y', 'https://a.example/x', "
        "'a.example', %s), (%s, 1, 1, 'cited', 'javascript:alert(2)', 'javascript:alert(2)', "
        "null, 'bad')",
        (deep[0]["sample_id"], EVIL, deep[0]["sample_id"]),
    )
    evidence_dir = tmp_path / "evidence"
    key = f"acme/run-ops/{deep[0]['sample_id']}/1/thumbnail.png"
    (evidence_dir / key).parent.mkdir(parents=True)
    (evidence_dir / key).write_bytes(b"png")
    add_evidence(db, deep[0], "thumbnail", key, b"png")
    add_evidence(db, deep[0], "screenshot", key.replace("thumbnail", "screenshot"), b"PNG")
    db.commit()
    return samples, deep, kimi, evidence_dir


def test_report_counts_come_from_the_aggregation_service(db, tmp_path):
    samples, deep, kimi, _ = _scenario(db, tmp_path)
    rep = report.build_report(db, "run-ops")
    assert rep.status == status.run_status(db, "run-ops").as_dict()
    assert rep.status["total"] == len(samples) == 8
    assert rep.status["collection"] == {"completed": 3, "failed": 1, "queued": 4}
    assert rep.status["evidence_reasons"] == {"SCREENSHOT_UNAVAILABLE": 1}
    by_id = {s.row["sample_id"]: s for s in rep.samples}
    assert by_id[deep[1]["sample_id"]].evidence_missing_reason == "SCREENSHOT_UNAVAILABLE"
    assert by_id[kimi[1]["sample_id"]].evidence_missing_reason == "INVALID_PARAMS"
    # R6: answered but not analysed yet is "analysing", never "not mentioned".
    assert by_id[deep[0]["sample_id"]].analysis_label == "analysing"
    assert by_id[kimi[2]["sample_id"]].analysis_label == "-"
    assert rep.money["quoted_max_minor"] > 0 and rep.money["charged_minor"] == 0
    assert rep.mention_rates_source is None or rep.mention_rates_source.startswith("analytics.")


def test_html_shows_sanitised_answer_escapes_the_rest_and_gives_reasons(db, tmp_path):
    _, _, _, evidence_dir = _scenario(db, tmp_path)
    rep = report.build_report(db, "run-ops", link_for=report.local_link_for(str(evidence_dir)))
    page = export.to_html(rep)
    assert "<p>瑞幸咖啡 is <strong>cheap</strong></p>" in page  # the sanitised HTML, rendered
    assert "raw <img" not in page and 'onerror="alert(1)"' not in page  # raw never, title escaped
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page
    assert 'href="javascript:' not in page and 'href="#"' in page
    assert "Evidence missing: SCREENSHOT_UNAVAILABLE" in page
    assert "Evidence missing: INVALID_PARAMS" in page
    assert (evidence_dir / "acme").as_uri() in page  # the thumbnail links to the local file


def test_csv_and_json_have_one_row_per_sample(db, tmp_path):
    samples, deep, _, _ = _scenario(db, tmp_path)
    rep = report.build_report(db, "run-ops")
    rows = list(csv.DictReader(io.StringIO(export.to_csv(rep))))
    assert len(rows) == len(samples)
    row = next(r for r in rows if r["sample_id"] == deep[0]["sample_id"])
    assert row["citation_count"] == "2" and row["thumbnail_key"].endswith("thumbnail.png")
    data = json.loads(export.to_json(rep))
    assert data["status"]["total"] == 8 and len(data["samples"]) == 8
    assert all("raw_text" not in s for s in data["samples"])


def test_cli_export_writes_each_format_and_refuses_unknown_runs(db, db_url, tmp_path):
    _scenario(db, tmp_path)
    env = {"GEO_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"}
    for fmt in export.FORMATS:
        out = tmp_path / f"r.{fmt}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "geo_pipeline.cli.main",
                "runs",
                "export",
                "run-ops",
                "--format",
                fmt,
                "--out",
                str(out),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["samples"] == 8 and out.stat().st_size > 100
    proc = subprocess.run(
        [sys.executable, "-m", "geo_pipeline.cli.main", "runs", "export", "nope"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode != 0 and "no run with id 'nope'" in proc.stderr
    assert "Traceback" not in proc.stderr
