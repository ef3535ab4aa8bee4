"""Stream names have one definition, ``geo_pipeline.domain.streams`` (issue 38: they were 12
SQL literals in sql/queries plus two Python copies of ``completions``).

The named queries take them as parameters (``%(collect_prefix)s``, ``%(screenshot_prefix)s``,
``%(completions_stream)s``, all from ``streams.STREAM_PARAMS``), so no query in sql/queries
writes a stream name as a literal. A migration cannot take a parameter: any stream name it
writes as a literal must be one of the definition's.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from geo_pipeline.defs import names
from geo_pipeline.domain import streams
from geo_pipeline.streams import keys

SQL = Path(__file__).resolve().parents[3] / "sql"
# A quoted literal that starts like one of our logical stream names.
STREAM_LITERAL = re.compile(r"'((?:collect|screenshot):[a-z_]*|completions|dead)'")


def _code(text: str) -> str:
    """The SQL without its ``--`` comments (a comment may quote an example stream)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def test_no_query_writes_a_stream_name_as_a_literal() -> None:
    found = {
        f"{path.name}:{n}: {m.group(0)}"
        for path in sorted((SQL / "queries").glob("*.sql"))
        for n, line in enumerate(_code(path.read_text(encoding="utf-8")).splitlines(), 1)
        for m in STREAM_LITERAL.finditer(line)
    }
    assert not found, f"stream names written as literals (pass streams.STREAM_PARAMS): {found}"


def test_every_stream_literal_in_a_migration_matches_the_definition() -> None:
    allowed = {streams.COMPLETIONS, streams.DEAD}
    prefixes = (streams.COLLECT_PREFIX, streams.SCREENSHOT_PREFIX)
    for path in sorted((SQL / "migrations").glob("*.sql")):
        for m in STREAM_LITERAL.finditer(_code(path.read_text(encoding="utf-8"))):
            name = m.group(1)
            assert name in allowed or name.startswith(prefixes), f"{path.name}: {name}"


def test_the_python_names_come_from_the_definition() -> None:
    assert keys.collect_stream("deepseek") == streams.COLLECT_PREFIX + "deepseek"
    assert keys.screenshot_stream("deepseek") == streams.SCREENSHOT_PREFIX + "deepseek"
    assert keys.COMPLETIONS == names.COMPLETIONS_STREAM == streams.COMPLETIONS
    for module in (keys, names):  # imported from the definition, not copied
        assert '"completions"' not in inspect.getsource(module), module.__name__
    assert streams.STREAM_PARAMS == {
        "collect_prefix": streams.COLLECT_PREFIX,
        "screenshot_prefix": streams.SCREENSHOT_PREFIX,
        "completions_stream": streams.COMPLETIONS,
    }
