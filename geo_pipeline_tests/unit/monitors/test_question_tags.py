"""Question tags in the config and from a CSV: validated with field paths, frozen by question
revision, and an untagged config keeps the snapshot id it had."""

from __future__ import annotations

from typing import Any

import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.config_problems import ConfigError
from geo_pipeline.domain.config_text import normalise_text, question_revision
from geo_pipeline.domain.question_tags import read_questions_csv, sheet_changes

CAPS = load_registry().capabilities()


def config(**extra: Any) -> dict[str, Any]:
    return {
        "tenant": "acme",
        "brand": {"name": "Acme"},
        "questions": ["best crm for a small team?", "is acme crm worth the price?"],
        "channels": [{"platform": "deepseek", "device": "web"}],
        **extra,
    }


def test_tags_are_frozen_by_revision_and_untagged_snapshots_do_not_move() -> None:
    plain = normalise_and_validate(config(), CAPS)
    assert "question_tags" not in plain.canonical()  # the snapshot id untagged configs had
    tagged = normalise_and_validate(
        config(
            question_tags={"  best crm for a small team? ": {"topic": " CRM ", "market": "ｃｎ"}}
        ),
        CAPS,
    )
    rev = question_revision("best crm for a small team?")
    assert tagged.question_tags == {rev: {"market": "cn", "topic": "CRM"}}
    assert tagged.snapshot_id != plain.snapshot_id
    assert NormalisedConfig.from_canonical(tagged.canonical()) == tagged


def test_every_tag_problem_with_its_path() -> None:
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(
            config(
                question_tags={
                    "not a question here": {"topic": "x"},
                    "best crm for a small team?": {
                        "colour": "red",
                        "intent": "x" * 65,
                        "persona": 3,
                    },
                }
            ),
            CAPS,
        )
    text = str(err.value)
    assert "question_tags['not a question here']: is not one of the config's questions" in text
    assert "question_tags['best crm for a small team?'].colour: unknown tag 'colour'" in text
    assert ".intent: " in text and "at most 64" in text
    assert ".persona: expected text, got 3" in text


def test_csv_import_and_what_it_changes() -> None:
    sheet = read_questions_csv(
        "\ufeffquestion,topic,intent,persona,market\n"
        "best crm for a small team?,crm,compare,founder,cn\n"
        "which erp for a factory?,erp,shortlist,,cn\n"
        ",,,,\n"
    )
    assert sheet.problems == []
    assert sheet.questions == ["best crm for a small team?", "which erp for a factory?"]
    assert sheet.tags["which erp for a factory?"] == {
        "intent": "shortlist",
        "market": "cn",
        "topic": "erp",
    }
    rows = sheet_changes(
        ["best crm for a small team?", "is acme crm worth the price?"],
        {"best crm for a small team?": {"topic": "crm"}},
        sheet,
        normalise_text,
    )
    assert [(r["change"], r["question"]) for r in rows] == [
        ("added", "which erp for a factory?"),
        ("removed", "is acme crm worth the price?"),
        ("re-tagged", "best crm for a small team?"),
    ]
    bad = read_questions_csv("question,colour\nq one?,red\n,crm\n", "qs.csv")
    assert (
        "qs.csv header",
        "unknown column(s) 'colour'; allowed: question, topic, intent, persona, market",
    ) in bad.problems
    assert ("qs.csv line 3", "tags without a question") in bad.problems
    assert read_questions_csv("text\nq?\n").problems[0][1].startswith("needs a 'question' column")
