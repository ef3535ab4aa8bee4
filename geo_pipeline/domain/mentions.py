"""Brand mention detection: which tracked brands an answer names, how often, where (R6, R22).

Pure: values in, values out; the analysis layer (geo_pipeline.analysis) runs it over stored
answers and records ``DETECTOR_VERSION`` beside every result, so a changed rule re-analyses
and keeps the history.

The rules, each tested in geo_pipeline_tests/unit/analysis/test_mentions.py:

* **Folding.** Text and names are compared after NFKC + case folding (full-width ``ＡＢＣ`` and
  ``ABC``, ``ﬁ`` and ``fi``, composed and decomposed accents are the same). Offsets reported to
  callers always refer to the *original* text.
* **Boundaries.** A name that begins (ends) with a Latin letter or digit matches only where the
  character before (after) it is not a Latin letter, digit or ``_`` -- so ``Manner`` does not match
  in ``mannerism``. Chinese (any non-Latin) names match anywhere: Chinese has no word boundaries,
  and a CJK character next to a Latin name counts as a boundary (``用了Notion做笔记``).
* **Overlaps.** Where two names overlap, the longest wins (then the earliest): ``瑞幸咖啡`` is one
  mention of the brand, not also one of ``瑞幸``; a competitor ``Apple Music`` is not a mention of
  a brand ``Apple``.
* **Ambiguity.** An alias claimed by two brands, an alias the caller declares ambiguous, a short
  alias (one CJK character, or two or fewer Latin characters) and an alias that is a common word
  (``COMMON_WORDS``) never count as a mention; a hit is reported (``ambiguous``) so a person
  decides (analysis state ``review``). A brand's own *name* is never judged a common word.
* **Code blocks.** Text inside fenced code blocks (```` ``` ```` or ``~~~``; an unclosed fence runs
  to the end) is not prose a reader takes as a recommendation -- ``pip install notion-client`` is
  not a mention. Inline code (`` `Notion` ``) is prose formatting and counts.
* **URLs.** A name inside a URL (``https://...``, ``www....``, a Markdown link target) is not a
  text mention; the link's visible text is -- a source list's titles (``[3] [瑞幸咖啡](https://...)``)
  included, as docs/analysts.md states. A brand's own domains are judged from the citations
  only, with ``cited`` (the answer points at it) and ``retrieved`` (the engine read it) apart.
* **Question echo.** Engines often open by repeating the question
  (``关于「瑞幸和星巴克哪个更适合学生?」，…``, ``Regarding “…”, …``). A brand named there was
  named by the user, not by the engine (DESIGN.md section 1: "do the *answers* mention me"), so
  the echo is skipped like code and URLs -- for counts, ranks and ambiguity alike. Given the
  question, an echo is (a) the question repeated with the same letters, digits and CJK
  characters in order, whatever the punctuation and spacing between them (``?``/``？``, quotes,
  spaces), after folding; or (b) a quoted span (``「」 『』 “” ‘’ ""``) whose letters are at
  least ``ECHO_SIMILARITY`` similar to the question's (a word dropped or changed). A question
  whose letters, less the tracked names in it, are fewer than ``ECHO_MIN_OTHER_CHARS``
  (``星巴克``, ``Starbucks or Luckin?``) is never treated as echoed: repeating it is naming them.
* **Position.** ``first_block`` is the 0-based index of the paragraph, list item or heading
  holding the first mention; ``position_bucket`` splits the folded text in thirds by the first
  mention's offset: top / middle / bottom. ``rank`` orders mentioned brands by first mention.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from functools import lru_cache
from operator import itemgetter
from typing import Literal, NamedTuple

import ahocorasick

from geo_pipeline.domain.config_model import Brand, NormalisedConfig

# mentions-2: the answer's echo of the question is not a mention (issue 34). A new version
# re-analyses every answer once (analysis.candidate_ids); the mentions-1 rows stay as history.
DETECTOR_VERSION = "mentions-2"

PositionBucket = Literal["top", "middle", "bottom"]

# Aliases that are ordinary words in the answers we sample: counting them would guess. Kept
# short and explicit; a config can declare more through ``ambiguous_aliases``.
COMMON_WORDS = frozenset(
    {
        "apple", "amazon", "apps", "app", "best", "blue", "coffee", "cloud", "delta", "dove",
        "edge", "express", "first", "focus", "fresh", "general", "go", "gap", "home", "meta",
        "mint", "notion", "one", "orange", "pilot", "prime", "shell", "smart", "square",
        "target", "tea", "the", "vision", "windows", "word",
        "咖啡", "奶茶", "手机", "电脑", "汽车", "茶", "云",
    }
)  # fmt: skip


# --------------------------------------------------------------------------- folding
def fold(text: str) -> str:
    """NFKC + case folding of a whole string (how names are compared)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


@lru_cache(maxsize=1)
def _fold_table() -> dict[int, str]:
    """code point -> folded form, for every code point of planes 0-2 whose fold differs.

    Built once per process (~0.1 s). ``str.translate`` with it folds a text in C; code points
    beyond plane 2 (tags, private use) have no NFKC or case mapping."""
    table: dict[int, str] = {}
    for cp in range(0x30000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        f = fold(c)
        if f != c:
            table[cp] = f
    return table


@dataclass(frozen=True)
class Folded:
    """A folded text and the way back from its offsets to the original's."""

    text: str
    _fold_starts: tuple[int, ...] = ()
    _fold_lens: tuple[int, ...] = ()
    _orig_idx: tuple[int, ...] = ()
    _full_map: tuple[int, ...] | None = None  # folded offset -> original offset (slow path)

    def to_original(self, offset: int) -> int:
        if self._full_map is not None:
            return self._full_map[offset]
        k = bisect_right(self._fold_starts, offset) - 1
        if k < 0:
            return offset
        start, length, orig = self._fold_starts[k], self._fold_lens[k], self._orig_idx[k]
        if offset < start + length:
            return orig  # inside the expansion of one original character
        return orig + 1 + (offset - start - length)


# Compatibility characters common in answers (full-width ASCII, ideographic and no-break
# spaces, ellipses, trade mark): folded on the fast path; anything rarer takes the general one.
_COMMON_COMPAT = re.compile("[\uff01-\uff5e\u3000\u00a0\u2026\u2025\u2122]")
# The most frequent of them in Chinese answers, one character for one: folded with
# str.replace (a C loop per character kind) before the per-match loop sees the rest.
_FREQUENT_COMPAT = tuple((c, unicodedata.normalize("NFKC", c)) for c in "，：；！？（）\u3000")


@lru_cache(maxsize=1)
def _common_compat_map() -> dict[str, str]:
    chars = [chr(cp) for cp in range(0xFF01, 0xFF5F)] + ["\u3000", "\u00a0", "\u2026", "\u2025"]
    return {c: fold(c) for c in [*chars, "\u2122"]}


def fold_with_offsets(text: str) -> Folded:
    """Fold ``text`` and keep a map of offsets back to it.

    Three paths give the same folded text (a property test holds them to ``fold``):
    ASCII -> ``lower()``; casefold + the common compatibility characters (full-width forms,
    ``…``) when that already yields NFKC text; otherwise per-character folding with a table,
    or, when combining marks compose, cluster by cluster (slow, rare)."""
    if text.isascii():
        return Folded(text.lower())
    cf = text.casefold()
    if len(cf) == len(text):
        pieces: list[str] = []
        starts: list[int] = []
        lens: list[int] = []
        origs: list[int] = []
        last = 0
        delta = 0
        cmap = _common_compat_map()
        for frequent, folded_form in _FREQUENT_COMPAT:
            cf = cf.replace(frequent, folded_form)  # one search when absent, like ``in``
        # Every _COMMON_COMPAT character is outside NFKC: a normalized text has none of them,
        # and is folded already (the usual Chinese answer, once its punctuation is replaced).
        if unicodedata.is_normalized("NFKC", cf):
            return Folded(cf)
        for m in _COMMON_COMPAT.finditer(cf):
            i = m.start()
            rep = cmap[m.group()]
            pieces.append(cf[last:i])
            pieces.append(rep)
            last = i + 1
            if len(rep) != 1:
                starts.append(i + delta)
                lens.append(len(rep))
                origs.append(i)
                delta += len(rep) - 1
        if pieces:
            pieces.append(cf[last:])
            cf = "".join(pieces)
        if unicodedata.is_normalized("NFKC", cf):
            return Folded(cf, tuple(starts), tuple(lens), tuple(origs))
    return _fold_general(text)


def _fold_general(text: str) -> Folded:
    table = _fold_table()
    folded = text.translate(table)
    if not unicodedata.is_normalized("NFKC", folded):
        return _fold_by_clusters(text)
    if len(folded) == len(text):
        return Folded(folded)
    starts: list[int] = []
    lens: list[int] = []
    origs: list[int] = []
    delta = 0
    for i, c in enumerate(text):
        rep = table.get(ord(c))
        if rep is not None and len(rep) != 1:
            starts.append(i + delta)
            lens.append(len(rep))
            origs.append(i)
            delta += len(rep) - 1
    return Folded(folded, tuple(starts), tuple(lens), tuple(origs))


def _fold_by_clusters(text: str) -> Folded:
    out: list[str] = []
    offsets: list[int] = []
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and unicodedata.combining(text[j]):
            j += 1
        piece = fold(text[i:j])
        out.append(piece)
        offsets.extend([i] * len(piece))
        i = j
    offsets.append(n)
    return Folded("".join(out), _full_map=tuple(offsets))


def _is_word_char(c: str) -> bool:
    """Latin-script (and Greek, Cyrillic, ...) letters, digits and ``_``: the characters a Latin
    name may not touch. CJK, kana and hangul (U+2E80 on) count as boundaries: Chinese text has
    no spaces around brand names."""
    return (c.isalnum() and c < "\u2e80") or c == "_"


# The same predicate as a set (~6,400 characters): one membership test per automaton hit in
# Matcher.find instead of two method calls and two comparisons.
_WORD_CHARS = frozenset(c for c in map(chr, range(0x2E80)) if _is_word_char(c))


# --------------------------------------------------------------------------- brand set
@dataclass(frozen=True)
class BrandSet:
    """The tracked brands of a run: the monitored brand first, then the competitors."""

    brands: tuple[Brand, ...]
    ambiguous_aliases: frozenset[str] = frozenset()

    def __hash__(self) -> int:
        # Hashed on every detect() call (the matcher cache key): compute once.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.brands, self.ambiguous_aliases))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def target(self) -> Brand:
        return self.brands[0]

    @staticmethod
    def from_config(config: NormalisedConfig, ambiguous_aliases: Iterable[str] = ()) -> BrandSet:
        return BrandSet(
            (config.brand, *config.competitors),
            frozenset(fold(a) for a in ambiguous_aliases),
        )


@dataclass(frozen=True, slots=True)
class _Pattern:
    length: int
    brands: tuple[int, ...]
    ambiguous: bool
    bound_start: bool
    bound_end: bool
    alias: str


# Which word boundaries a hit must be checked for, as the automaton value carries them.
_BOUND_START = 1
_BOUND_END = 2


def _alias_is_ambiguous(alias_folded: str, declared: frozenset[str]) -> bool:
    if alias_folded in declared or alias_folded in COMMON_WORDS:
        return True
    if any(_is_word_char(c) for c in alias_folded):
        return len(alias_folded.strip()) <= 2
    return len(alias_folded.strip()) <= 1


# Letters by frequency in English text, then digits; any other first character ranks last.
_LETTER_RANK = {c: i for i, c in enumerate("etaoinsrhldcumfpgwybvkxjqz0123456789")}


def _root_order(key: str) -> int:
    """Insertion order of names into an automaton, most frequent first letters first.

    pyahocorasick finds a node's child by a linear scan in insertion order, and most of an
    answer's characters are looked up at the root: frequent letters found early are ~10% of
    an English scan. Matching does not depend on the order."""
    return _LETTER_RANK.get(key[0], len(_LETTER_RANK))


Hit = tuple[int, int, _Pattern]  # (start, end, pattern) in the folded text


class Matcher:
    """One Aho-Corasick automaton over every name and alias of a brand set (one pass per
    answer, however many aliases). Build with ``matcher_for``, which caches it."""

    def __init__(self, brand_set: BrandSet):
        self.brand_set = brand_set
        owners: dict[str, list[int]] = {}
        is_name: dict[str, bool] = {}
        original: dict[str, str] = {}
        for bi, b in enumerate(brand_set.brands):
            for k, n in enumerate(b.names):
                key = fold(n).strip()
                if not key:
                    continue
                lst = owners.setdefault(key, [])
                if bi not in lst:
                    lst.append(bi)
                is_name[key] = is_name.get(key, False) or k == 0
                original.setdefault(key, n)
        self.automaton = ahocorasick.Automaton()
        # The ASCII names alone, for ASCII answers (no other name can occur in them): the
        # automaton looks a character up among a node's children one by one, so a root with
        # only the Latin names' first letters scans an English answer ~25% faster.
        self._ascii_automaton = ahocorasick.Automaton()
        for key in sorted(owners, key=_root_order):
            brands = owners[key]
            ambiguous = len(brands) > 1 or (
                not is_name[key] and _alias_is_ambiguous(key, brand_set.ambiguous_aliases)
            )
            if key in brand_set.ambiguous_aliases:
                ambiguous = True
            pat = _Pattern(
                length=len(key),
                brands=tuple(brands),
                ambiguous=ambiguous,
                bound_start=_is_word_char(key[0]),
                bound_end=_is_word_char(key[-1]),
                alias=original[key],
            )
            bounds = (_BOUND_START if pat.bound_start else 0) | (_BOUND_END if pat.bound_end else 0)
            # The automaton's value is a flat tuple: find() unpacks it for every hit.
            value = (pat.length - 1, bounds, pat)
            self.automaton.add_word(key, value)
            if key.isascii():
                self._ascii_automaton.add_word(key, value)
        if owners:
            self.automaton.make_automaton()
        if len(self._ascii_automaton):
            self._ascii_automaton.make_automaton()
        self._empty = not owners
        self._ascii_empty = not len(self._ascii_automaton)
        self._domains: dict[str, tuple[int, ...]] = {}
        for bi, b in enumerate(brand_set.brands):
            for d in b.domains:
                key = d.lower().rstrip(".")
                self._domains[key] = (*self._domains.get(key, ()), bi)
        self._owning: dict[str, tuple[int, ...]] = {}  # brands_owning, memoised per domain
        self.names = tuple(b.name for b in brand_set.brands)
        # Immutable facts of a brand that no answer mentions, shared instead of rebuilt.
        self.absent = tuple(
            BrandMention(b.name, bi == 0, False) for bi, b in enumerate(brand_set.brands)
        )

    def find(self, folded: str) -> list[Hit]:
        """Boundary-respecting, non-overlapping hits (start, end, pattern), longest first on
        overlaps (then earliest), in text order.

        The automaton reports every occurrence of every name, in order of end offset. A hit
        that touches a word character where its name needs a boundary is dropped *before*
        overlaps are settled: a longer name that fails its boundary never hides a shorter one
        that passes (``Acme`` in ``Acme Corporation`` with a name ``Acme Corp``)."""
        if folded.isascii():
            if self._ascii_empty:
                return []
            automaton = self._ascii_automaton
        elif self._empty:
            return []
        else:
            automaton = self.automaton
        last = len(folded) - 1
        word = _WORD_CHARS
        cands: list[Hit] = []
        prev_end = 0
        overlap = False
        for end_incl, (length_1, bounds, pat) in automaton.iter(folded):
            start = end_incl - length_1
            if bounds:
                if bounds & _BOUND_START and start and folded[start - 1] in word:
                    continue
                if bounds & _BOUND_END and end_incl < last and folded[end_incl + 1] in word:
                    continue
            # Each hit starting at or after the previous one's end means the list is already
            # in text order and disjoint (the usual case): nothing to sort or settle.
            if start < prev_end:
                overlap = True
            prev_end = end_incl + 1
            cands.append((start, prev_end, pat))
        if not overlap:
            return cands
        return _settle_overlaps(cands)

    def brands_owning(self, domain: str) -> tuple[int, ...]:
        """Brands whose configured domain is ``domain`` or one of its parent domains."""
        found = self._owning.get(domain)
        if found is not None:
            return found
        d = domain.lower().rstrip(".")
        found = ()
        while d:
            found += self._domains.get(d, ())
            _, _, d = d.partition(".")
        if len(self._owning) >= 4096:  # a bound on memory, not a hit-rate tuning
            self._owning.clear()
        self._owning[domain] = found
        return found


def _settle_overlaps(cands: list[Hit]) -> list[Hit]:
    """The longest of overlapping hits wins, then the earliest; a character taken by a winner
    cannot be part of another hit -- the greedy choice in that priority order over all hits.

    Settled cluster by cluster (a cluster: hits chained by overlaps): a hit's fate depends only
    on the hits it overlaps, all in its cluster, so the greedy choice within each cluster is the
    greedy choice over the whole text. Clusters are small (a name and the aliases it contains)."""
    cands.sort(key=_first)
    chosen: list[Hit] = []
    cluster = [cands[0]]
    cluster_end = cands[0][1]
    for c in cands[1:]:
        if c[0] < cluster_end:
            cluster.append(c)
            if c[1] > cluster_end:
                cluster_end = c[1]
            continue
        if len(cluster) == 1:
            chosen.append(cluster[0])
        else:
            _settle_cluster(cluster, chosen)
        cluster = [c]
        cluster_end = c[1]
    if len(cluster) == 1:
        chosen.append(cluster[0])
    else:
        _settle_cluster(cluster, chosen)
    return chosen


def _settle_cluster(cluster: list[Hit], chosen: list[Hit]) -> None:
    """Append the winners of one cluster (sorted by start) to ``chosen``, in text order."""
    if len(cluster) == 2:
        # Two hits of a cluster overlap: the longer wins, on equal length the earlier (two
        # hits with the same start and length are the same name: names are unique keys).
        (s1, e1, _), (s2, e2, _) = cluster
        chosen.append(cluster[0] if e1 - s1 >= e2 - s2 else cluster[1])
        return
    winners: list[Hit] = []
    for c in sorted(cluster, key=_priority):
        s, e = c[0], c[1]
        for w in winners:
            if s < w[1] and w[0] < e:
                break
        else:
            winners.append(c)
    winners.sort(key=_first)
    chosen.extend(winners)


def _priority(hit: Hit) -> tuple[int, int]:
    return (hit[0] - hit[1], hit[0])


_first = itemgetter(0)


@lru_cache(maxsize=256)
def matcher_for(brand_set: BrandSet) -> Matcher:
    return Matcher(brand_set)


# --------------------------------------------------------------------------- text structure
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[^\n]*$", re.MULTILINE)
# On folded text; a URL ends at whitespace, brackets, quotes, a comma or a CJK character.
_URL = re.compile(r"(?:[a-z][a-z0-9+.-]*://|www\.)[^\s<>()\[\]\"',\u2e80-\uffff]+|\]\([^)\s]*\)")
# A block starts after a blank line, at a list item (-, *, +, •, 1. 1) 1、) or at a heading.
# Every alternative begins with a newline, so the regex engine skips ahead to newlines.
_BLOCK_START = re.compile(r"\n(?:[ \t]*\n)+[ \t]*(?=\S)|\n[ \t]*(?=[-*+•][ \t]|\d+[.)、]|#)")


def _code_spans(folded: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    open_at: int | None = None
    marker = ""
    for m in _FENCE.finditer(folded):
        fence = m.group(1)
        if open_at is None:
            open_at, marker = m.start(), fence
        elif fence[0] == marker[0] and len(fence) >= len(marker):
            spans.append((open_at, m.end()))
            open_at = None
    if open_at is not None:
        spans.append((open_at, len(folded)))
    return spans


def _url_spans(folded: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _URL.finditer(folded)]


def _inside(spans: Sequence[tuple[int, int]], pos: int) -> bool:
    return any(s <= pos < e for s, e in spans)


def _block_starts(folded: str) -> list[int]:
    """Offsets where blocks (paragraphs, list items, headings) begin; block 0 is the first."""
    first = len(folded) - len(folded.lstrip())
    # Every match begins with a newline at or after ``first`` (a non-space) and ends before a
    # non-space: the ends rise strictly, each past the one before.
    return [first, *[m.end() for m in _BLOCK_START.finditer(folded, first)]]


def position_bucket(offset: int, length: int) -> PositionBucket:
    """Thirds of the answer by the first mention's offset."""
    if length <= 0 or offset * 3 < length:
        return "top"
    if offset * 3 < 2 * length:
        return "middle"
    return "bottom"


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CitationRef:
    """What the detector needs of a citation: cited (the answer points at it) or retrieved
    (the engine read it), and its registrable domain (or its URL when that is unknown)."""

    relation: Literal["cited", "retrieved"]
    domain: str | None = None
    url: str | None = None


class BrandMention(NamedTuple):
    """One tracked brand's facts in one answer (one row of geo.mentions). A NamedTuple: a
    detection builds one per tracked brand, and tuples are cheap to make."""

    brand: str
    is_target: bool
    mentioned: bool
    mention_count: int = 0
    first_offset: int | None = None  # in the original text
    rank: int | None = None
    first_block: int | None = None
    position_bucket: PositionBucket | None = None
    domain_cited: bool = False
    domain_retrieved: bool = False
    ambiguous: bool = False
    ambiguous_aliases: tuple[str, ...] = ()


# Builds a BrandMention from a tuple of all its fields without the keyword-argument call
# (~5x cheaper): detect() makes one per mentioned brand of every answer.
_new_tuple = tuple.__new__


@dataclass(frozen=True)
class Detection:
    detector_version: str
    mentions: tuple[BrandMention, ...]
    ambiguous_hits: tuple[str, ...] = field(default=())

    @property
    def needs_review(self) -> bool:
        """An ambiguous alias was seen: a person decides, the detector does not guess."""
        return bool(self.ambiguous_hits)

    def by_brand(self) -> dict[str, BrandMention]:
        return {m.brand: m for m in self.mentions}


def _host_of(url: str) -> str:
    rest = re.sub(r"^[a-z][a-z0-9+.-]*://", "", url.strip().lower())
    host = re.split(r"[/?#]", rest, maxsplit=1)[0].rsplit("@", 1)[-1].split(":")[0]
    return host.rstrip(".")


# --------------------------------------------------------------------------- question echo
# A quoted span whose letters are this similar (difflib ratio) to the question's is its echo.
ECHO_SIMILARITY = 0.8
# Fewer letters than this in the question outside its tracked names: never treated as echoed.
ECHO_MIN_OTHER_CHARS = 3
# Quoted spans, on folded text (NFKC keeps these quotes; full-width ＂ folds to ").
_QUOTED = re.compile(r"「[^「」\n]*」|『[^『』\n]*』|“[^“”\n]*”|‘[^‘’\n]*’|\"[^\"\n]*\"")
_NOT_LETTER = re.compile(r"[\W_]+")


class _Echo(NamedTuple):
    letters: str  # the folded question's letters, digits and CJK characters
    verbatim: re.Pattern[str]  # those letters in order, any non-letters between


@lru_cache(maxsize=1024)
def _echo_of(question: str, brand_set: BrandSet) -> _Echo | None:
    fq = fold(question)
    letters = _NOT_LETTER.sub("", fq)
    # The question's tracked names (any brand, ambiguous or not) do not count towards its
    # length: a question of names only, repeated, is the engine naming them.
    named = sum(len(_NOT_LETTER.sub("", fq[s:e])) for s, e, _ in matcher_for(brand_set).find(fq))
    if len(letters) - named < ECHO_MIN_OTHER_CHARS:
        return None
    return _Echo(letters, re.compile(r"[\W_]*".join(map(re.escape, letters))))


def _echo_spans(ftext: str, echo: _Echo) -> list[tuple[int, int]]:
    """Spans of the folded answer that repeat the question (see the module's rules)."""
    spans = [(m.start(), m.end()) for m in echo.verbatim.finditer(ftext)]
    n = len(echo.letters)
    for m in _QUOTED.finditer(ftext):
        if len(m.group()) - 2 < n // 2:
            continue  # far too short to be the question (a quoted name, a word)
        inner = _NOT_LETTER.sub("", m.group()[1:-1])
        if not n * 0.5 <= len(inner) <= n * 2:
            continue
        if inner == echo.letters or SequenceMatcher(None, inner, echo.letters).ratio() >= (
            ECHO_SIMILARITY
        ):
            spans.append((m.start(), m.end()))
    return spans


def _prose_hits(matcher: Matcher, ftext: str, question: str | None = None) -> list[Hit]:
    """The matcher's hits in a folded text, less those inside code blocks, URLs and the echo
    of ``question``."""
    hits = matcher.find(ftext)
    if hits and question:
        echo = _echo_of(question, matcher.brand_set)
        if echo is not None:
            spans = _echo_spans(ftext, echo)
            if spans:
                hits = [h for h in hits if not _inside(spans, h[0])]
    # Fences and URLs need these substrings; a one-character test first (memchr) spares most
    # answers the substring searches.
    if hits and (("`" in ftext and "```" in ftext) or ("~" in ftext and "~~~" in ftext)):
        code = _code_spans(ftext)
        hits = [h for h in hits if not _inside(code, h[0])]
    if hits and (
        ("/" in ftext and "://" in ftext) or ("]" in ftext and "](" in ftext) or "www." in ftext
    ):
        urls = _url_spans(ftext)
        hits = [h for h in hits if not _inside(urls, h[0])]
    return hits


def detect(
    text: str,
    brand_set: BrandSet,
    citations: Iterable[CitationRef] = (),
    question: str | None = None,
) -> Detection:
    """Mention facts for every tracked brand (in ``brand_set`` order, mentioned or not).
    ``question``: the question the answer replies to; its echo in the answer is not counted."""
    matcher = matcher_for(brand_set)
    folded = fold_with_offsets(text)
    ftext = folded.text
    hits = _prose_hits(matcher, ftext, question)

    # Per brand index: mention count (dict order: order of first mention), and each brand's
    # first offset in that order; ambiguous aliases per brand index.
    seen: dict[int, int] = {}
    firsts: list[int] = []
    amb: dict[int, list[str]] = {}
    ambiguous_hits: list[str] = []
    for start, _end, pat in hits:
        if pat.ambiguous:
            ambiguous_hits.append(pat.alias)
            for bi in pat.brands:
                lst = amb.setdefault(bi, [])
                if pat.alias not in lst:
                    lst.append(pat.alias)
            continue
        bi = pat.brands[0]
        if bi in seen:
            seen[bi] += 1
        else:
            seen[bi] = 1
            firsts.append(start)  # hits come in text order: the first is the first mention

    cited: set[int] = set()
    retrieved: set[int] = set()
    for c in citations:
        dom = c.domain or (_host_of(c.url) if c.url else "")
        if dom:
            (cited if c.relation == "cited" else retrieved).update(matcher.brands_owning(dom))

    out = list(matcher.absent)
    names = matcher.names
    for bi in {*amb, *cited, *retrieved} - seen.keys():
        out[bi] = BrandMention(
            brand=names[bi],
            is_target=bi == 0,
            mentioned=False,
            domain_cited=bi in cited,
            domain_retrieved=bi in retrieved,
            ambiguous=bi in amb,
            ambiguous_aliases=tuple(amb.get(bi, ())),
        )
    if seen:
        blocks = _block_starts(ftext)
        # Thirds of the text as position_bucket() cuts them; the text holds a mention, so its
        # stripped length is positive.
        third = len(ftext.rstrip())
        two_thirds = 2 * third
        shifted = bool(folded._fold_starts) or folded._full_map is not None
        # dicts keep insertion order, and brands were inserted in order of first mention.
        for r, ((bi, count), f) in enumerate(zip(seen.items(), firsts, strict=True), start=1):
            f3 = f * 3
            # Positional, in BrandMention's field order: one is built per mentioned brand.
            out[bi] = _new_tuple(
                BrandMention,
                (
                    names[bi],  # brand
                    bi == 0,  # is_target
                    True,  # mentioned
                    count,  # mention_count
                    folded.to_original(f) if shifted else f,  # first_offset
                    r,  # rank
                    max(0, bisect_right(blocks, f) - 1),  # first_block
                    "top" if f3 < third else "middle" if f3 < two_thirds else "bottom",
                    bi in cited,  # domain_cited
                    bi in retrieved,  # domain_retrieved
                    bi in amb,  # ambiguous
                    tuple(amb[bi]) if bi in amb else (),  # ambiguous_aliases
                ),
            )
    return Detection(DETECTOR_VERSION, tuple(out), tuple(dict.fromkeys(ambiguous_hits)))


# --------------------------------------------------------------------------- analysis verdict
# Invalid answers a person should look at before they are dropped: a truncated answer may
# still say enough to count (R22 "truncated" is a judgement on the text's end, not its body).
# Every other invalid reason (empty, login/error/captcha page, refusal, too short) is final.
REVIEW_INVALID_REASONS = frozenset({"truncated"})
# The review reason of an invalid answer a person is to confirm: it stays an invalid answer (in no
# rate) in every count a person reads (domain.words.analysis_text).
INVALID_REVIEW_PREFIX = "invalid_answer_needs_review:"

AnalysisState = Literal["accepted", "review", "failed"]


@dataclass(frozen=True)
class Verdict:
    """What the analysis of one answer concludes (R6), and whether its mention facts are
    recorded (they are whenever the detector ran)."""

    state: AnalysisState
    reason: str | None
    run_detector: bool


def verdict_for(validity: str, validity_reason: str | None) -> Verdict:
    """Before detection: a valid answer is analysed; an invalid one is analysed for a reviewer
    when its reason is doubtful, else the analysis fails with the validity reason (and no mention
    facts: an error page mentions nothing, it is simply not evidence)."""
    if validity == "valid":
        return Verdict("accepted", None, True)
    why = validity_reason or "unknown"
    if why in REVIEW_INVALID_REASONS:
        return Verdict("review", f"{INVALID_REVIEW_PREFIX}{why}", True)
    return Verdict("failed", f"invalid_answer:{why}", False)


def conclude(verdict: Verdict, detection: Detection | None) -> Verdict:
    """After detection: an ambiguous alias sends an otherwise accepted answer to review."""
    if verdict.state == "accepted" and detection is not None and detection.needs_review:
        aliases = ", ".join(detection.ambiguous_hits)
        return Verdict("review", f"ambiguous_alias:{aliases}"[:500], True)
    return verdict


def mention_spans(
    text: str, brand_set: BrandSet, question: str | None = None
) -> dict[str, tuple[tuple[int, int], ...]]:
    """Every counted mention of each mentioned brand as (start, end) offsets in the original
    text -- the same hits ``detect`` counts (ambiguous aliases, code, URLs and the echo of
    ``question`` excluded), for detectors that read the words around a mention
    (geo_pipeline.domain.stance)."""
    matcher = matcher_for(brand_set)
    folded = fold_with_offsets(text)
    shifted = bool(folded._fold_starts) or folded._full_map is not None
    out: dict[str, list[tuple[int, int]]] = {}
    for start, end, pat in _prose_hits(matcher, folded.text, question):
        if pat.ambiguous:
            continue
        if shifted:
            span = (folded.to_original(start), folded.to_original(end - 1) + 1)
        else:
            span = (start, end)
        out.setdefault(matcher.names[pat.brands[0]], []).append(span)
    return {b: tuple(v) for b, v in out.items()}
