"""`geo-pipeline runs restance`: the stances of a run analysed without them (an older run, or a
new stance version) computed by the same function as analysis, the older rows kept, idempotent;
by run id or for every run of a monitor."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from geo_pipeline.analysis import analyse_run
from geo_pipeline.cli.main import cli
from geo_pipeline.domain.stance import STANCE_VERSION
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

TEXTS = ["推荐瑞幸咖啡，价格实惠。", "不推荐瑞幸。", "Luckin is good, but the queues are long."]


def stances(db: Any) -> list[tuple[str, str, str, str]]:
    return [
        (r["sample_id"], r["brand"], r["stance_version"], r["stance"])
        for r in db.execute(
            "SELECT sample_id, brand, stance_version, stance FROM geo.mention_stances ORDER BY 1, 2"
        ).fetchall()
    ]


def invoke(db_url: str, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args), env={"GEO_DATABASE_URL": db_url})
    return res.exit_code, res.output


def test_restance_recomputes_what_is_missing_once(db: Any, db_url: str) -> None:
    runs = []
    for day in (1, 2):
        run_id = f"r-restance-{day}"
        samples = make_run(db, run_id, questions=["哪个咖啡品牌最好？"],
                           channels=[{"platform": "deepseek", "device": "web"}], repeats=3,
                           monitor="coffee-daily")  # fmt: skip
        for s, text in zip(samples, TEXTS, strict=True):
            store_answer(db, s["sample_id"], text)
        analyse_run(db, run_id)
        db.commit()
        runs.append(run_id)
    analysed = stances(db)
    assert {v for _, _, v, _ in analysed} == {STANCE_VERSION} and len(analysed) >= 6
    # Runs analysed before their stances existed: the rows of the current version are missing.
    db.execute("DELETE FROM geo.mention_stances")
    db.commit()

    code, out = invoke(db_url, "runs", "restance", runs[0], "--json")
    assert code == 0, out
    [summary] = json.loads(out)
    assert summary["run_id"] == runs[0] and summary["stance_version"] == STANCE_VERSION
    assert summary["stances"] == len(analysed) // 2
    code, out = invoke(db_url, "runs", "restance", "--monitor", "coffee-daily", "--json")
    assert code == 0, out
    assert sorted((s["run_id"], s["stances"]) for s in json.loads(out)) == [
        (runs[0], 0), (runs[1], len(analysed) // 2)
    ]  # fmt: skip
    assert stances(db) == analysed  # the same stances analysis wrote
    code, out = invoke(db_url, "runs", "restance", "--monitor", "coffee-daily")
    assert code == 0 and "restance" in out, out


def test_restance_names_what_is_wrong(db_url: str) -> None:
    code, out = invoke(db_url, "runs", "restance", "nope")
    assert code != 0 and "no run with id 'nope'" in out and "Traceback" not in out, out
    code, out = invoke(db_url, "runs", "restance")
    assert code == 2 and "RUN_ID(s) or --monitor" in out, out
    code, out = invoke(db_url, "runs", "restance", "--monitor", "ghost")
    assert code != 0 and "monitor 'ghost' has no run" in out, out
