"""bench/stance_eval.py on a tiny labelled file written here (the repository's labelled set is
separate work): the printed precision / recall / F1 are the ones worked out by hand below."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "stance_eval.py"

LINES = [
    # the baseline: recommended, attributes {} -> one labelled attribute missed
    {"id": "t1", "lang": "en", "brand": "Luckin", "context": "I recommend Luckin.",
     "stance": "recommended", "attributes": ["service"], "note": ""},
    {"id": "t2", "lang": "en", "brand": "Starbucks", "context": "Starbucks is a US chain.",
     "stance": "neutral", "attributes": [], "note": ""},
    {"id": "t3", "lang": "zh", "brand": "瑞幸", "context": "不推荐瑞幸，价格偏贵。",
     "stance": "negative", "attributes": ["price"], "note": ""},
    # labelled cautioned; the baseline says recommended (口味不错) -> one error
    {"id": "t4", "lang": "zh", "brand": "星巴克", "context": "星巴克口味不错。",
     "stance": "cautioned", "attributes": ["taste"], "note": ""},
]  # fmt: skip


def run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), str(path)], capture_output=True, text=True, timeout=120
    )


def row(out: str, *first: str) -> list[str]:
    for line in out.splitlines():
        cells = line.split()
        if cells[: len(first)] == list(first):
            return cells
    raise AssertionError(f"no row {first} in:\n{out}")


def test_prints_per_class_per_language_and_attribute_micro_f1(tmp_path: Path) -> None:
    f = tmp_path / "set.jsonl"
    f.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in LINES), encoding="utf-8")
    p = run(f)
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = p.stdout
    assert "4 contexts, target not found in 0" in out, out
    # all: recommended tp 1 (t1), fp 1 (t4): P 0.5, R 1, F1 0.667; support 1, predicted 2
    assert row(out, "all", "recommended") == [
        "all",
        "recommended",
        "1",
        "2",
        "0.500",
        "1.000",
        "0.667",
    ]
    # cautioned: never predicted -> precision undefined, recall 0
    assert row(out, "all", "cautioned") == ["all", "cautioned", "1", "0", "-", "0.000", "-"]
    assert row(out, "zh", "negative") == ["zh", "negative", "1", "1", "1.000", "1.000", "1.000"]
    assert row(out, "en", "(accuracy")[-2:] == ["1.000", "1.000"]
    # attributes: labelled service, price, taste; predicted price, taste -> P 1, R 2/3, F1 0.8
    assert row(out, "all", "4") == ["all", "4", "3", "2", "1.000", "0.667", "0.800"]


def test_a_bad_line_names_the_line_field_and_allowed_values(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    bad = dict(LINES[0], stance="positive")
    f.write_text(json.dumps(LINES[1]) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    p = run(f)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "bad.jsonl:2: field 'stance' = 'positive'; allowed: recommended" in p.stderr, p.stderr
