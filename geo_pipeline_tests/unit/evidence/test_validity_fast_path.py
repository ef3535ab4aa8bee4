"""classify's shortcuts (issue 33: the worker's CPU per archived answer) give exactly the verdict
of the implementation they replaced, kept below as the oracle: the page phrases are searched only
when a short text holds one of ``_PAGE_HINTS`` (every phrase holds one: checked on the phrases'
parse), a text without a fence is not scanned for one, the last line is found from the tail, and
"enough body" is one match. Both run on the simulator's answers (bad pages included), on texts
made of the phrases' pieces and on arbitrary text."""

from __future__ import annotations

import re
from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geo_pipeline.domain import validity as v
from geo_pipeline.domain.validity import Validity, classify

_BODY_CHAR = re.compile(r"[^\s\u3000\u200b\u200c\u200d\ufeff#*_`>|\-=~\[\]()!]")


def _cut_reference(text: str) -> str | None:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    last = lines[-1].rstrip()
    if v._NON_PROSE.match(last):
        return None
    if v._URL_END.search(last):
        return None
    end = last[-1]
    if end in v._CONTINUATION:
        return f"ends on {end!r}"
    if end in v._TERMINAL:
        return None
    word = v._LAST_WORD.search(last)
    if word and word.group(1).lower() in v._DANGLING_EN:
        return f"ends on the connective {word.group(1)!r}"
    if last.endswith(v._DANGLING_ZH):
        return "ends on a connective"
    if (end.isalnum() or v._CJK.match(end)) and len(last.strip()) >= v.MIN_CUT_LINE_CHARS:
        return "last sentence has no closing punctuation"
    return None


def _too_short_reference(text: str) -> bool:
    if next(islice(_BODY_CHAR.finditer(text), v.MIN_WEIGHT - 1, None), None) is not None:
        return False
    body = v._MARKUP.sub("", v._SPACE.sub("", text))
    if len(body) >= v.MIN_WEIGHT:
        return False
    return v._weight(body) < v.MIN_WEIGHT


def reference(answer_text: str, provider_truncated: bool = False) -> Validity:
    """validity.classify before issue 33's shortcuts."""
    compact = v._compact(answer_text)
    if not compact:
        return Validity(False, "empty")
    lowered = compact.lower()
    if len(compact) <= v.PAGE_MAX_CHARS:
        for reason, pattern in (
            ("captcha", v._CAPTCHA),
            ("login_page", v._LOGIN),
            ("error_page", v._ERROR),
        ):
            m = pattern.search(lowered)
            if pattern is v._ERROR:
                code = v._ERROR_CODE.search(lowered)
                if code and (m is None or code.start() < m.start()):
                    m = code
            if m:
                return Validity(False, reason, detail=f"matched {m.group(0)!r}")  # type: ignore[arg-type]
    if provider_truncated:
        return Validity(False, "truncated", detail="provider reported truncation")
    if len(compact) <= v.REFUSAL_MAX_CHARS:
        m = v._REFUSAL.search(lowered[: v.REFUSAL_HEAD_CHARS])
        if m:
            return Validity(False, "refusal", detail=f"matched {m.group(0)!r}")
    if len(v._FENCE.findall(answer_text)) % 2 == 1:
        return Validity(False, "truncated", detail="unclosed code fence")
    cut = _cut_reference(answer_text)
    if cut:
        return Validity(False, "truncated", detail=cut)
    if _too_short_reference(answer_text):
        return Validity(False, "too_short")
    return Validity(True, None)


def _covered(items: object, hints: tuple[str, ...]) -> bool:
    """Whether every match of the parsed sequence ``items`` holds one of ``hints``: a run of
    literals outside any optional part holds one, or a part that always matches does (a group,
    an alternation all of whose branches are covered, a repeat of at least once)."""
    from re import _constants as c  # type: ignore[attr-defined]

    run = ""
    for op, av in items:  # type: ignore[attr-defined]
        if op is c.LITERAL:
            run += chr(av)
            if any(h in run for h in hints):
                return True
            continue
        run = ""
        if op is c.SUBPATTERN and _covered(av[-1], hints):
            return True
        if op is c.BRANCH and all(_covered(alt, hints) for alt in av[1]):
            return True
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1:
            if _covered(av[2], hints):
                return True
    return False


@pytest.mark.parametrize("pattern", [v._CAPTCHA, v._LOGIN, v._ERROR])
def test_every_page_phrase_holds_a_hint(pattern):
    from re import _parser  # type: ignore[attr-defined]

    assert _covered(_parser.parse(pattern.pattern), v._PAGE_HINTS)
    # and each phrase on its own (the parser may factor the alternation)
    phrases = _split_top(pattern.pattern)
    assert len(phrases) > 5
    for phrase in phrases:
        assert _covered(_parser.parse(phrase), v._PAGE_HINTS), phrase


def _split_top(source: str) -> list[str]:
    """A pattern's top-level alternatives (split at '|' outside groups)."""
    out, depth, cur = [], 0, ""
    for ch in source:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "|" and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def test_every_error_code_holds_a_code_hint():
    """_ERROR_CODE is a word boundary and then one of two alternatives, each starting with a
    code that _PAGE_HINT's last two alternatives are (and end with the same boundary)."""
    assert v._PAGE_HINT.pattern.endswith(r"|50[0234]\b|40[34]\b")
    assert v._ERROR_CODE.pattern.startswith(r"\b(50[0234]\b.")
    assert v._ERROR_CODE.pattern.count("|40[34]\\b.") == 1
    for code in ("500", "502", "503", "504", "403", "404"):
        assert v._PAGE_HINT.search(f"x {code} error") and v._PAGE_HINT.search(f"{code} not found")


def test_page_hint_finds_each_hint():
    for hint in v._PAGE_HINTS:
        assert v._PAGE_HINT.search("xx " + hint + " yy"), hint


def _simulator_texts() -> list[tuple[str, bool]]:
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.simulator.answers import BAD_KINDS, _bad_page, generate_answer
    from geo_pipeline.simulator.profiles import profile_from_registry_entry

    registry = load_registry()
    out = [
        (_bad_page(kind, zh), False)
        for kind in BAD_KINDS
        if kind != "truncated"
        for zh in (True, False)
    ]
    for platform in ("deepseek", "doubao", "qwen", "kimi"):
        profile = profile_from_registry_entry(registry.entry(platform))
        for i in range(150):
            for question in ("best CRM for small business", "推荐几款国产新能源汽车"):
                ans = generate_answer(i, f"s{i}:1", question, profile)
                out.append((ans.answer, ans.truncated))
                out.append((ans.answer[: 40 + i * 3], False))  # short ones reach the page rules
    return out


def test_shortcuts_agree_with_the_reference_on_simulator_answers():
    texts = _simulator_texts()
    assert {reference(t, f).reason for t, f in texts} >= {None, "truncated", "empty"}
    for text, flag in texts:
        assert classify(text, flag) == reference(text, flag), text


_PIECES = [
    "captcha", "verify you are human", "are you a robot", "security check", "人机验证", "请完成安全验证",
    "拖动下方滑块", "访问异常", "please log in", "sign in to view", "login required", "sign-in required",
    "you must be logged in", "session has expired", "create an account to continue", "请先登录",
    "登录后查看", "internal server error", "bad gateway", "service unavailable", "gateway time-out",
    "something went wrong", "an unexpected error has occurred", "too many requests",
    "rate limit exceeded", "network error", "request failed", "服务器繁忙", "系统异常", "出错了",
    "请稍后再试", "请求过于频繁", "页面不存在", "502 bad gateway", "1500 timeout", "403 forbidden",
    "x404 not found", "I'm sorry, but I can't help", "抱歉，我无法", "```", "~~~", "\n", "\r\n",
    "\u2028", "\x85", "\x0c", " ", "\u3000", "\u200b", "and", "的", ",", ".", "。", "**",
    "https://e.com/a", "- item", "# head", "Ok", "咖啡", "word " * 8, "x" * 40,
]  # fmt: skip


@settings(max_examples=1500)
@given(st.lists(st.sampled_from(_PIECES), max_size=14), st.booleans())
def test_shortcuts_agree_with_the_reference_on_phrase_pieces(pieces, flag):
    text = "".join(pieces)
    assert classify(text, flag) == reference(text, flag)
    upper = text.upper()
    assert classify(upper, flag) == reference(upper, flag)


@settings(max_examples=1000)
@given(st.text(max_size=80), st.booleans())
def test_shortcuts_agree_with_the_reference_on_any_text(text, flag):
    assert classify(text, flag) == reference(text, flag)
    long = "Some words here, " * 30 + text  # past the tail the last line is first looked for in
    assert classify(long, flag) == reference(long, flag)


@pytest.mark.parametrize("n", [0, 1, 398, 399, 400, 401, 402, 800])
def test_last_line_at_the_tail_boundary(n):
    for sep in ("\n", "\r\n", "\r", "\u2028"):
        text = "first line, ends on" + sep + "y" * n + " and"
        assert v._cut_mid_sentence(text) == _cut_reference(text)
        text = "a" * n + sep + "last line ends on a comma,"
        assert v._cut_mid_sentence(text) == _cut_reference(text)
