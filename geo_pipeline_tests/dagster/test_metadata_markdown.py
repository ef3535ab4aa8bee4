"""Brand names are data in the Markdown of asset metadata: a name holding ``|``, ``*``, a link or
HTML renders as those characters, never as table structure, emphasis, a link or a tag."""

from __future__ import annotations

import re

from geo_pipeline.defs.analysis import metadata

EVIL = "**Evil** | [x](javascript:alert(1)) <img src=x onerror=alert(1)> `c` _u_ #h\nnext line"


def _row(brand: str, target: bool = False) -> dict:
    return {
        "brand": brand,
        "is_target": target,
        "n": 4,
        "mentions": 2,
        "mention_rate": 0.5,
        "mention_rate_lower": 0.15,
        "mention_rate_upper": 0.85,
        "mention_rate_interval": "question-clustered, 2 questions",
        "n_effective": 3.2,
        "avg_rank": 1.5,
        "analysing_samples": 0,
        "collecting_samples": 0,
    }


def test_brand_names_are_escaped_in_the_visibility_table():
    md = metadata.visibility_markdown([_row("Luckin", True), _row(EVIL)])
    lines = md.split("\n")
    assert len(lines) == 4  # header, rule, two rows: the newline in the name did not split a row
    evil = lines[3]
    unescaped_pipes = re.findall(r"(?<!\\)\|", evil)
    assert len(unescaped_pipes) == len(re.findall(r"\|", lines[0]))  # the same columns
    for raw in ("**Evil**", "](javascript:", "`c`", "_u_"):
        assert raw not in evil, raw
    assert not re.search(r"(?<!\\)<img", evil)
    assert r"\*\*Evil\*\*" in evil and r"\<img" in evil
    assert "| Luckin |" in lines[2]  # plain names read as before
