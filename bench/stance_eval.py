"""Precision / recall / F1 of the stance baseline on a labelled set (issue 37 item 5).

python bench/stance_eval.py                                     # the repository's set
python bench/stance_eval.py path/to/set.jsonl

The format and the scoring: geo_pipeline/analysis/stance_eval.py. Accuracy figures, not speed:
the machine does not change them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from geo_pipeline.analysis.stance_eval import EvalSetError, report

DEFAULT = Path(__file__).resolve().parents[1] / "geo_pipeline_tests" / "data" / "stance_eval.jsonl"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    args = ap.parse_args(argv)
    if not args.file.exists():
        print(f"no labelled set at {args.file}", file=sys.stderr)
        return 2
    try:
        report(args.file)
    except EvalSetError as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
