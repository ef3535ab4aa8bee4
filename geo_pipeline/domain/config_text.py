"""Normalisation of the text people write into a config (R1): NFKC, trimmed, whitespace
collapsed; and the character checks that keep a name or question matchable and legible."""

from __future__ import annotations

import hashlib
import re
import unicodedata


def control_char(text: str) -> str | None:
    """The first control character left in normalised text, as U+XXXX (PostgreSQL cannot store
    U+0000 and no engine should be asked one); None if there is none."""
    for ch in text:
        if unicodedata.category(ch) == "Cc":
            return f"U+{ord(ch):04X}"
    return None


# Characters that draw nothing: format characters (zero-width space and joiners, BOM, bidi
# controls, soft hyphen), separators, controls, private-use code points and lone surrogates, and
# the letters that are blank by design (Hangul fillers, the Braille blank). Not unassigned code
# points: to this Python they include emoji newer than its Unicode tables.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp", "Co", "Cs"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
# Inside a name, the joiners are writing (Persian, Indic scripts, emoji sequences), not padding.
_JOINERS = frozenset("\u200c\u200d")


def is_invisible(ch: str) -> bool:
    return unicodedata.category(ch) in _INVISIBLE_CATEGORIES or ch in _BLANK_LETTERS


def invisible_problem(text: str, what: str) -> str | None:
    """Why a normalised name cannot be matched in an answer or read by a person: it has no
    visible character (combining marks alone count as none), or is padded with or hides an
    invisible one. None when the text is fine (or empty: that has its own message)."""
    if not text:
        return None
    if all(is_invisible(ch) or unicodedata.category(ch) in ("Mn", "Me") for ch in text):
        codes = " ".join(f"U+{ord(ch):04X}" for ch in text[:5])
        return (
            f"{what} has only invisible characters ({codes}{' ...' if len(text) > 5 else ''}); "
            "give one a reader can see"
        )
    for where, ch in (("starts", text[0]), ("ends", text[-1])):
        if is_invisible(ch):
            return f"{what} {where} with the invisible character U+{ord(ch):04X}; remove it"
    for ch in text:
        if is_invisible(ch) and ch not in _JOINERS and ch != " ":
            return (
                f"{what} contains the invisible character U+{ord(ch):04X}, so it would never "
                "match an answer; remove it"
            )
    return None


def normalise_text(text: str) -> str:
    """NFKC (full-width -> half-width, compatibility forms) and trimmed, inner runs of
    whitespace collapsed to one space."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def question_revision(text: str) -> str:
    """Content address of a normalised question: editing the text makes a new revision."""
    return "q" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def normalise_domain(domain: str) -> str:
    d = normalise_text(domain).lower()
    d = re.sub(r"^[a-z]+://", "", d).split("/")[0]
    return d.removeprefix("www.").rstrip(".")


def unique_in_order(items: list[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return tuple(seen)
