"""Hostile config input: alias bombs, deep nesting, huge and invisible values, many problems at
once. Every one ends in a ConfigError a person can act on (field path, a short prefix of the
value, what is allowed), in bounded time and memory, never in a traceback."""

from __future__ import annotations

import copy
import json
import time

import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain import config_loading, config_model, config_text
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_loading import load_config_file
from geo_pipeline.domain.config_problems import ConfigError

CAPS = load_registry().capabilities()

HEAD = "tenant: acme\nbrand: {name: Luckin}\nchannels: [{platform: kimi, device: web}]\n"

BASE = {
    "tenant": "acme",
    "brand": {"name": "Luckin", "aliases": ["瑞幸"]},
    "competitors": [{"name": "Starbucks"}],
    "questions": ["Best coffee chain in China?"],
    "channels": [{"platform": "kimi", "device": "web"}],
    "repeats": 2,
}


def cfg(**over):
    c = copy.deepcopy(BASE)
    c.update(over)
    return c


def problems_of(raw) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(raw, CAPS)
    return {p.path: p.message for p in err.value.problems}


def load_problems(tmp_path, text: str, name: str = "c.yaml") -> ConfigError:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(load_config_file(path), CAPS)
    return err.value


# --------------------------------------------------------------------------- 1. alias bombs
def _bomb(field: str, levels: int = 5) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append(f"{field}: [" + ", ".join([f"*a{levels - 1}"] * 9) + "]")
    return HEAD.replace("questions", "") + "\n".join(lines) + "\n"


@pytest.mark.parametrize("field", ["questions", "repeats"])
def test_a_yaml_alias_bomb_is_refused_before_validation_with_a_short_message(tmp_path, field):
    t0 = time.monotonic()
    err = load_problems(tmp_path, _bomb(field))
    assert time.monotonic() - t0 < 5
    text = str(err)
    assert len(text) < 2_000, text[:500]
    assert "alias" in text and "expand" in text
    assert all(len(p.message) < 400 for p in err.problems)


def test_a_real_alias_bomb_of_nine_levels_fails_fast(tmp_path):
    t0 = time.monotonic()
    err = load_problems(tmp_path, _bomb("questions", levels=9))
    assert time.monotonic() - t0 < 5 and len(str(err)) < 2_000


def test_a_few_aliases_for_shared_settings_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(
        "tenant: acme\nbrand: {name: Luckin}\nquestions: [Best coffee]\n"
        "channels: [&web {platform: deepseek, device: web}, {<<: *web, device: app}]\n"
    )
    assert normalise_and_validate(load_config_file(path), CAPS).channels == [
        "deepseek__app",
        "deepseek__web",
    ]
    merged = tmp_path / "merge.yaml"
    merged.write_text(
        "tenant: acme\nbrand: &b {name: Luckin}\ncompetitors: [{<<: *b, name: Other}]\n"
        "questions: [Best coffee]\nchannels: [{platform: kimi, device: web}]\n"
    )
    n = normalise_and_validate(load_config_file(merged), CAPS)
    assert n.competitors[0].name == "Other"


def test_a_recursive_alias_is_refused(tmp_path):
    err = load_problems(tmp_path, HEAD + "questions: &q [Best coffee, *q]\n")
    assert "questions[1]" in str(err) and "alias" in str(err)


def test_values_are_echoed_as_a_short_escaped_prefix(tmp_path):
    long = "x" * 200_000
    got = problems_of(cfg(tenant=long, repeats=long, channels=[{"platform": long, "device": "w"}]))
    for path in ("tenant", "repeats", "channels[0].platform"):
        assert len(got[path]) < 300, (path, got[path][:300])
        assert "xxxx" in got[path] and "(200000 characters)" in got[path]
    hidden = problems_of(cfg(tenant="acme\u202e\u200bevil"))
    assert "\\u202e\\u200b" in hidden["tenant"]


# --------------------------------------------------------------------------- 2. deep nesting
def test_deep_yaml_nesting_is_refused_with_a_field_path(tmp_path):
    err = load_problems(tmp_path, HEAD + "questions: " + "[" * 500 + "]" * 500 + "\n")
    (p,) = err.problems
    assert p.path.startswith("questions[0][0]") and "nested" in p.message
    assert len(str(err)) < 1_000


@pytest.mark.parametrize("depth", [500, 100_000])
def test_deep_json_nesting_is_refused_with_a_field_path(tmp_path, depth):
    text = json.dumps({"tenant": "acme", "brand": {"name": "L"}, "questions": []})
    text = text.replace("[]", "[" * depth + "]" * depth)
    err = load_problems(tmp_path, text, "c.json")
    (p,) = err.problems
    assert p.path.startswith("questions[0][0]") and "nested" in p.message
    assert len(str(err)) < 1_000


def test_deep_nesting_from_the_launchpad_is_refused_too():
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    got = problems_of(cfg(questions=deep))
    (path,) = got
    assert path.startswith("questions[0][0]") and "nested" in got[path]


def test_cli_plan_refuses_deep_nesting_with_exit_2(tmp_path, capsys):
    from geo_pipeline.cli.main import main

    path = tmp_path / "deep.yaml"
    path.write_text(HEAD + "questions: " + "[" * 500 + "]" * 500 + "\n")
    assert main(["runs", "plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "questions[0][0]" in err and "Traceback" not in err


def test_huge_numbers_and_huge_files_are_refused(tmp_path):
    err = load_problems(tmp_path, HEAD + "questions: [Best coffee]\nrepeats: " + "9" * 5000)
    assert "repeats" in str(err) and len(str(err)) < 1_000
    err = load_problems(tmp_path, '{"repeats": ' + "9" * 5000 + "}", "c.json")
    assert len(str(err)) < 1_000
    big = tmp_path / "big.yaml"
    big.write_text(HEAD + "questions: [" + "a" * (config_loading.MAX_CONFIG_BYTES + 10) + "]\n")
    with pytest.raises(ConfigError, match="at most"):
        load_config_file(big)


# --------------------------------------------------------------------------- 3. sizes, invisibles
def test_sizes_are_limited_with_field_paths():
    got = problems_of(
        cfg(
            brand={"name": "L" * 200_000, "aliases": [f"a{i}" for i in range(80_000)]},
            competitors=[{"name": f"c{i}"} for i in range(config_model.MAX_COMPETITORS + 1)],
            questions=["Best coffee?"] * (config_model.MAX_QUESTION_ENTRIES + 1),
        )
    )
    assert f"at most {config_model.MAX_NAME_CHARS}" in got["brand.name"]
    assert "200000" in got["brand.name"]
    assert f"at most {config_model.MAX_ALIASES}" in got["brand.aliases"]
    assert f"at most {config_model.MAX_COMPETITORS}" in got["competitors"]
    assert f"at most {config_model.MAX_QUESTION_ENTRIES}" in got["questions"]
    assert all(len(m) < 300 for m in got.values())


@pytest.mark.parametrize(
    "name",
    [
        "\u200b\u200b\u200b",
        "\u2060\ufeff",
        "\u3164",
        "\u00ad",
        "\u200bLuckin",
        "Luckin\u200d",
        "Luc\u200bkin",
    ],
)
def test_invisible_or_invisibly_padded_names_are_refused(name):
    got = problems_of(cfg(competitors=[{"name": "Starbucks", "aliases": [name]}]))
    assert list(got) == ["competitors[0].aliases[0]"]
    assert (
        "invisible" in got["competitors[0].aliases[0]"] and "U+" in got["competitors[0].aliases[0]"]
    )
    got = problems_of(cfg(brand={"name": name}))
    assert list(got) == ["brand.name"]


def test_visible_names_with_joiners_and_marks_are_kept():
    # ZWJ inside an emoji sequence, ZWNJ inside a Persian word, a Thai tone mark at the end.
    names = ["👩\u200d💻 Coffee", "می\u200cخواهم", "น้ำที่"]
    n = normalise_and_validate(cfg(brand={"name": "Luckin", "aliases": names}), CAPS)
    assert n.brand.aliases == tuple(config_text.normalise_text(a) for a in names)


def test_an_invisible_only_question_is_refused():
    got = problems_of(cfg(questions=["\u200b\u200b\u200b", "Best coffee?"]))
    assert list(got) == ["questions[0]"] and "only invisible" in got["questions[0]"]


# --------------------------------------------------------------------------- 4. all at once
def test_a_type_error_does_not_hide_the_other_problems():
    got = problems_of(
        cfg(
            repeats="many",
            tenant="Not A Tenant!",
            questions=["Best coffee?", 42, "   "],
            channels=[{"platform": "nosuch", "device": "web"}, {"platform": "kimi", "device": 3}],
            brand={"name": "Luckin", "aliases": ["\u200b"], "alias": ["typo"]},
        )
    )
    assert sorted(got) == sorted(
        [
            "tenant",
            "brand.aliases[0]",
            "brand.alias",
            "questions[1]",
            "questions[2]",
            "channels[0].platform",
            "channels[1].device",
            "repeats",
        ]
    ), got
    assert "'many'" in got["repeats"]


def test_a_missing_field_does_not_hide_the_other_problems():
    raw = cfg(repeats=0)
    del raw["tenant"]
    got = problems_of(raw)
    assert sorted(got) == ["repeats", "tenant"]
