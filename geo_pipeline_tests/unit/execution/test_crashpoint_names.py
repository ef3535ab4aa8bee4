"""Every crash point the code names is one the fault suite knows (runtime/crash.py POINTS), and
every known point is named somewhere: a typo would make a fault test kill nothing."""

from __future__ import annotations

import re
from pathlib import Path

import geo_pipeline
from geo_pipeline.runtime.crash import POINTS


def test_code_names_exactly_the_known_crash_points():
    root = Path(geo_pipeline.__file__).parent
    named = {
        m.group(1)
        for path in root.rglob("*.py")
        for m in re.finditer(r"crashpoint\(\"([a-z_]+)\"\)", path.read_text(encoding="utf-8"))
    }
    assert named == set(POINTS)
