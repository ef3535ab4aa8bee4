"""Named SQL queries loaded from ``sql/queries/*.sql``.

Business code never assembles SQL strings: it asks for a query by name, e.g.
``Q("execution.claim")``, and binds parameters (STYLE.md, riverqueue/river). A file holds
blocks::

    -- name: claim
    -- Claims due samples for one worker (R11).
    UPDATE ...;

The block's name is prefixed with the file's stem: ``execution.sql`` + ``claim`` ->
``execution.claim``. Every name is used somewhere and every name asked for exists
(geo_pipeline_tests/unit/store/test_named_queries_used.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from geo_pipeline.settings import settings

SQL_DIR_ENV = "GEO_SQL_DIR"
_NAME = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    override = settings().sql_dir
    if override:
        return Path(override)
    # The repository layout keeps sql/ beside the package (design card); an installed wheel
    # carries a copy under geo_pipeline/_sql.
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "sql", here / "_sql"):
        if (candidate / "schema.sql").exists():
            return candidate
    raise FileNotFoundError(f"sql/ directory not found beside {here}; set {SQL_DIR_ENV}")


@cache
def _load_all() -> dict[str, str]:
    queries: dict[str, str] = {}
    qdir = sql_dir() / "queries"
    for path in sorted(qdir.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        matches = list(_NAME.finditer(text))
        for i, match in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            body = text[match.end() : end].strip()
            key = f"{path.stem}.{match.group(1)}"
            if key in queries:
                raise ValueError(f"duplicate query name {key} in {path}")
            queries[key] = body
    return queries


def Q(name: str) -> str:
    """The SQL text of the named query; a KeyError names what exists."""
    queries = _load_all()
    try:
        return queries[name]
    except KeyError:
        near = sorted(k for k in queries if k.split(".")[0] == name.split(".")[0])
        raise KeyError(f"no SQL query named {name!r}; in that file: {near}") from None


def names() -> list[str]:
    return sorted(_load_all())


def fetch_all(
    conn: Any, name: str, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run the named query and return its rows as dicts."""
    with conn.cursor() as cur:
        cur.execute(Q(name), dict(params or {}))
        return [dict(r) for r in cur.fetchall()]
