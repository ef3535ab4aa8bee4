"""Every named query in sql/queries is used, and every query name the code asks for exists
(issue 38: five queries were used nowhere, and a docstring named ``samples.claim``, a query
that does not exist).

A name counts as used when it appears as a string literal in the package, the tests or the
benches (a test or bench may read a query the package does not, e.g. the ledger's property
test). The one composed name, ``dagster.<name>`` (``defs.factory.query_rows``), counts when
``<name>`` appears as a literal in the defs folder. Code builds query names from literals only,
so this scan sees every use.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from geo_pipeline.store import queries

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("geo_pipeline", "geo_pipeline_tests", "bench")
NAME = re.compile(r"[a-z_]+\.[a-z_][a-z0-9_]*")
# The one place a name is composed: defs.factory.query_rows(conn, "<name>") -> "dagster.<name>".
COMPOSED = {"dagster": ROOT / "geo_pipeline" / "defs"}


# A file name is not a query name.
FILE_SUFFIXES = (".yaml", ".sql", ".json", ".py", ".md", ".html", ".toml", ".txt")
# A Q(...) call written anywhere, docstrings and comments included, must name a query.
Q_CALL = re.compile(r"""\bQ\(["']([^"']+)["']\)""")


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _scan() -> tuple[set[str], dict[str, set[str]], set[str]]:
    everywhere: set[str] = set()
    composed: dict[str, set[str]] = {stem: set() for stem in COMPOSED}
    q_calls: set[str] = set()
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            found = _literals(path)
            everywhere |= found
            q_calls |= set(Q_CALL.findall(path.read_text(encoding="utf-8")))
            for stem, folder in COMPOSED.items():
                if folder in path.parents:
                    composed[stem] |= found
    return everywhere, composed, q_calls


def test_every_named_query_is_used() -> None:
    everywhere, composed, _ = _scan()
    unused = [
        q
        for q in queries.names()
        if q not in everywhere and q.partition(".")[2] not in composed.get(q.partition(".")[0], ())
    ]
    assert unused == [], f"named queries nothing uses (remove them): {unused}"


def test_every_query_name_in_the_code_exists() -> None:
    everywhere, _, q_calls = _scan()
    files = {p.stem for p in (queries.sql_dir() / "queries").glob("*.sql")}
    asked = q_calls | {
        s
        for s in everywhere
        if NAME.fullmatch(s) and s.partition(".")[0] in files and not s.endswith(FILE_SUFFIXES)
    }
    missing = sorted(asked - set(queries.names()))
    assert missing == [], f"query names that no sql/queries file defines: {missing}"
