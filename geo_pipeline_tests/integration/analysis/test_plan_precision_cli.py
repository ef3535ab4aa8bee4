"""`runs plan` tells what a sample buys: per channel the expected 95 % half-width of a brand's
mention rate and the repeats a target needs, from the repeats planner, quoted at the price
versions in effect in the database (the one quote path `runs create` freezes)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from geo_pipeline.cli.main import cli
from geo_pipeline.domain.precision import DEFAULT_PRIOR, expected_half_width

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "collection.yaml"


def test_runs_plan_prints_the_precision_each_channel_buys(db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    result = CliRunner().invoke(
        cli, ["runs", "plan", str(EXAMPLE), "--json", "--target-half-width", "0.35"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    rows = {r["channel"]: r for r in out["precision"]}
    assert set(rows) == set(out["channels"])
    questions = int(out["formula"].split(" x ")[0])
    for channel, n in out["channels"].items():
        reps = n // questions
        row = rows[channel]
        assert row["questions x repeats"] == f"{questions} x {reps}"
        assert row["expected ±95%"] == round(expected_half_width(questions, reps, DEFAULT_PRIOR), 3)
        if row["repeats needed"] is not None:
            needed = row["repeats needed"]
            assert expected_half_width(questions, needed, DEFAULT_PRIOR) <= 0.35
            assert needed == 1 or expected_half_width(questions, needed - 1, DEFAULT_PRIOR) > 0.35
            assert row["cost needed (minor)"] > 0


def test_a_target_outside_zero_to_half_is_refused():
    result = CliRunner().invoke(cli, ["runs", "plan", str(EXAMPLE), "--target-half-width", "0.7"])
    assert result.exit_code == 2 and "target-half-width" in result.output
