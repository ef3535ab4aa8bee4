"""The stance evaluation set (issue 37 item 5): ≥ 300 hand-labelled mention contexts in Chinese and
English, each naming its target brand verbatim, with a stance and attributes from the closed sets
that docs/stance-labelling.md defines, a balanced class mix and both languages well represented.
Every detector's precision/recall is measured against this file, so a malformed line would
silently skew those figures: each check names the line, the field and the value it rejects."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "geo_pipeline_tests" / "data" / "stance_eval.jsonl"
GUIDE = ROOT / "docs" / "stance-labelling.md"

STANCES = ("recommended", "neutral", "cautioned", "negative")
ATTRIBUTES = (
    "price",
    "quality",
    "service",
    "taste",
    "convenience",
    "availability",
    "safety",
    "sustainability",
    "brand_reputation",
    "design",
    "other",
)
LANGS = ("zh", "en")
FIELDS = {"id", "lang", "brand", "context", "stance", "attributes", "note"}
CJK = re.compile(r"[\u4e00-\u9fff]")


def load() -> list[tuple[int, dict[str, Any]]]:
    items = []
    for lineno, line in enumerate(DATA.read_text(encoding="utf-8").splitlines(), start=1):
        assert line.strip(), f"{DATA.name}:{lineno}: blank line"
        obj = json.loads(line)
        assert isinstance(obj, dict), f"{DATA.name}:{lineno}: not an object: {line[:80]!r}"
        items.append((lineno, obj))
    return items


@pytest.fixture(scope="module")
def items() -> list[tuple[int, dict[str, Any]]]:
    return load()


def test_every_line_has_the_schema(items: list[tuple[int, dict[str, Any]]]) -> None:
    for lineno, obj in items:
        where = f"{DATA.name}:{lineno}"
        assert set(obj) == FIELDS, f"{where}: fields {sorted(obj)}, expected {sorted(FIELDS)}"
        for key in ("id", "lang", "brand", "context", "stance", "note"):
            assert isinstance(obj[key], str), f"{where}: {key}={obj[key]!r} is not a string"
        for key in ("id", "brand", "context"):
            assert obj[key].strip() == obj[key] and obj[key], f"{where}: {key}={obj[key]!r}"
        assert obj["lang"] in LANGS, f"{where}: lang={obj['lang']!r}, allowed {LANGS}"
        assert re.fullmatch(rf"{obj['lang']}-\d{{3}}", obj["id"]), (
            f"{where}: id={obj['id']!r}, expected '{obj['lang']}-NNN'"
        )
        assert obj["stance"] in STANCES, f"{where}: stance={obj['stance']!r}, allowed {STANCES}"
        attrs = obj["attributes"]
        assert isinstance(attrs, list), f"{where}: attributes={attrs!r} is not a list"
        for attr in attrs:
            assert attr in ATTRIBUTES, (
                f"{where}: attributes contains {attr!r}, allowed {ATTRIBUTES}"
            )
        assert len(set(attrs)) == len(attrs), f"{where}: attributes repeat: {attrs!r}"


def test_the_brand_occurs_verbatim_in_its_context(items: list[tuple[int, dict[str, Any]]]) -> None:
    for lineno, obj in items:
        assert obj["brand"] in obj["context"], (
            f"{DATA.name}:{lineno}: brand={obj['brand']!r} not in context={obj['context']!r}"
        )


def test_the_context_is_in_its_language(items: list[tuple[int, dict[str, Any]]]) -> None:
    for lineno, obj in items:
        has_cjk = bool(CJK.search(obj["context"]))
        assert has_cjk == (obj["lang"] == "zh"), (
            f"{DATA.name}:{lineno}: lang={obj['lang']!r} but context={obj['context']!r}"
        )


def test_ids_and_labelled_pairs_are_unique(items: list[tuple[int, dict[str, Any]]]) -> None:
    ids = Counter(obj["id"] for _, obj in items)
    repeated = sorted(i for i, n in ids.items() if n > 1)
    assert not repeated, f"ids used more than once: {repeated}"
    pairs = Counter((obj["brand"], obj["context"]) for _, obj in items)
    dupes = [p for p, n in pairs.items() if n > 1]
    assert not dupes, f"the same (brand, context) is labelled twice: {dupes}"


def test_size_class_mix_and_languages(items: list[tuple[int, dict[str, Any]]]) -> None:
    n = len(items)
    assert n >= 300, f"{n} items, at least 300 required"
    stances = Counter(obj["stance"] for _, obj in items)
    for stance in STANCES:
        assert stances[stance] / n >= 0.15, f"stance {stance!r}: {stances[stance]}/{n} < 15 %"
    langs = Counter(obj["lang"] for _, obj in items)
    for lang in LANGS:
        assert langs[lang] / n >= 0.40, f"lang {lang!r}: {langs[lang]}/{n} < 40 %"
    for lang in LANGS:
        per_lang = Counter(obj["stance"] for _, obj in items if obj["lang"] == lang)
        assert set(per_lang) == set(STANCES), f"lang {lang!r} lacks a class: {dict(per_lang)}"


def test_the_guide_defines_every_label_and_attribute_the_set_uses() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    for name in (*STANCES, *ATTRIBUTES):
        assert f"`{name}`" in guide, f"{GUIDE.name} does not define `{name}`"
