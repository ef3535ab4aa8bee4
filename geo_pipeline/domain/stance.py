"""Stance per brand mention: what an answer says about each brand it names (issue 37 item 5).

For each mentioned brand of an answer: a stance ``recommended | neutral | cautioned |
negative`` and the attributes the answer ties to that brand (price, quality, service, ...), in
Chinese and English. Pure: values in, values out; the analysis layer records
``STANCE_VERSION`` beside every result (like ``mentions.DETECTOR_VERSION``), so a changed rule
or lexicon is re-computed over history without touching the mention facts.

Detectors share one interface (``StanceDetector``): given the answer text and each mentioned
brand's spans (``mentions.mention_spans``, the hits ``mentions.detect`` counts), a
``MentionStance`` per brand. This module ships the rule-and-lexicon baseline
(``LexiconStanceDetector``); an LLM judge would implement the same protocol.

The baseline's rules, each tested in geo_pipeline_tests/unit/analysis/test_stance.py:

* **Scope.** The text is cut into sentences (``。！？；!?;`` and ``. `` / line ends) and each
  sentence into clauses (commas, colons, and contrast words ``but / however / although / 但是 /
  不过 / 虽然 ...``). A clause belongs to the brands it names; a clause naming none belongs to
  the brands of the clause before it in the same block ("Luckin is cheap, but it can be slow"),
  or, at a block's start, to those of the next clause ("Although cheap, Luckin ..."). A block
  ends at a blank line or a heading. The stance of a brand is read only from its own clauses.
* **Several brands in one clause** are split at each brand, unless only a coordinator stands
  between them (``and / or / 和 / 与 / 、``): "推荐A和B" recommends both, "A is great and B is
  awful" does not.
* **Comparatives.** ``A better/cheaper than B``, ``A over B``, ``A优于B``, ``A比B好``: the
  winner takes the comparison's polarity, the loser is cautioned; ``worse than`` / ``不如`` the
  other way round.
* **Negation.** A negator just before a cue flips it: ``not recommended / 不推荐`` is negative,
  ``not expensive / 不贵`` is favourable, ``not the best`` cautions.
* **Contrast.** Favourable and unfavourable cues about one brand -- typically around ``but /
  但是 / 不过`` -- make it ``cautioned``; a contrast word opening a clause that follows a
  favourable one about the same brand cautions by itself.
* **Ranking.** ``#1 / number one / top pick / 首选 / 第一`` and a brand opening list item 1 are
  recommendations.
* **Verdict.** Unfavourable only: ``negative`` when a strong negative cue (avoid, scandal, 不推荐,
  踩雷) is present, else ``cautioned``; favourable and unfavourable: ``cautioned`` (``negative``
  when the strong negatives outweigh); favourable only: ``recommended``; none: ``neutral``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

STANCE_VERSION = "stance-lexicon-1"

Stance = Literal["recommended", "neutral", "cautioned", "negative"]
STANCES: tuple[Stance, ...] = ("recommended", "neutral", "cautioned", "negative")
ATTRIBUTES = (
    "price", "quality", "service", "taste", "convenience", "availability", "safety",
    "sustainability", "brand_reputation", "design", "other",
)  # fmt: skip

Span = tuple[int, int]


@dataclass(frozen=True)
class MentionStance:
    """One brand's stance in one answer, and the attributes the answer ties to it."""

    brand: str
    stance: Stance
    attributes: tuple[str, ...] = ()


class StanceDetector(Protocol):
    """Stance of every mentioned brand of one answer. ``spans`` maps each mentioned brand to
    its mentions' (start, end) offsets in ``text`` (``mentions.mention_spans``)."""

    version: str

    def detect(
        self, text: str, spans: Mapping[str, Sequence[Span]]
    ) -> dict[str, MentionStance]: ...  # pragma: no cover


# --------------------------------------------------------------------------- lexicon
# Cue kinds: R recommendation (strong favourable), P favourable, C caution, N strong negative.
# Latin entries match on word boundaries, Chinese ones anywhere; the longest match wins, so
# explicit negated phrases (不推荐, 不错) take precedence over their parts.
# fmt: off
_CUES: dict[str, tuple[str, ...]] = {
    "R": (
        "recommend", "recommended", "recommends", "highly recommend", "top pick", "top choice",
        "best choice", "first choice", "go-to", "#1", "no. 1", "number one", "the best",
        "best option", "must-try", "must try", "worth it", "worth trying", "worth a try",
        "ideal", "excellent", "outstanding", "top-rated", "best overall", "your best bet",
        "推荐", "首选", "首推", "强烈推荐", "最佳", "最好", "值得", "必选", "不二之选", "第一",
        "优选", "首屈一指", "力荐", "必喝", "必吃", "必买", "冠军",
    ),
    "P": (
        "good", "great", "reliable", "popular", "solid", "affordable", "high quality",
        "high-quality", "fast", "friendly", "delicious", "tasty", "convenient", "strong",
        "well-known", "trusted", "consistent", "fresh", "smooth", "generous", "cheap", "love",
        "favorite", "favourite", "impressive", "premium", "good value", "value for money",
        "better", "cheaper", "faster", "tastier", "nicer", "superior", "更好", "更便宜", "更快",
        "不错", "好喝", "好吃", "优秀", "可靠", "受欢迎", "出色", "优质", "实惠", "便宜",
        "方便", "便捷", "靠谱", "性价比高", "口碑好", "口碑不错", "好评", "稳定", "新鲜",
        "喜欢", "划算", "亲民", "贴心", "好", "优", "佳",
    ),
    "C": (
        "expensive", "pricey", "overpriced", "limited", "downside", "drawback", "drawbacks",
        "be aware", "beware", "note that", "keep in mind", "caution", "crowded", "slow",
        "inconsistent", "mixed reviews", "mixed", "average", "mediocre", "less", "fewer",
        "hard to find", "long queues", "long lines", "wait times", "can be", "may be",
        "not for everyone", "cons", "weaker", "worse", "slower", "inferior", "pricier", "偏贵",
        "较贵", "贵", "有限", "缺点", "不足", "注意", "需要注意", "排队", "谨慎", "慎重",
        "一般", "略", "稍", "偏", "参差", "不稳定", "较少", "少", "有待", "欠佳", "见仁见智",
        "评价不一", "褒贬不一", "不如", "较慢", "慢", "局限",
    ),
    "N": (
        "avoid", "not recommended", "don't recommend", "do not recommend", "wouldn't recommend",
        "would not recommend", "poor", "bad", "terrible", "awful", "worst", "scandal",
        "scandals", "recall", "recalled", "unsafe", "complaints", "lawsuit", "fraud",
        "disappointing", "stay away", "steer clear", "not worth", "rip-off", "contaminated",
        "不推荐", "不建议", "避免", "别买", "踩雷", "翻车", "最差", "劣质", "糟糕", "差",
        "投诉", "丑闻", "召回", "造假", "不值", "不值得", "避雷", "不要买", "问题频发",
        "食品安全问题", "不太推荐",
    ),
}
# fmt: on
# A favourable word that is itself a negation must not be flipped by its own characters.
_NEGATORS_EN = re.compile(r"\b(?:not|never|no|hardly|isn't|aren't|wasn't|don't|doesn't|n't)\b")
_NEGATORS_ZH = ("不", "没", "别", "未", "无", "非")

# fmt: off
_ATTRS: dict[str, tuple[str, ...]] = {
    "price": (
        "price", "prices", "priced", "pricing", "cheap", "cheaper", "expensive", "affordable",
        "cost", "costs", "pricey", "overpriced", "value for money", "budget", "discount",
        "discounts", "coupon", "coupons", "good value", "value", "pricier", "价格", "价位",
        "便宜", "贵", "实惠", "性价比", "优惠", "划算", "折扣", "券", "亲民", "花费", "元",
    ),
    "quality": (
        "quality", "durable", "well-made", "build", "reliable", "reliability", "consistent",
        "inconsistent", "premium", "质量", "品质", "耐用", "做工", "品控", "可靠", "稳定",
    ),
    "service": (
        "service", "staff", "support", "customer service", "barista", "baristas", "after-sales",
        "服务", "客服", "售后", "店员", "态度",
    ),
    "taste": (
        "taste", "tastes", "flavor", "flavour", "flavors", "flavours", "delicious", "tasty",
        "bitter", "sweet", "smooth", "aroma", "口味", "口感", "味道", "好喝", "好吃", "香",
        "苦", "甜", "风味", "醇",
    ),
    "convenience": (
        "convenient", "convenience", "fast", "quick", "app", "delivery", "easy", "ordering",
        "mobile order", "pickup", "方便", "便捷", "快", "外卖", "小程序", "配送", "点单",
        "自提",
    ),
    "availability": (
        "available", "availability", "in stock", "out of stock", "sold out", "stores",
        "locations", "widely", "everywhere", "outlets", "hard to find", "门店", "覆盖",
        "买不到", "缺货", "售罄", "有售", "网点", "随处", "遍布",
    ),
    "safety": (
        "safe", "safety", "unsafe", "recall", "recalled", "contamination", "contaminated",
        "hygiene", "food safety", "安全", "卫生", "召回", "食品安全", "添加剂",
    ),
    "sustainability": (
        "sustainable", "sustainability", "eco-friendly", "environment", "environmental",
        "recycled", "recyclable", "carbon", "ethical", "fair trade", "fairtrade", "organic",
        "环保", "可持续", "低碳", "公益", "有机", "公平贸易",
    ),
    "brand_reputation": (
        "reputation", "trusted", "well-known", "famous", "scandal", "scandals", "iconic",
        "heritage", "popular", "口碑", "知名", "信誉", "老牌", "丑闻", "受欢迎", "名气", "大牌",
    ),
    "design": (
        "design", "designed", "look", "looks", "packaging", "style", "stylish", "interior",
        "ambience", "ambiance", "atmosphere", "decor", "aesthetic", "设计", "外观", "包装",
        "颜值", "装修", "氛围", "风格",
    ),
}
# fmt: on

_CONTRAST_EN = ("but", "however", "although", "though", "while", "whereas", "yet")
_CONTRAST_ZH = ("但是", "不过", "然而", "可是", "虽然", "尽管", "只是", "但")
_COORD_PUNCT = "[\\s*_`\"'“”‘’()（）/&、,，]*"
_COORD = re.compile(f"^{_COORD_PUNCT}(?:and|or|as well as|以及|和|与|及|或|跟|、)?{_COORD_PUNCT}$")

_LATIN = re.compile(r"[a-z0-9]")


def _term_pattern(term: str) -> str:
    # The start boundary is checked by _starts_word after the match: a look-behind in front of
    # the alternatives would stop the regex engine from skipping to their possible first chars.
    end = r"(?![a-z0-9])" if _LATIN.match(term[-1]) else ""
    return re.escape(term) + end


def _starts_word(text: str, m: re.Match[str]) -> bool:
    """A Latin term matched where a word starts (not ``good`` in ``feelgood``)."""
    i = m.start()
    return not (i and _LATIN.match(m.group()[0]) and _LATIN.match(text[i - 1]))


def _alternation(terms: Sequence[str]) -> str:
    return "|".join(_term_pattern(t) for t in sorted(set(terms), key=len, reverse=True))


_CUE_KIND: dict[str, str] = {}
for _kind, _terms in _CUES.items():
    for _t in _terms:
        _CUE_KIND.setdefault(_t, _kind)
_CUE_RE = re.compile(_alternation(list(_CUE_KIND)))
# One pass per text: every attribute term in one alternation, each term -> its attributes.
_ATTR_OF: dict[str, set[str]] = {}
for _a, _terms in _ATTRS.items():
    for _t in _terms:
        _ATTR_OF.setdefault(_t, set()).add(_a)
_ATTR_RE = re.compile(_alternation(list(_ATTR_OF)))

# Sentence ends; a Latin full stop only before whitespace or the end (not in 3.5 or v1.2).
_SENTENCE_END = re.compile(r"[。！？；!?;]+|\.(?=\s|$)|\n")
_BLOCK_BREAK = re.compile(r"\n[ \t]*\n|\n[ \t]*#")
_CLAUSE_BREAK = re.compile(
    r"[,，:：—–()（）]|(?<![a-z0-9])(?:"
    + "|".join(_CONTRAST_EN)
    + r")(?![a-z0-9])|"
    + "|".join(_CONTRAST_ZH)
)
_CONTRAST_START = re.compile(
    r"^[\s,，]*(?:(?:" + "|".join(_CONTRAST_EN) + r")(?![a-z0-9])|" + "|".join(_CONTRAST_ZH) + ")"
)
# Comparators between two brands of one clause: (pattern, where the polarity is read).
_COMPARE_THAN = re.compile(
    r"(?<![a-z0-9])(?:than|over|instead of|rather than|compared to|compared with)(?![a-z0-9])"
)
_COMPARE_ZH_WIN = re.compile("优于|胜过|强于|好于|超过|领先于|领先")
_COMPARE_ZH_LOSE = re.compile("不如|逊于|落后于|比不上|弱于")
_COMPARE_ZH_BI = re.compile("比")
_LIST_ONE = re.compile(r"(?:^|\n)[ \t]*(?:1[.)、]|#1|第一[，,、:：.]?)\s*(?:\*\*)?\s*$")


@dataclass
class _Score:
    fav: int = 0
    unfav: int = 0
    strong_neg: int = 0

    def add(self, other: _Score) -> None:
        self.fav += other.fav
        self.unfav += other.unfav
        self.strong_neg += other.strong_neg


def _negated(text: str, start: int, floor: int) -> bool:
    """A negator just before ``text[start:]`` (not before ``floor``, the previous cue's end)."""
    before = text[max(floor, start - 4) : start]
    if any(n in before for n in _NEGATORS_ZH):
        return True
    words = text[max(floor, start - 24) : start]
    return bool(_NEGATORS_EN.search(" ".join(words.split()[-3:])))


def _score(text: str) -> _Score:
    s = _Score()
    floor = 0
    for m in _CUE_RE.finditer(text):
        if not _starts_word(text, m):
            continue
        kind = _CUE_KIND[m.group()]
        neg = _negated(text, m.start(), floor)
        floor = m.end()
        if neg:
            # not recommended -> negative; not good -> caution; not expensive / not bad -> fav.
            kind = {"R": "N", "P": "C", "C": "P", "N": "P"}[kind]
        if kind == "R" or kind == "P":
            s.fav += 2 if kind == "R" else 1
        elif kind == "C":
            s.unfav += 1
        else:
            s.unfav += 1
            s.strong_neg += 1
    return s


def _polarity(text: str) -> int:
    s = _score(text)
    return (s.fav > s.unfav) - (s.unfav > s.fav)


def _attributes(text: str) -> set[str]:
    found: set[str] = set()
    for m in _ATTR_RE.finditer(text):
        if _starts_word(text, m):
            found |= _ATTR_OF[m.group()]
    return found


# --------------------------------------------------------------------------- segmentation
@dataclass
class _Clause:
    start: int
    end: int
    block: int
    brands: dict[str, list[Span]]  # brands named in the clause, with their spans


def _clauses(folded: str, spans: Mapping[str, Sequence[Span]]) -> list[_Clause]:
    blocks = [0, *(m.start() + 1 for m in _BLOCK_BREAK.finditer(folded))]
    cuts = {0, len(folded)}
    cuts.update(m.end() for m in _SENTENCE_END.finditer(folded))
    cuts.update(m.start() for m in _CLAUSE_BREAK.finditer(folded))
    # Never cut inside a brand name (a name may hold a comma or a "but").
    hits = sorted((sp, brand) for brand, v in spans.items() for sp in v)
    covered: set[int] = set()
    for (s, e), _ in hits:
        covered.update(range(s + 1, e))
    points = sorted(cuts - covered)
    out: list[_Clause] = []
    bi = 0
    hi = 0
    for a, b in itertools.pairwise(points):
        named: dict[str, list[Span]] = {}
        while hi < len(hits) and hits[hi][0][0] < b:
            sp, brand = hits[hi]
            if sp[0] >= a:
                named.setdefault(brand, []).append(sp)
            hi += 1
        if not named and not folded[a:b].strip(" \t\n,，:：.。"):
            continue
        while bi + 1 < len(blocks) and blocks[bi + 1] <= a:
            bi += 1
        out.append(_Clause(a, b, bi, named))
    return out


def _owned_text(folded: str, clause: _Clause, target: str) -> tuple[str, _Score | None]:
    """The part of a clause about ``target`` and, for a comparative, its fixed score."""
    text = folded[clause.start : clause.end]
    if len(clause.brands) == 1:
        return text, None
    # Mentions in order; groups of brands joined only by coordinators share the clause's words.
    hits = sorted((sp[0], sp[1], b) for b, v in clause.brands.items() for sp in v)
    groups: list[list[tuple[int, int, str]]] = [[hits[0]]]
    for h in hits[1:]:
        prev = groups[-1][-1]
        if _COORD.match(folded[prev[1] : h[0]]) or h[2] == prev[2]:
            groups[-1].append(h)
        else:
            groups.append([h])
    idx = next(i for i, g in enumerate(groups) if any(h[2] == target for h in g))
    g = groups[idx]
    # Comparative between this group and a neighbour.
    for j in (idx - 1, idx + 1):
        if not 0 <= j < len(groups):
            continue
        first, second = (groups[j], g) if j < idx else (g, groups[j])
        between = folded[first[-1][1] : second[0][0]]
        seg_start = clause.start if first is groups[0] else first[0][0]
        head = folded[seg_start : first[0][0]] + between
        tail = folded[second[-1][1] : clause.end]
        winner_pol = 0
        if _COMPARE_THAN.search(between):
            winner_pol = _polarity(between[: _COMPARE_THAN.search(between).start()])  # type: ignore[union-attr]
        elif _COMPARE_ZH_LOSE.search(between):
            winner_pol = -1
        elif _COMPARE_ZH_WIN.search(between):
            winner_pol = 1
        elif _COMPARE_ZH_BI.search(between):
            winner_pol = _polarity(tail)
        else:
            continue
        if winner_pol == 0:
            continue
        # winner_pol > 0: the first is the better one; < 0: the second is.
        is_first = g is first
        better = (winner_pol > 0) == is_first
        words = head + tail
        return words, _Score(fav=2, unfav=0) if better else _Score(fav=0, unfav=1)
    start = clause.start if idx == 0 else g[0][0]
    end = clause.end if idx == len(groups) - 1 else groups[idx + 1][0][0]
    return folded[start:end], None


class LexiconStanceDetector:
    """The rule-and-lexicon baseline (Chinese and English); see the module docstring."""

    version = STANCE_VERSION

    def detect(self, text: str, spans: Mapping[str, Sequence[Span]]) -> dict[str, MentionStance]:
        # casefold keeps offsets for the texts we read (no expansion outside rare letters);
        # where it would not, fall back to lower-casing ASCII only.
        folded = text.casefold()
        if len(folded) != len(text):
            folded = "".join(c.lower() if c.isascii() else c for c in text)
        live = {b: list(v) for b, v in spans.items() if v}
        clauses = _clauses(folded, live)
        owners = _owners(clauses)
        mine: dict[str, list[int]] = {b: [] for b in live}
        for i, own in enumerate(owners):
            for b in own:
                mine[b].append(i)
        # A clause without a brand is read once, whichever brands it belongs to.
        seen: dict[str, tuple[_Score, set[str]]] = {}
        out: dict[str, MentionStance] = {}
        for brand in live:
            score = _Score()
            attrs: set[str] = set()
            prev_fav = False
            prev = -2
            for i in mine[brand]:
                c = clauses[i]
                if i != prev + 1:
                    prev_fav = False  # a clause of another brand came between
                prev = i
                if brand in c.brands:
                    words, fixed = _owned_text(folded, c, brand)
                else:
                    words, fixed = folded[c.start : c.end], None
                if fixed is not None:
                    s, found = fixed, _attributes(words)
                else:
                    if words not in seen:
                        seen[words] = (_score(words), _attributes(words))
                    s, found = seen[words]
                if prev_fav and s.unfav == 0 and _CONTRAST_START.match(words):
                    s = _Score(s.fav, s.unfav + 1, s.strong_neg)
                score.add(s)
                attrs |= found
                prev_fav = s.fav > 0
            for sp in live[brand]:
                if _LIST_ONE.search(folded[max(0, sp[0] - 12) : sp[0]]):
                    score.fav += 2
                    break
            out[brand] = MentionStance(
                brand, _verdict(score), tuple(a for a in ATTRIBUTES if a in attrs)
            )
        return out


def _owners(clauses: list[_Clause]) -> list[set[str]]:
    """Brands each clause is about: those it names, else the previous clause's in the same
    block, else (block start) the next naming clause's in the same block."""
    owners: list[set[str]] = [set(c.brands) for c in clauses]
    for i, c in enumerate(clauses):
        if owners[i] or not i or clauses[i - 1].block != c.block:
            continue
        owners[i] = set(owners[i - 1])
    for i in range(len(clauses) - 1, -1, -1):
        if owners[i] or i + 1 >= len(clauses) or clauses[i + 1].block != clauses[i].block:
            continue
        owners[i] = set(owners[i + 1])
    return owners


def _verdict(s: _Score) -> Stance:
    if s.unfav and not s.fav:
        return "negative" if s.strong_neg else "cautioned"
    if s.unfav and s.fav:
        return "negative" if s.strong_neg and s.strong_neg * 2 > s.fav else "cautioned"
    if s.fav:
        return "recommended"
    return "neutral"


BASELINE = LexiconStanceDetector()


def detect_stances(
    text: str, spans: Mapping[str, Sequence[Span]], detector: StanceDetector = BASELINE
) -> dict[str, MentionStance]:
    """Stance of every brand in ``spans`` (mentioned brands only), by ``detector``."""
    return detector.detect(text, spans)
