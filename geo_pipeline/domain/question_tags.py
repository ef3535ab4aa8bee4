"""Question tags (issue 37): ``topic``, ``intent``, ``persona``, ``market`` per question, so every
analyst rate can be broken down by them (analytics.brand_rates_by_tag).

In a collection config the tags sit beside the questions, keyed by the question as written:

    questions: ["best crm for a small team?", "is acme crm worth the price?"]
    question_tags:
      "best crm for a small team?": {topic: crm, intent: compare, persona: founder, market: cn}

Values are free-form text (NFKC, trimmed, 1-64 characters, no control characters); keys are
the four above. They are frozen into the run's config snapshot (keyed by question revision) like
the questions themselves (R2), so a re-tag applies from the next run on. A CSV
(``questions import FILE.csv``) has a ``question`` column and any of the tag columns.

Pure, and independent of domain/config.py (which calls :func:`validate_tags`), so problems come
back as (field path, message) pairs for the config's one list of problems (R1).
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TAG_KEYS = ("topic", "intent", "persona", "market")
MAX_TAG_CHARS = 64
CSV_QUESTION = "question"

PathProblem = tuple[str, str]


def normalise_tag(value: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", value)).strip()


def _echo(value: Any) -> str:
    return (
        repr(value[:40]) + ("..." if len(value) > 40 else "")
        if isinstance(value, str)
        else repr(value)
    )


def check_tags(tags: Any, path: str) -> tuple[dict[str, str], list[PathProblem]]:
    """One question's tags: known keys, non-empty short visible text values."""
    if not isinstance(tags, Mapping):
        return {}, [(path, f"expected a mapping of {', '.join(TAG_KEYS)}, got {_echo(tags)}")]
    out: dict[str, str] = {}
    problems: list[PathProblem] = []
    for key, value in tags.items():
        where = f"{path}.{key}"
        if key not in TAG_KEYS:
            problems.append((where, f"unknown tag {_echo(key)}; allowed: {', '.join(TAG_KEYS)}"))
            continue
        if value is None or value == "":
            continue  # an empty CSV cell: no tag
        if not isinstance(value, str):
            problems.append((where, f"expected text, got {_echo(value)}"))
            continue
        text = normalise_tag(value)
        if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text):
            problems.append((where, f"{_echo(value)} contains a control or invisible character"))
        elif not text:
            continue
        elif len(text) > MAX_TAG_CHARS:
            problems.append(
                (where, f"{_echo(value)} has {len(text)} characters; at most {MAX_TAG_CHARS}")
            )
        else:
            out[key] = text
    return dict(sorted(out.items())), problems


def validate_tags(
    raw: Mapping[str, Any] | None,
    revisions: Mapping[str, str],
    normalise: Callable[[str], str],
) -> tuple[dict[str, dict[str, str]], list[PathProblem]]:
    """``question_tags`` of a config -> {question revision: tags}, with every problem.

    ``revisions``: normalised question text -> its revision (the config's distinct questions);
    ``normalise``: the config's question normalisation, so a key matches its question as the
    run will ask it."""
    if not raw:
        return {}, []
    out: dict[str, dict[str, str]] = {}
    problems: list[PathProblem] = []
    for text, tags in raw.items():
        path = f"question_tags[{_echo(text)}]"
        revision = revisions.get(normalise(text)) if isinstance(text, str) else None
        if revision is None:
            problems.append((path, "is not one of the config's questions"))
            continue
        checked, found = check_tags(tags, path)
        problems += found
        if checked:
            if revision in out and out[revision] != checked:
                problems.append((path, "tags the same question as another entry, differently"))
            out[revision] = checked
    return dict(sorted(out.items())), problems


@dataclass
class QuestionSheet:
    """A CSV of questions and their tags, as a config's ``questions`` and ``question_tags``."""

    questions: list[str] = field(default_factory=list)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    problems: list[PathProblem] = field(default_factory=list)


def read_questions_csv(text: str, name: str = "CSV") -> QuestionSheet:
    """Rows of ``question`` (required) and any of the tag columns; every problem with its line."""
    sheet = QuestionSheet()
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))  # Excel writes a BOM
    columns = [c.strip() for c in (reader.fieldnames or [])]
    if CSV_QUESTION not in columns:
        sheet.problems.append(
            (f"{name} header", f"needs a {CSV_QUESTION!r} column; found {columns or 'none'}")
        )
        return sheet
    unknown = [c for c in columns if c not in (CSV_QUESTION, *TAG_KEYS)]
    if unknown:
        sheet.problems.append(
            (
                f"{name} header",
                f"unknown column(s) {', '.join(map(repr, unknown))}; allowed: "
                f"{CSV_QUESTION}, {', '.join(TAG_KEYS)}",
            )
        )
    for row in reader:
        line = reader.line_num
        cells = {(k or "").strip(): v for k, v in row.items()}
        if None in row:
            sheet.problems.append((f"{name} line {line}", "more cells than columns"))
            continue
        question = (cells.get(CSV_QUESTION) or "").strip()
        if not question:
            if any((v or "").strip() for v in cells.values()):
                sheet.problems.append((f"{name} line {line}", "tags without a question"))
            continue
        tags, found = check_tags(
            {k: v for k, v in cells.items() if k in TAG_KEYS}, f"{name} line {line}"
        )
        sheet.problems += found
        sheet.questions.append(question)
        if tags:
            if question in sheet.tags and sheet.tags[question] != tags:
                sheet.problems.append(
                    (
                        f"{name} line {line}",
                        f"question {_echo(question)} listed again, tagged differently",
                    )
                )
            sheet.tags[question] = tags
    return sheet


def sheet_changes(
    old_questions: list[str],
    old_tags: Mapping[str, Mapping[str, str]],
    sheet: QuestionSheet,
    normalise: Callable[[str], str],
) -> list[dict[str, Any]]:
    """What importing ``sheet`` over a config's questions changes: one row per question added,
    removed or re-tagged (the dry run's table)."""
    old = {normalise(q): q for q in old_questions}
    old_t = {normalise(q): dict(t) for q, t in old_tags.items()}
    new = {normalise(q): q for q in sheet.questions}
    new_t = {normalise(q): dict(t) for q, t in sheet.tags.items()}
    rows: list[dict[str, Any]] = []
    for key in [k for k in new if k not in old]:
        rows.append({"change": "added", "question": new[key], "tags": new_t.get(key, {})})
    for key in [k for k in old if k not in new]:
        rows.append({"change": "removed", "question": old[key], "tags": old_t.get(key, {})})
    for key in [k for k in new if k in old]:
        before, after = old_t.get(key, {}), new_t.get(key, {})
        if before != after:
            rows.append(
                {"change": "re-tagged", "question": new[key], "tags": after, "before": before}
            )
    return rows
