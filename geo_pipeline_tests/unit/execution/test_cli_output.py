"""What the CLI prints through rich is data, never markup: a brand, a question or a reason that
contains ``[/x]``, ``[bold]`` or ``:coffee:`` is shown as written and cannot end a table with a
traceback or restyle the terminal."""

from __future__ import annotations

import pytest

from geo_pipeline.cli import output

HOSTILE = [
    "[/x]",
    "[bold red]loud[/]",
    "[link=file:///etc/passwd]click[/link]",
    ":coffee:",
    "\\[x]",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_table_values_titles_and_headers_are_printed_verbatim(value, capsys):
    output.emit_table([{value: value, "n": 1}], title=f"brand {value}")
    out = capsys.readouterr().out
    assert out.count(value) == 3, out  # the title, the header, the cell


def test_control_characters_in_a_value_cannot_reach_the_terminal(capsys):
    output.emit_table([{"brand": "Luckin\x1b[2J\x07"}])
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "\x07" not in out and "Luckin" in out
