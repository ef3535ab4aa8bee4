"""Mention detection (issue 6): Chinese and English answers, aliases, overlaps, full-width forms,
word boundaries, URLs, code blocks, ambiguity, positions, and NFKC invariance."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geo_pipeline.domain.config_model import Brand
from geo_pipeline.domain.mentions import (
    DETECTOR_VERSION,
    BrandSet,
    CitationRef,
    _is_word_char,
    detect,
    fold,
    fold_with_offsets,
    matcher_for,
    mention_spans,
    position_bucket,
)

LUCKIN = Brand("瑞幸咖啡", ("Luckin Coffee", "luckin", "瑞幸"), ("luckincoffee.com",))
STARBUCKS = Brand("星巴克", ("Starbucks",), ("starbucks.com.cn", "starbucks.com"))
MANNER = Brand("Manner Coffee", ("Manner",))
COFFEE = BrandSet((LUCKIN, STARBUCKS, MANNER))


def facts(text: str, bs: BrandSet = COFFEE, citations=()):
    return detect(text, bs, citations).by_brand()


def test_every_tracked_brand_gets_a_row_in_config_order():
    d = detect("nothing relevant here", COFFEE)
    assert d.detector_version == DETECTOR_VERSION
    assert [m.brand for m in d.mentions] == ["瑞幸咖啡", "星巴克", "Manner Coffee"]
    assert [m.is_target for m in d.mentions] == [True, False, False]
    assert not any(m.mentioned for m in d.mentions)
    assert all(
        m.mention_count == 0 and m.first_offset is None and m.rank is None for m in d.mentions
    )


def test_chinese_aliases_without_word_boundaries_and_rank():
    text = "我更喜欢星巴克的环境，但瑞幸更便宜，瑞幸咖啡的活动也多。"
    f = facts(text)
    assert f["星巴克"].mentioned and f["星巴克"].mention_count == 1 and f["星巴克"].rank == 1
    assert f["星巴克"].first_offset == text.index("星巴克")
    # 瑞幸 once, then 瑞幸咖啡 once (the longer name wins over the contained 瑞幸): count 2.
    assert f["瑞幸咖啡"].mention_count == 2 and f["瑞幸咖啡"].rank == 2
    assert f["瑞幸咖啡"].first_offset == text.index("瑞幸")
    assert not f["Manner Coffee"].mentioned


def test_english_alias_is_case_folded():
    f = facts("For value, LUCKIN is hard to beat; luckin coffee runs promotions.")
    assert f["瑞幸咖啡"].mention_count == 2


def test_latin_names_only_at_word_boundaries():
    f = facts("Mannerisms aside, unmannerly baristas exist. Manner is good.")
    assert f["Manner Coffee"].mention_count == 1
    assert (
        f["Manner Coffee"].first_offset == "Mannerisms aside, unmannerly baristas exist. ".__len__()
    )
    # Digits and underscores touch a name too; CJK characters and punctuation do not.
    assert not facts("see manner_2 and manner2")["Manner Coffee"].mentioned
    assert facts("我常去Manner买咖啡")["Manner Coffee"].mention_count == 1


def test_longest_match_wins_when_a_brand_name_is_inside_a_competitors():
    apple = Brand("Apple", ("苹果",))
    apple_music = Brand("Apple Music", ("苹果音乐",))
    bs = BrandSet((apple, apple_music))
    f = facts("Apple Music 和 苹果音乐 都不错，Apple 手机也好。", bs)
    assert f["Apple Music"].mention_count == 2
    assert f["Apple"].mention_count == 1
    assert f["Apple Music"].rank == 1 and f["Apple"].rank == 2
    # And the other way round: the target's longer name is one mention of the target.
    f2 = facts("瑞幸咖啡", COFFEE)
    assert f2["瑞幸咖啡"].mention_count == 1


def test_a_longer_name_failing_its_word_boundary_does_not_hide_a_shorter_one():
    # "Acme Corp" occurs inside "Acme Corporation" but not at a word end: that hit is dropped
    # before overlaps are settled, so the alias "Acme" still counts (a leftmost-longest scan
    # that keeps only the longest name at each start would lose it).
    acme = Brand("Acme Corp", ("Acme",))
    f = facts("Acme Corporation ships; so does Acme Corp.", BrandSet((acme,)))
    assert f["Acme Corp"].mention_count == 2
    assert f["Acme Corp"].first_offset == 0


def test_overlaps_are_settled_longest_first_then_earliest_across_the_whole_text():
    kestrel = Brand("Kestrel Bottle", ("Kestrel",))
    bottle = Brand("Bottle Works Coffee")
    bs = BrandSet((kestrel, bottle))
    # "bottle works coffee" (19) beats the overlapping "kestrel bottle" (14), which frees the
    # characters of "kestrel" (7): it counts, although a longer name starts where it starts.
    f = facts("Kestrel Bottle Works Coffee", bs)
    assert f["Bottle Works Coffee"].mention_count == 1
    assert f["Bottle Works Coffee"].first_offset == len("Kestrel ")
    assert f["Kestrel Bottle"].mention_count == 1 and f["Kestrel Bottle"].first_offset == 0
    # Equal lengths: the earlier name wins the shared characters.
    nimbus, vertex = Brand("Nimbus Air"), Brand("Air Vertex")
    f2 = facts("Nimbus Air Vertex", BrandSet((nimbus, vertex)))
    assert f2["Nimbus Air"].mention_count == 1 and not f2["Air Vertex"].mentioned


def _reference_find(names: list[str], folded: str) -> list[tuple[int, int, str]]:
    """The matching rules written the slow, obvious way: every occurrence of every name, those
    touching a word character where the name starts or ends with one dropped, then greedy
    longest-then-earliest selection of non-overlapping hits, in text order."""
    cands = []
    for key in {fold(n).strip() for n in names} - {""}:
        i = folded.find(key)
        while i != -1:
            s, e = i, i + len(key)
            ok_start = not (_is_word_char(key[0]) and s > 0 and _is_word_char(folded[s - 1]))
            ok_end = not (_is_word_char(key[-1]) and e < len(folded) and _is_word_char(folded[e]))
            if ok_start and ok_end:
                cands.append((s, e, key))
            i = folded.find(key, i + 1)
    taken = [False] * len(folded)
    chosen = []
    for s, e, key in sorted(cands, key=lambda c: (c[0] - c[1], c[0])):
        if not any(taken[s:e]):
            taken[s:e] = [True] * (e - s)
            chosen.append((s, e, key))
    return sorted(chosen)


# Few characters, so names overlap, nest and touch often; ASCII-only texts take the matcher's
# ASCII path, the others the full one.
_ALPHABET = "ab-_ 1瑞幸é"
_names = st.text(_ALPHABET, min_size=1, max_size=5).filter(lambda n: fold(n).strip() != "")


@settings(max_examples=500, deadline=None)
@given(
    brands=st.lists(st.lists(_names, min_size=1, max_size=4), min_size=1, max_size=5),
    data=st.data(),
)
def test_matcher_finds_what_the_reference_implementation_finds(brands, data):
    # Brand names never occur (the alphabet lacks their letters); the aliases are the names.
    bs = BrandSet(tuple(Brand(f"brand{i}", tuple(ns)) for i, ns in enumerate(brands)))
    names = [n for ns in brands for n in ns]
    # Texts made of the names and single characters, so that hits overlap and touch.
    pieces = st.sampled_from([*names, *_ALPHABET, "AB", "Ｂ"])
    text = "".join(data.draw(st.lists(pieces, max_size=25), label="pieces"))
    folded = fold(text)
    got = [(s, e, fold(p.alias).strip()) for s, e, p in matcher_for(bs).find(folded)]
    assert got == _reference_find(names, folded)


def test_full_width_forms_match_and_offsets_refer_to_the_original_text():
    text = "推荐：ＳＴＡＲＢＵＣＫＳ……以及ｌｕｃｋｉｎ"
    f = facts(text)
    assert f["星巴克"].mention_count == 1
    assert text[f["星巴克"].first_offset :].startswith("ＳＴＡＲＢＵＣＫＳ")
    # The ellipsis folds to three characters; the offset after it still points at ｌｕｃｋｉｎ.
    assert f["瑞幸咖啡"].first_offset == text.index("ｌｕｃｋｉｎ")


def test_decomposed_accents_fold_like_composed_ones():
    cafe = BrandSet((Brand("Café Nero"),))
    composed = "Try Café Nero today"
    decomposed = unicodedata.normalize("NFD", composed)
    assert facts(composed, cafe)["Café Nero"].mention_count == 1
    m = facts(decomposed, cafe)["Café Nero"]
    assert m.mention_count == 1 and m.first_offset == 4


def test_brand_only_in_a_citation_url_is_not_a_text_mention_but_counts_as_domain():
    text = "参考资料：https://www.luckincoffee.com/menu 以及 [来源](https://starbucks.com/x)"
    cites = [
        CitationRef("cited", "luckincoffee.com"),
        CitationRef("retrieved", None, "https://www.starbucks.com.cn/about"),
    ]
    f = facts(text, citations=cites)
    assert not f["瑞幸咖啡"].mentioned and f["瑞幸咖啡"].domain_cited
    assert not f["瑞幸咖啡"].domain_retrieved
    assert not f["星巴克"].mentioned and f["星巴克"].domain_retrieved
    assert not f["星巴克"].domain_cited
    # The link's visible text is prose and counts.
    assert facts("见 [Starbucks 官网](https://x.example/starbucks)")["星巴克"].mention_count == 1


def test_subdomains_count_for_domain_citations_but_lookalikes_do_not():
    cites = [
        CitationRef("cited", "m.luckincoffee.com"),
        CitationRef("cited", "notluckincoffee.com"),
    ]
    f = facts("", citations=cites)
    assert f["瑞幸咖啡"].domain_cited
    f2 = facts("", citations=[CitationRef("cited", "notluckincoffee.com")])
    assert not f2["瑞幸咖啡"].domain_cited


def test_names_inside_fenced_code_blocks_are_not_mentions_inline_code_is():
    text = (
        "Use the API:\n\n```python\nimport luckin\nStarbucks.order()\n```\n\n`Starbucks` is fine."
    )
    f = facts(text)
    assert not f["瑞幸咖啡"].mentioned
    assert (
        f["星巴克"].mention_count == 1 and f["星巴克"].first_offset == text.index("`Starbucks`") + 1
    )
    # An unclosed fence runs to the end of the answer.
    assert not facts("intro\n~~~\nStarbucks")["星巴克"].mentioned


def test_ambiguous_aliases_are_flagged_not_counted():
    notion = Brand("Notion Labs", ("Notion",))  # a common English word
    go = Brand("Go Coffee", ("GO",))  # two letters
    shared_a = Brand("Alpha", ("AX Tea",))
    shared_b = Brand("Beta", ("AX Tea",))  # one alias claimed by two brands
    bs = BrandSet((notion, go, shared_a, shared_b), frozenset({fold("Alpha")}))
    d = detect("I had a notion to go buy AX Tea; Notion Labs is a company. Alpha.", bs)
    f = d.by_brand()
    assert d.needs_review
    assert set(d.ambiguous_hits) == {"Notion", "GO", "AX Tea", "Alpha"}
    assert (
        f["Notion Labs"].mentioned
        and f["Notion Labs"].mention_count == 1
        and f["Notion Labs"].ambiguous
    )
    assert not f["Go Coffee"].mentioned and f["Go Coffee"].ambiguous
    assert f["Alpha"].ambiguous and f["Beta"].ambiguous
    assert not f["Alpha"].mentioned and not f["Beta"].mentioned
    # Without ambiguous hits nothing needs review.
    assert not detect("Notion Labs only", bs).needs_review


def test_blocks_and_position_buckets():
    text = "开头一段话。\n\n1. 星巴克\n2. Manner\n\n最后一段提到瑞幸咖啡。"
    f = facts(text)
    assert f["星巴克"].first_block == 1
    assert f["Manner Coffee"].first_block == 2
    assert f["瑞幸咖啡"].first_block == 3
    assert f["星巴克"].position_bucket == "top"
    assert f["Manner Coffee"].position_bucket == "middle"
    assert f["瑞幸咖啡"].position_bucket == "bottom"
    assert [f[b].rank for b in ("星巴克", "Manner Coffee", "瑞幸咖啡")] == [1, 2, 3]


@pytest.mark.parametrize(
    ("offset", "length", "bucket"),
    [
        (0, 9, "top"),
        (2, 9, "top"),
        (3, 9, "middle"),
        (5, 9, "middle"),
        (6, 9, "bottom"),
        (0, 0, "top"),
    ],
)
def test_position_bucket_thirds(offset, length, bucket):
    assert position_bucket(offset, length) == bucket


# --------------------------------------------------------------------------- properties
_FULLWIDTH = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}
_WORDS = ["星巴克", "Starbucks", "瑞幸", "Luckin Coffee", "luckin", "Manner", "Manner Coffee",
          "咖啡", "coffee", "好", "the", "，", "。", "\n\n", "\n- ", " ", "Mannerism", "瑞幸咖啡",
          "https://luckincoffee.com/x", "Café", "…", "STARBUCKS"]  # fmt: skip


def _fullwidth(text: str, mask: list[bool]) -> str:
    return "".join(_FULLWIDTH.get(c, c) if mask[i % len(mask)] else c for i, c in enumerate(text))


def _key(d):
    return [
        (m.brand, m.mentioned, m.mention_count, m.rank, m.first_block, m.position_bucket)
        for m in d.mentions
    ]


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.sampled_from(_WORDS), max_size=30),
    mask=st.lists(st.booleans(), min_size=1, max_size=7),
    upper=st.booleans(),
)
def test_detection_is_invariant_under_full_width_and_case_rewrites(parts, mask, upper):
    text = "".join(parts)
    rewritten = _fullwidth(text.upper() if upper else text, mask)
    assert fold(rewritten) == fold(text.upper() if upper else text)
    a, b = detect(text, COFFEE), detect(rewritten, COFFEE)
    assert _key(a) == _key(b)
    if not upper:  # full-width rewriting is one character for one: offsets agree exactly
        assert [m.first_offset for m in a.mentions] == [m.first_offset for m in b.mentions]


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.sampled_from([*_WORDS, "Ｃａｆé", "ﬁ", "①", "Ⅻ", "e\u0301"]), max_size=25))
def test_nfd_and_nfkc_rewrites_give_the_same_facts(parts):
    text = "".join(parts)
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        assert _key(detect(unicodedata.normalize(form, text), COFFEE)) == _key(detect(text, COFFEE))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_folding_paths_agree_and_offsets_map_into_the_original(text):
    f = fold_with_offsets(text)
    assert f.text == fold(text)
    for i in range(len(f.text)):
        o = f.to_original(i)
        assert 0 <= o < len(text)
        # The original character at the mapped offset folds to something containing the folded one
        # (exact per-character alignment holds except inside composed clusters).
        assert f.text[i] in fold(text[o : o + 4]) or unicodedata.combining(
            text[o + 1 : o + 2] or "a"
        )


# --------------------------------------------------------------------------- analysis verdicts
def test_verdicts_for_valid_and_invalid_answers():
    from geo_pipeline.domain.mentions import conclude, verdict_for

    assert verdict_for("valid", None) == verdict_for("valid", None)
    v = verdict_for("valid", None)
    assert (v.state, v.reason, v.run_detector) == ("accepted", None, True)
    t = verdict_for("invalid", "truncated")
    assert (t.state, t.reason, t.run_detector) == (
        "review",
        "invalid_answer_needs_review:truncated",
        True,
    )
    for reason in ("empty", "login_page", "error_page", "captcha", "refusal", "too_short"):
        f = verdict_for("invalid", reason)
        assert (f.state, f.reason, f.run_detector) == ("failed", f"invalid_answer:{reason}", False)
    amb = detect("我每天都喝咖啡", BrandSet((LUCKIN, Brand("Manner Coffee", ("咖啡",)))))
    c = conclude(v, amb)
    assert (c.state, c.reason) == ("review", "ambiguous_alias:咖啡")
    assert conclude(v, detect("瑞幸咖啡", COFFEE)) == v
    # A doubtful invalid answer stays in review for its own reason.
    assert conclude(t, amb) == t


# --------------------------------------------------------------------------- question echo
# Engines often open by repeating the question ("关于「…」，综合多方信息…"): brands named there
# were named by the user, not recommended by the engine (issue 34; newcomer finding 9).
COTTI = Brand("库迪咖啡", ("库迪",))
COFFEE4 = BrandSet((LUCKIN, STARBUCKS, MANNER, COTTI))
ZH_Q = "瑞幸和星巴克哪个更适合学生?"
EN_Q = "Is Starbucks or Luckin better for students?"


def test_question_echoed_in_corner_brackets_is_not_a_mention_zh():
    text = (
        f"关于「{ZH_Q}」，综合多方信息，推荐如下：\n\n"
        "1. **库迪咖啡**：价格亲民，口感稳定。 [2]\n\n总结：以上信息来自公开资料，仅供参考。"
    )
    d = detect(text, COFFEE4, question=ZH_Q).by_brand()
    assert not d["瑞幸咖啡"].mentioned and d["瑞幸咖啡"].rank is None
    assert not d["星巴克"].mentioned
    assert d["库迪咖啡"].mentioned and d["库迪咖啡"].rank == 1
    assert d["库迪咖啡"].first_offset == text.index("库迪咖啡")
    # Without the question the echo counts (the behaviour the report showed).
    assert detect(text, COFFEE4).by_brand()["库迪咖啡"].rank == 3


def test_question_echoed_in_curly_quotes_and_verbatim_is_not_a_mention_en():
    quoted = f"Regarding “{EN_Q}”, here is a summary:\n\n1. **Manner Coffee** is a solid choice."
    d = detect(quoted, COFFEE, question=EN_Q).by_brand()
    assert not d["瑞幸咖啡"].mentioned and not d["星巴克"].mentioned
    assert d["Manner Coffee"].rank == 1
    verbatim = f'{EN_Q} Short answer: Manner Coffee. You asked "{EN_Q}" -- see above.'
    d2 = detect(verbatim, COFFEE, question=EN_Q).by_brand()
    assert not d2["瑞幸咖啡"].mentioned and not d2["星巴克"].mentioned
    assert d2["Manner Coffee"].mention_count == 1 and d2["Manner Coffee"].rank == 1


def test_near_verbatim_echo_after_folding_is_not_a_mention():
    # Full-width punctuation, a space, a dropped question mark: the same words after folding.
    for echo, q in (
        ("瑞幸和星巴克哪个更适合学生？", ZH_Q),
        ("瑞幸 和 星巴克 哪个更适合学生", ZH_Q),
        ("ＩＳ STARBUCKS or luckin better for students", EN_Q),
    ):
        text = f"{echo}\n\n推荐 Manner Coffee。"
        d = detect(text, COFFEE, question=q).by_brand()
        assert not d["瑞幸咖啡"].mentioned and not d["星巴克"].mentioned, echo
        assert d["Manner Coffee"].rank == 1, echo
    # A quoted paraphrase close to the question (one character dropped) is an echo too.
    d = detect("关于「瑞幸和星巴克哪个适合学生」：推荐 Manner。", COFFEE, question=ZH_Q).by_brand()
    assert not d["瑞幸咖啡"].mentioned and d["Manner Coffee"].rank == 1


def test_brand_in_the_echo_and_in_the_body_counts_once_ranked_from_the_body():
    text = f"关于「{ZH_Q}」：\n\n1. 库迪咖啡 最便宜。\n2. 星巴克 环境最好，星巴克 适合自习。"
    d = detect(text, COFFEE4, question=ZH_Q).by_brand()
    assert not d["瑞幸咖啡"].mentioned
    assert d["库迪咖啡"].rank == 1
    s = d["星巴克"]
    assert (s.mention_count, s.rank, s.first_offset) == (2, 2, text.index("星巴克 环境"))
    assert s.first_block == 2  # the list item, not the echo's paragraph


def test_mention_spans_exclude_the_echo_like_detect():
    text = f"关于「{ZH_Q}」：星巴克 环境最好。"
    spans = mention_spans(text, COFFEE, question=ZH_Q)
    assert set(spans) == {"星巴克"}
    ((start, end),) = spans["星巴克"]
    assert text[start:end] == "星巴克" and start == text.index("星巴克 环境")
    assert detect(text, COFFEE, question=ZH_Q).by_brand()["星巴克"].mention_count == 1


def test_an_ambiguous_alias_in_the_echo_does_not_send_the_answer_to_review():
    bs = BrandSet((LUCKIN, Brand("Manner Coffee", ("咖啡",))))
    q = "哪家咖啡最适合学生?"
    assert detect(f"关于「{q}」：瑞幸。", bs).needs_review
    d = detect(f"关于「{q}」：瑞幸。", bs, question=q)
    assert not d.needs_review and d.by_brand()["瑞幸咖啡"].rank == 1


def test_a_question_that_is_only_brand_names_erases_nothing():
    # A question of (almost) nothing but tracked names: repeating it is naming them.
    for q in ("星巴克", "Starbucks or Luckin?"):
        d = detect("星巴克 and Starbucks or Luckin? Luckin.", COFFEE, question=q).by_brand()
        assert d["星巴克"].mention_count == 2 and d["瑞幸咖啡"].mention_count == 2, q


@pytest.mark.parametrize(
    "question", ["瑞幸和星巴克哪个更适合学生？", "Is Starbucks or Luckin better for students?"]
)
def test_simulated_answers_are_ranked_as_the_simulator_wrote_their_bodies(question):
    # The simulator opens every answer by echoing the question (as engines do) and knows which
    # brands it put in the body, in order; its source list titles (link text) count too, after.
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.simulator.answers import generate_answer
    from geo_pipeline.simulator.profiles import DEFAULT_BRANDS, profile_from_registry

    bs = BrandSet(tuple(Brand(b.name, b.aliases, b.domains) for b in DEFAULT_BRANDS))
    profile = profile_from_registry(load_registry(), "deepseek").with_overrides(
        {"bad_answer_rate": 0.0}
    )
    assert profile.brands == DEFAULT_BRANDS
    names = {b.name for b in DEFAULT_BRANDS}
    for k in range(60):
        a = generate_answer(11, f"k{k}", question, profile)
        titles = [c.title for c in a.citations if c.title in names]
        expected = list(dict.fromkeys([*a.mentioned, *titles]))
        d = detect(a.answer, bs, question=question)
        got = sorted((m for m in d.mentions if m.mentioned), key=lambda m: m.rank or 0)
        assert [m.brand for m in got] == expected, a.answer
