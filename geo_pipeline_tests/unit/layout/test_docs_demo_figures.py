"""Issue #34 (a newcomer's third read, F4): docs/analysts.md quoted "in the demo: quoted maximum
8.70 = charged 7.04 + released 1.66" while the demo printed 8.70 = 6.95 + 1.75 (what the
simulated platforms bill varies from run to run). A doc says what a demo figure means, never a
figure of one run as if every demo printed it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# "in the demo: ... 7.04", "the demo printed 6.95 CNY": a money figure pinned to the demo
PINNED = re.compile(r"(in the demo|the demo (prints|printed|shows|says))\b[^.\n]*\d+\.\d\d")


def test_no_doc_pins_a_money_figure_of_one_demo_run():
    found = []
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PINNED.search(line):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not found, "\n".join(found)
