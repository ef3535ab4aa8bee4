"""Every module over 500 lines has a one-line reason in the README's list of long modules
(issue 38): a module grows past the floor only on purpose, and the reason is where a newcomer
reads about the layout. The list is a table between two markers so this test can read it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 500
START, END = "<!-- long-modules -->", "<!-- /long-modules -->"
ROW = re.compile(r"^\|\s*`(?P<path>[^`]+)`\s*\|\s*(?P<lines>\d+)\s*\|\s*(?P<reason>[^|]*\S)\s*\|$")


def _long_modules() -> dict[str, int]:
    found = {}
    for top in ("geo_pipeline", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > LIMIT:
                found[path.relative_to(ROOT).as_posix()] = n
    return found


def _readme_list() -> dict[str, tuple[int, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert START in text and END in text, f"README.md has no list between {START} and {END}"
    block = text.split(START, 1)[1].split(END, 1)[0]
    rows = {}
    for line in block.splitlines():
        if m := ROW.match(line.strip()):
            rows[m["path"]] = (int(m["lines"]), m["reason"])
    return rows


def test_every_long_module_has_a_reason_in_the_readme() -> None:
    listed = _readme_list()
    missing = sorted(set(_long_modules()) - set(listed))
    assert not missing, f"modules over {LIMIT} lines with no reason in README.md's list: {missing}"


def test_the_list_names_no_module_that_is_short_or_gone() -> None:
    long = _long_modules()
    stale = sorted(p for p in _readme_list() if p not in long)
    assert not stale, f"README.md lists modules that are not over {LIMIT} lines (any more): {stale}"


def test_each_reason_is_one_line_and_the_size_is_current() -> None:
    long = _long_modules()
    for path, (lines, reason) in _readme_list().items():
        assert len(reason.split()) >= 4, f"{path}: the reason is not a sentence: {reason!r}"
        if path in long:
            # the size is told to within 10 %, so an edit of a few lines needs no README change
            assert abs(long[path] - lines) <= long[path] * 0.1, (
                f"{path}: README says {lines} lines, the module has {long[path]}"
            )
