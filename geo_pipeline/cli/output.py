"""Printing for the CLI: tables for people, ``--json`` for machines."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import click

from geo_pipeline.jsonable import json_default


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, default=json_default, ensure_ascii=False, indent=2))


# C0 and C1 control characters but newline and tab: in a terminal they move the cursor, clear the
# screen or retitle the window. Shown as escapes instead.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(value: Any) -> Any:
    """A value as rich prints it verbatim: a ``Text`` is never parsed for markup (``[/x]`` would
    end the table with a MarkupError, ``[link=...]`` would make a link) nor for emoji codes, and
    control characters are escaped. Every value from the database or a config goes through it."""
    from rich.text import Text

    return Text(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value)))


def emit_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, title: str | None = None
) -> None:
    from rich.table import Table

    cols = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=None if title is None else plain(title))
    for c in cols:
        # Fold, never cut: a run id, a channel or a total shortened with "…" is a wrong value.
        table.add_column(plain(c), overflow="fold")
    for r in rows:
        table.add_row(*[plain("" if r.get(c) is None else r.get(c)) for c in cols])
    console().print(table)


# Not a terminal (a pipe, a file, a test runner): rich would assume 80 columns and fold or cut
# every table to fit; give it room for the widest line instead.
UNBOUNDED_WIDTH = 4096


def console(*, stderr: bool = False) -> Any:
    """A rich Console: a terminal's own width, or unbounded when output is not a terminal."""
    from rich.console import Console

    out = Console(stderr=stderr)
    return out if out.is_terminal else Console(stderr=stderr, width=UNBOUNDED_WIDTH)


# --------------------------------------------------------------------------- option ranges
class Seconds(click.FloatRange):
    """A finite number of seconds: ``nan`` and ``inf`` are refused like any out-of-range value
    (FloatRange alone lets them through, and they only fail later, deep in a running process)."""

    def __init__(self, *, positive: bool = True, max_s: float = 7 * 24 * 3600.0) -> None:
        super().__init__(min=0.0, max=max_s, min_open=positive)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if out != out or out in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return out


POSITIVE_SECONDS = Seconds()
SECONDS = Seconds(positive=False)
POSITIVE = click.IntRange(min=1)
PORT = click.IntRange(0, 65535)
