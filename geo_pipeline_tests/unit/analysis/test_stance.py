"""The stance baseline's rules (geo_pipeline.domain.stance), one hand-written case or two per
rule. These are the rules' own examples, written with the detector; the independent measure of
the detector is the labelled set (bench/stance_eval.py), never these cases."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.config_model import Brand
from geo_pipeline.domain.mentions import BrandSet, detect, mention_spans
from geo_pipeline.domain.stance import (
    ATTRIBUTES,
    BASELINE,
    STANCE_VERSION,
    StanceDetector,
    detect_stances,
)

BRANDS = BrandSet(
    (
        Brand(name="Luckin", aliases=("瑞幸", "瑞幸咖啡")),
        Brand(name="Starbucks", aliases=("星巴克",)),
        Brand(name="Manner", aliases=()),
    )
)


def stances(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        b: (m.stance, m.attributes)
        for b, m in detect_stances(text, mention_spans(text, BRANDS)).items()
    }


def test_version_and_protocol() -> None:
    assert STANCE_VERSION.startswith("stance-")
    det: StanceDetector = BASELINE
    assert det.version == STANCE_VERSION
    assert ATTRIBUTES[-1] == "other"


def test_spans_are_the_mentions_detect_counts() -> None:
    text = (
        "Luckin（瑞幸咖啡）is cheap.\n```\npip install starbucks\n```\nsee https://starbucks.com/x"
    )
    spans = mention_spans(text, BRANDS)
    counted = {m.brand: m.mention_count for m in detect(text, BRANDS).mentions if m.mentioned}
    assert {b: len(v) for b, v in spans.items()} == counted == {"Luckin": 2}
    assert [text[s:e] for s, e in spans["Luckin"]] == ["Luckin", "瑞幸咖啡"]


def test_fullwidth_text_spans_point_into_the_original() -> None:
    text = "推荐ＬＵＣＫＩＮ，价格实惠。"
    ((s, e),) = mention_spans(text, BRANDS)["Luckin"]
    assert text[s:e] == "ＬＵＣＫＩＮ"
    assert stances(text)["Luckin"] == ("recommended", ("price",))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # plain recommendation / description, both languages
        ("I recommend Luckin for its low prices.", {"Luckin": ("recommended", ("price",))}),
        ("星巴克是一家美国咖啡连锁品牌。", {"Starbucks": ("neutral", ())}),
        # Latin cues match whole words only ("popular" is not in "unpopular")
        ("Manner seems unpopular here.", {"Manner": ("neutral", ())}),
        # negation
        (
            "Starbucks is not recommended for a tight budget.",
            {"Starbucks": ("negative", ("price",))},
        ),
        ("不推荐星巴克，太贵了。", {"Starbucks": ("negative", ("price",))}),
        ("Manner is not expensive.", {"Manner": ("recommended", ("price",))}),
        # contrast turns a recommendation into a caution; the pronoun clause stays with its brand
        ("Luckin is recommended, but it can be crowded.", {"Luckin": ("cautioned", ())}),
        (
            "瑞幸咖啡口味不错，但是门店排队时间长。",
            {"Luckin": ("cautioned", ("taste", "availability"))},
        ),
        # ranking
        ("首选瑞幸，价格实惠。", {"Luckin": ("recommended", ("price",))}),
        (
            "1. **Manner** - specialty beans\n2. **Starbucks** - many stores",
            {"Manner": ("recommended", ()), "Starbucks": ("neutral", ("availability",))},
        ),
    ],
)
def test_single_brand_rules(text: str, expected: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    assert stances(text) == expected


def test_several_brands_in_one_sentence_are_judged_apart() -> None:
    assert stances("Luckin is great and Starbucks is awful.") == {
        "Luckin": ("recommended", ()),
        "Starbucks": ("negative", ()),
    }
    # coordinated brands share the predicate
    assert stances("推荐瑞幸和Manner。") == {
        "Luckin": ("recommended", ()),
        "Manner": ("recommended", ()),
    }
    # another brand's clause does not leak into the target's
    assert stances("Starbucks is a global chain, but Manner is better value.")["Starbucks"] == (
        "neutral",
        (),
    )


@pytest.mark.parametrize(
    ("text", "winner", "loser"),
    [
        ("Luckin is better than Starbucks for value.", "Luckin", "Starbucks"),
        ("Starbucks is worse than Manner.", "Manner", "Starbucks"),
        ("瑞幸比星巴克便宜。", "Luckin", "Starbucks"),
        ("Manner不如瑞幸方便。", "Luckin", "Manner"),
        ("瑞幸优于星巴克。", "Luckin", "Starbucks"),
    ],
)
def test_comparatives(text: str, winner: str, loser: str) -> None:
    got = stances(text)
    assert got[winner][0] == "recommended"
    assert got[loser][0] == "cautioned"


def test_unmentioned_brands_get_no_stance() -> None:
    assert stances("Nothing about coffee here.") == {}
