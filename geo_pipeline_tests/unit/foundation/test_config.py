"""R1/R2: normalisation and validation of the collection config."""

from __future__ import annotations

import copy

import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_model import MAX_QUESTION_CHARS, NormalisedConfig
from geo_pipeline.domain.config_problems import ConfigError
from geo_pipeline.domain.config_text import normalise_text, question_revision

CAPS = load_registry().capabilities()

BASE = {
    "tenant": "acme",
    "brand": {
        "name": "瑞幸咖啡",
        "aliases": ["Luckin", "瑞幸"],
        "domains": ["https://www.LuckinCoffee.com/"],
    },
    "competitors": [{"name": "星巴克", "aliases": ["Starbucks"]}],
    "questions": ["哪家咖啡性价比高？", "Best coffee chain in China?"],
    "channels": [{"platform": "deepseek", "device": "web"}],
    "repeats": 2,
}


def cfg(**over):
    c = copy.deepcopy(BASE)
    c.update(over)
    return c


def test_padded_and_duplicate_questions_are_normalised_and_reported():
    c = cfg(
        questions=[
            "  哪家咖啡性价比高？ ",
            "哪家咖啡性价比高？",
            "Best  coffee\tchain?",
            "ＢＥＳＴ coffee chain?",
        ]
    )
    n = normalise_and_validate(c, CAPS)
    assert [q.text for q in n.questions] == [
        "哪家咖啡性价比高?",
        "Best coffee chain?",
        "BEST coffee chain?",
    ]
    assert [str(d) for d in n.duplicates] == ["questions[1]: duplicate of questions[0], removed"]


def test_nfkc_folds_full_width_forms():
    assert normalise_text("ＡＢＣ　１２３") == "ABC 123"


def test_five_mistakes_give_five_messages_with_paths():
    c = cfg(
        questions=["   ", "x" * (MAX_QUESTION_CHARS + 1), "fine question"],
        channels=[
            {"platform": "nosuch", "device": "web"},
            {"platform": "kimi", "device": "web", "modes": ["deep_thinking"]},
        ],
        repeats=0,
    )
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(c, CAPS)
    paths = [p.path for p in err.value.problems]
    assert paths == [
        "questions[0]",
        "questions[1]",
        "repeats",
        "channels[0].platform",
        "channels[1].modes[0]",
    ]
    text = str(err.value)
    assert "5 problems" in text
    assert "unknown platform 'nosuch'; known: " in text
    assert "mode 'deep_thinking' is not supported by kimi; supported: standard, web_search" in text
    assert f"at most {MAX_QUESTION_CHARS} are allowed" in text


def test_structural_errors_are_all_reported_with_paths():
    c = cfg(repeats="many", brand={"name": "X", "alias": ["typo"]})
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(c, CAPS)
    paths = sorted(p.path for p in err.value.problems)
    assert paths == ["brand.alias", "repeats"]


def test_device_region_and_screenshot_checked_against_capabilities():
    c = cfg(
        channels=[
            {"platform": "qwen", "device": "tv", "regions": ["mars"], "screenshot": "required"}
        ]
    )
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(c, CAPS)
    assert [p.path for p in err.value.problems] == [
        "channels[0].device",
        "channels[0].regions[0]",
        "channels[0].screenshot",
    ]


def test_name_shared_by_two_brands_is_refused():
    c = cfg(competitors=[{"name": "Starbucks", "aliases": ["瑞幸"]}])
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(c, CAPS)
    assert "also used by brand" in str(err.value)


def test_domains_are_normalised():
    n = normalise_and_validate(cfg(), CAPS)
    assert n.brand.domains == ("luckincoffee.com",)


def test_snapshot_round_trips_and_hash_is_content_based():
    n = normalise_and_validate(cfg(), CAPS)
    again = NormalisedConfig.from_canonical(n.canonical())
    assert again.snapshot_id == n.snapshot_id
    other = normalise_and_validate(cfg(repeats=3), CAPS)
    assert other.snapshot_id != n.snapshot_id


def test_question_revision_is_content_addressed():
    assert question_revision("a b") == question_revision("a b")
    assert question_revision("a b") != question_revision("a c")
    assert question_revision("x").startswith("q") and len(question_revision("x")) == 21


def test_control_characters_are_refused_with_their_paths():
    with pytest.raises(ConfigError) as e:
        normalise_and_validate(
            cfg(questions=["哪家\x00咖啡好？"], brand={"name": "Luckin", "aliases": ["Lu\x07ck"]}),
            CAPS,
        )
    got = {p.path: p.message for p in e.value.problems}
    assert got["questions[0]"] == "contains control character U+0000; remove it"
    assert got["brand.aliases[0]"] == "contains control character U+0007; remove it"


def test_config_files_with_a_repeated_key_or_not_utf8_are_refused(tmp_path):
    from geo_pipeline.domain.config_loading import load_config_file

    dup = tmp_path / "dup.yaml"
    dup.write_text("tenant: acme\nrepeats: 2\nrepeats: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="key 'repeats' is given twice"):
        load_config_file(dup)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("tenant: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xe9 at 11\)"):
        load_config_file(latin)
    nested = tmp_path / "ok.yaml"
    nested.write_text("tenant: acme\nchannels:\n  - {platform: kimi, device: web}\n")
    assert load_config_file(nested)["channels"] == [{"platform": "kimi", "device": "web"}]
