"""Printing for the CLI: tables for people, ``--json`` for machines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from geo_pipeline.jsonable import json_default


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, default=json_default, ensure_ascii=False, indent=2))


def emit_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, title: str | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=title)
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*["" if r.get(c) is None else str(r.get(c)) for c in cols])
    Console().print(table)


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
