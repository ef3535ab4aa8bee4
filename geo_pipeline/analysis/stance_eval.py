"""Scoring a stance detector against a labelled set (issue 37 item 5): precision, recall and F1
per stance class, overall and per language, and the attributes' micro-F1.

The set is JSON Lines, one mention context a line::

    {"id": "...", "lang": "zh" | "en", "brand": "...", "context": "...",
     "stance": "recommended" | "neutral" | "cautioned" | "negative",
     "attributes": ["price", ...], "note": "..."}

Each context is judged as an answer: the tracked brands are every ``brand`` named in the set
(so the other brands of a context are known to the detector, as a run's competitors are), their
spans found by ``mentions.mention_spans``; a target the matcher does not count (a short or
common-word name) falls back to its literal occurrences, and a target absent from its context is
scored ``neutral`` with no attributes and counted in ``target_not_found``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geo_pipeline.domain.config_model import Brand
from geo_pipeline.domain.mentions import BrandSet, mention_spans
from geo_pipeline.domain.stance import ATTRIBUTES, BASELINE, STANCES, Span, StanceDetector

LANGS = ("zh", "en")


class EvalSetError(ValueError):
    """A line of the labelled set that does not follow the format."""


@dataclass(frozen=True)
class Item:
    id: str
    lang: str
    brand: str
    context: str
    stance: str
    attributes: frozenset[str]


def load(path: Path) -> list[Item]:
    items: list[Item] = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalSetError(f"{path}:{no}: not JSON ({e.msg})") from e
        items.append(_item(d, f"{path}:{no}"))
    return items


def _item(d: Any, where: str) -> Item:
    if not isinstance(d, dict):
        raise EvalSetError(f"{where}: a line is one JSON object, got {type(d).__name__}")
    for key in ("id", "lang", "brand", "context", "stance"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise EvalSetError(
                f"{where}: field {key!r} must be a non-empty string, got {d.get(key)!r}"
            )
    if d["lang"] not in LANGS:
        raise EvalSetError(f"{where}: field 'lang' = {d['lang']!r}; allowed: {', '.join(LANGS)}")
    if d["stance"] not in STANCES:
        raise EvalSetError(
            f"{where}: field 'stance' = {d['stance']!r}; allowed: {', '.join(STANCES)}"
        )
    attrs = d.get("attributes", [])
    if not isinstance(attrs, list) or any(a not in ATTRIBUTES for a in attrs):
        raise EvalSetError(
            f"{where}: field 'attributes' = {attrs!r}; allowed: a list of {', '.join(ATTRIBUTES)}"
        )
    return Item(d["id"], d["lang"], d["brand"], d["context"], d["stance"], frozenset(attrs))


@dataclass
class Scores:
    """Predictions beside labels; everything printed is derived from these lists."""

    items: list[Item] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    predicted_attrs: list[frozenset[str]] = field(default_factory=list)
    target_not_found: int = 0


def _literal_spans(text: str, name: str) -> list[Span]:
    low, key = text.casefold(), name.casefold()
    out: list[Span] = []
    i = low.find(key) if len(low) == len(text) and key else -1
    while i >= 0:
        out.append((i, i + len(key)))
        i = low.find(key, i + len(key))
    return out


def predict(items: Iterable[Item], detector: StanceDetector = BASELINE) -> Scores:
    items = list(items)
    names = list(dict.fromkeys(i.brand for i in items))
    brand_set = BrandSet(tuple(Brand(name=n) for n in names))
    out = Scores(items)
    for it in items:
        spans: dict[str, list[Span]] = {
            b: list(v) for b, v in mention_spans(it.context, brand_set).items()
        }
        if it.brand not in spans:
            literal = _literal_spans(it.context, it.brand)
            if literal:
                spans[it.brand] = literal
        if it.brand not in spans:
            out.target_not_found += 1
            out.predicted.append("neutral")
            out.predicted_attrs.append(frozenset())
            continue
        got = detector.detect(it.context, spans)[it.brand]
        out.predicted.append(got.stance)
        out.predicted_attrs.append(frozenset(got.attributes))
    return out


def _prf(tp: int, fp: int, fn: int) -> tuple[float | None, float | None, float | None]:
    p = tp / (tp + fp) if tp + fp else None
    r = tp / (tp + fn) if tp + fn else None
    f = 2 * p * r / (p + r) if p is not None and r is not None and p + r else None
    return p, r, f


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def class_rows(s: Scores) -> list[dict[str, object]]:
    """Per language (and all) x stance: support, predicted, precision, recall, F1; plus the
    accuracy and macro-F1 of each language."""
    rows: list[dict[str, object]] = []
    for lang in ("all", *LANGS):
        idx = [k for k, it in enumerate(s.items) if lang == "all" or it.lang == lang]
        if not idx:
            continue
        f1s: list[float] = []
        for c in STANCES:
            tp = sum(1 for k in idx if s.items[k].stance == c and s.predicted[k] == c)
            fp = sum(1 for k in idx if s.items[k].stance != c and s.predicted[k] == c)
            fn = sum(1 for k in idx if s.items[k].stance == c and s.predicted[k] != c)
            p, r, f = _prf(tp, fp, fn)
            if tp + fp + fn:  # macro-F1 over the classes present (labelled or predicted)
                f1s.append(f or 0.0)
            rows.append(
                {"lang": lang, "class": c, "support": tp + fn, "predicted": tp + fp,
                 "precision": _fmt(p), "recall": _fmt(r), "f1": _fmt(f)}
            )  # fmt: skip
        acc = sum(1 for k in idx if s.items[k].stance == s.predicted[k]) / len(idx)
        rows.append(
            {"lang": lang, "class": "(accuracy / macro-F1)", "support": len(idx), "predicted": "",
             "precision": "", "recall": _fmt(acc), "f1": _fmt(sum(f1s) / len(f1s))}
        )  # fmt: skip
    return rows


def attribute_rows(s: Scores) -> list[dict[str, object]]:
    """Attribute micro precision/recall/F1 per language (and all), over (context, attribute)."""
    rows: list[dict[str, object]] = []
    for lang in ("all", *LANGS):
        c: Counter[str] = Counter()
        for it, pred in zip(s.items, s.predicted_attrs, strict=True):
            if lang != "all" and it.lang != lang:
                continue
            c["n"] += 1
            c["tp"] += len(it.attributes & pred)
            c["fp"] += len(pred - it.attributes)
            c["fn"] += len(it.attributes - pred)
        if not c["n"]:
            continue
        p, r, f = _prf(c["tp"], c["fp"], c["fn"])
        rows.append(
            {"lang": lang, "contexts": c["n"], "labelled": c["tp"] + c["fn"],
             "predicted": c["tp"] + c["fp"], "micro_precision": _fmt(p), "micro_recall": _fmt(r),
             "micro_f1": _fmt(f)}
        )  # fmt: skip
    return rows


def print_table(rows: list[dict[str, object]], title: str) -> None:
    cols = list(rows[0]) if rows else []
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print(f"\n{title}")
    print("  ".join(c.ljust(widths[c]) for c in cols))
    print("  ".join("-" * widths[c] for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))


def report(path: Path, detector: StanceDetector = BASELINE) -> Scores:
    s = predict(load(path), detector)
    print(f"stance detector {detector.version} on {path.name}: {len(s.items)} contexts, "
          f"target not found in {s.target_not_found}")  # fmt: skip
    print_table(class_rows(s), "Stance: precision / recall / F1 per class")
    print_table(attribute_rows(s), "Attributes: micro-averaged over (context, attribute)")
    return s
