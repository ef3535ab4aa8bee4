"""Answer validity (R22): is a completed answer usable as evidence of what the engine says?

Completed ≠ valid. Collection can complete with a login wall, a captcha, an error page, a refusal
or a cut-off answer; this pure classifier says ``valid`` or gives one reason, and every verdict
carries ``RULE_VERSION`` so that a stored verdict can be traced to the rules that made it (and
re-judged when they change). Rules work on Chinese and English text. First match wins, in this
order:

1. ``empty`` — nothing but whitespace (incl. full-width and zero-width spaces).
2. ``captcha`` / ``login_page`` / ``error_page`` — page-like texts. These phrases are judged only on
   short texts (≤ ``PAGE_MAX_CHARS``): a real answer *about* captchas or logins is long.
3. ``truncated`` — the provider said so (e.g. ``finish_reason == "length"``).
4. ``refusal`` — a refusal phrase near the start of a short text (≤ ``REFUSAL_MAX_CHARS``), so a
   long answer that opens with a caveat ("I can't give legal advice, but …") stays valid.
5. ``truncated`` — an unclosed code fence, or cut mid-sentence: the last prose line ends on a
   continuation mark (comma, colon, dash, opening bracket, …), on a dangling connective
   ("and", "the", "的", "和", …), or on a word character after at least
   ``MIN_CUT_LINE_CHARS`` characters with no closing punctuation. List items, table rows,
   headings and code are not judged for sentence ends.
6. ``too_short`` — less than ``MIN_WEIGHT`` of content (a CJK character weighs 2, any other
   non-space character 1; Markdown markup does not count).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

RULE_VERSION = "validity-2026.11.1"

Reason = Literal[
    "empty", "login_page", "error_page", "captcha", "truncated", "refusal", "too_short"
]

PAGE_MAX_CHARS = 600
REFUSAL_MAX_CHARS = 400
REFUSAL_HEAD_CHARS = 120
MIN_CUT_LINE_CHARS = 30
MIN_WEIGHT = 24


@dataclass(frozen=True)
class Validity:
    """The verdict: ``valid`` or a ``reason`` (with a short human ``detail``), and the rules'
    version."""

    valid: bool
    reason: Reason | None
    rule_version: str = RULE_VERSION
    detail: str | None = None

    @property
    def label(self) -> str:
        return "valid" if self.valid else "invalid"


def _phrases(*items: str) -> re.Pattern[str]:
    # Matched against lower-cased text: cheaper than re.IGNORECASE on every alternative. Every
    # alternative starts with a literal character, so the regex engine skips ahead to the places
    # one of those characters occurs instead of trying every alternative at every position
    # (``(a|b)x`` is written ``ax|bx``: the same matches, in the same order).
    return re.compile("|".join(items).lower())


_CAPTCHA = _phrases(
    r"captcha",
    r"verify (that )?you are (a )?human",
    r"are you a robot",
    r"i'?m not a robot",
    r"checking (if the site connection is secure|your browser)",
    r"unusual traffic",
    r"security check",
    r"人机验证",
    r"安全验证",
    r"请完成.{0,6}验证",
    r"滑动验证",
    r"拖动(下方)?滑块",
    r"验证码",
    r"访问异常",
)
_LOGIN = _phrases(
    r"please (log|sign) ?in",
    r"log ?in to (continue|view|see|use|access)",
    r"sign ?in to (continue|view|see|use|access)",
    r"login required",
    r"sign-?in required",
    r"you must be (logged|signed) in",
    r"session (has )?expired",
    r"create an account to continue",
    r"请(先)?登录",
    r"登录后(查看|继续|使用|可)",
    r"扫码登录",
    r"登录/注册",
    r"未登录",
    r"登录已过期",
)
_ERROR = _phrases(
    r"internal server error",
    r"bad gateway",
    r"service (temporarily )?unavailable",
    r"gateway time-?out",
    r"something went wrong",
    r"an (unexpected )?error (has )?occurred",
    r"too many requests",
    r"rate limit (exceeded|reached)",
    r"network error",
    r"request failed",
    r"服务器(错误|繁忙|开小差)",
    r"系统(繁忙|错误|异常)",
    r"网络(错误|异常)",
    r"出错了",
    r"请稍后(再)?(试|重试)",
    r"请求(过于)?频繁",
    r"页面(不存在|找不到)",
)
# The status-code phrases of an error page start at a word boundary, which no literal-first
# alternative can say: a pattern of their own, the earlier of the two matches wins (a code starts
# with a digit, every _ERROR phrase with a letter, so they never start at the same place).
_ERROR_CODE = re.compile(
    r"\b(50[0234]\b.{0,20}(error|bad gateway|unavailable|timeout)"
    r"|40[34]\b.{0,12}(forbidden|not found))"
)
# Every phrase of _CAPTCHA, _LOGIN and _ERROR holds one of these strings outside any optional
# or alternative part (so each of its matches does), and every _ERROR_CODE match holds one of its
# codes: a short text with none of them is no page (test_validity checks each phrase against the
# list). One search of _PAGE_HINT, whose alternatives start with the hint's first character,
# tells that instead of four regex searches of every position (issue 33). The search stops at
# every place a hint's first character is, so each hint starts at a letter that is rare in
# answers and their links (no c, m or w: ``occurred`` is found by ``urred``, ``wrong``
# by ``g went w``): a fifth fewer stops than the hints it replaced.
_PAGE_HINTS = (
    "ptcha", "verify", "bot", "hecking ", "ffic", "y check", "验证", "拖动", "访问异常",
    "please ", "log", "sign", "xpired", "unt to co", "登录",
    "ver error", "gateway", "vice ", "g went w", "urred", "y requests", "limit ", "k error",
    "failed", "服务器", "系统", "网络", "出错了", "请稍后", "请求", "页面",
)  # fmt: skip


def _any_of(words: tuple[str, ...]) -> str:
    """An alternation of literal ``words``, grouped by first character."""
    by_first: dict[str, list[str]] = {}
    for w in words:
        by_first.setdefault(w[0], []).append(re.escape(w[1:]))
    return "|".join(f"{re.escape(c)}(?:{'|'.join(rest)})" for c, rest in by_first.items())


_PAGE_HINT = re.compile(_any_of(_PAGE_HINTS) + r"|50[0234]\b|40[34]\b")
_REFUSAL = _phrases(
    r"i('m| am) (sorry,? )?(but )?(unable|not able) to (help|assist|answer|provide|comply)",
    r"i can('|no)t (help|assist|answer|provide|comply|discuss)",
    r"i('m| am) not able to (help|assist|answer|provide)",
    r"i won'?t be able to (help|assist|answer)",
    r"as an ai( language model)?,? i (can('|no)t|am unable|don'?t)",
    r"sorry,? (but )?i can('|no)t",
    r"抱歉[，,]?\s*(我)?(无法|不能|没法|暂时无法)",
    r"对不起[，,]?\s*(我)?(无法|不能|没法|暂时无法)",
    r"很遗憾[，,]?\s*(我)?(无法|不能|没法|暂时无法)",
    r"我(无法|不能|没法)(回答|提供|协助|帮助|讨论)",
    r"作为(一个)?(AI|人工智能)",
    r"这个(问题|话题)我(暂时)?(无法|不能|还没学会)",
    r"该(问题|话题)我(暂时)?(无法|不能|还没学会)",
    r"我还没(有)?学会(回答)?",
    r"换个(话题|问题)",
)

_TERMINAL = frozenset(".!?…。！？」』）)]】\"'”’*`~>》")
_CONTINUATION = frozenset(",，、:：;；-–—(（[【“‘《&+=")
_DANGLING_EN = frozenset(
    "and or the a an of to with for in on but because which that is are as by from".split()
)
_DANGLING_ZH = ("的", "和", "与", "及", "或", "是", "在", "但是", "因为", "以及", "包括", "比如")
_SPACE = re.compile(r"[\s\u3000\u200b\u200c\u200d\ufeff]+")
_ZERO_WIDTH_AS_SPACE = {ord(c): " " for c in "\u200b\u200c\u200d\ufeff"}  # _SPACE beyond \s
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_MARKUP = re.compile(r"[#*_`>|\-=~\[\]()!]")
# What the body _too_short weighs leaves out: _SPACE and _MARKUP, as one character class.
_NOT_BODY = r"\s\u3000\u200b\u200c\u200d\ufeff#*_`>|\-=~\[\]()!"
_NON_PROSE = re.compile(r"^\s*([-*+]\s|\d+[.)]\s|#|\||>|```|~~~|<)")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)", re.MULTILINE)
_URL_END = re.compile(r"https?://\S+$")
_LAST_WORD = re.compile(r"([A-Za-z]+)\W*$")
_TAIL_CHARS = 400
# At least MIN_WEIGHT body characters, anywhere: one match, no match object per character.
_ENOUGH_BODY = re.compile(rf"(?:[{_NOT_BODY}]*+[^{_NOT_BODY}]){{{MIN_WEIGHT}}}")


def _compact(text: str) -> str:
    r"""``_SPACE.sub(" ", text).strip()`` without the regex (a few times faster): ``\s`` is
    ``str.isspace``, what ``split()`` splits on; the zero-width characters _SPACE adds are made
    spaces first, when there are any (``translate`` is the slow part)."""
    if "\u200b" in text or "\u200c" in text or "\u200d" in text or "\ufeff" in text:
        text = text.translate(_ZERO_WIDTH_AS_SPACE)
    return " ".join(text.split())


def _unclosed_fence(text: str) -> bool:
    if "```" not in text and "~~~" not in text:
        return False  # no fence at all (most answers): no scan of every line start
    return len(_FENCE.findall(text)) % 2 == 1


def _last_line(text: str) -> str | None:
    """The last line of ``text`` with anything but whitespace, right-stripped (None: none).
    Every line boundary is whitespace (``str.splitlines``'s are), so it is the last line of the
    right-stripped text; it is looked for in the text's tail first rather than in all its lines."""
    text = text.rstrip()
    if not text:
        return None
    lines = text[-_TAIL_CHARS:].splitlines()
    if len(lines) < 2:  # the tail holds no line boundary: the last line may start before it
        lines = text.splitlines()
    return lines[-1].rstrip()


def _cut_mid_sentence(text: str) -> str | None:
    last = _last_line(text)
    if last is None:
        return None
    if _NON_PROSE.match(last):
        return None
    if _URL_END.search(last):
        return None  # a closing link ("see https://…") is a complete line
    end = last[-1]
    if end in _CONTINUATION:
        return f"ends on {end!r}"
    if end in _TERMINAL:
        return None
    word = _LAST_WORD.search(last)
    if word and word.group(1).lower() in _DANGLING_EN:
        return f"ends on the connective {word.group(1)!r}"
    if last.endswith(_DANGLING_ZH):
        return "ends on a connective"
    if (end.isalnum() or _CJK.match(end)) and len(last.strip()) >= MIN_CUT_LINE_CHARS:
        return "last sentence has no closing punctuation"
    return None


def _weight(text: str) -> int:
    body = _MARKUP.sub("", _SPACE.sub("", text))
    cjk = len(_CJK.findall(body))
    return 2 * cjk + (len(body) - cjk)


def _too_short(text: str) -> bool:
    # The weight is at least the body's length (a CJK character weighs 2, any other 1): a body
    # of MIN_WEIGHT characters is heavy enough without counting its CJK ones, and it is enough to
    # find that many body characters (most answers: in their first line) to know it.
    if _ENOUGH_BODY.match(text) is not None:
        return False
    body = _MARKUP.sub("", _SPACE.sub("", text))
    if len(body) >= MIN_WEIGHT:
        return False
    return _weight(body) < MIN_WEIGHT


def classify(answer_text: str, provider_truncated: bool = False) -> Validity:
    """Judge one answer (rules and their order in the module docstring). Pure and total."""
    compact = _compact(answer_text)
    if not compact:
        return Validity(False, "empty")
    # Only a short text is searched for phrases: a long one is not lower-cased.
    lowered = compact.lower() if len(compact) <= _PHRASES_MAX_CHARS else ""
    if len(compact) <= PAGE_MAX_CHARS and _PAGE_HINT.search(lowered):
        for reason, pattern in (
            ("captcha", _CAPTCHA),
            ("login_page", _LOGIN),
            ("error_page", _ERROR),
        ):
            m = pattern.search(lowered)
            if pattern is _ERROR:
                code = _ERROR_CODE.search(lowered)
                if code and (m is None or code.start() < m.start()):
                    m = code
            if m:
                return Validity(False, reason, detail=f"matched {m.group(0)!r}")  # type: ignore[arg-type]
    if provider_truncated:
        return Validity(False, "truncated", detail="provider reported truncation")
    if len(compact) <= REFUSAL_MAX_CHARS:
        m = _REFUSAL.search(lowered[:REFUSAL_HEAD_CHARS])
        if m:
            return Validity(False, "refusal", detail=f"matched {m.group(0)!r}")
    if _unclosed_fence(answer_text):
        return Validity(False, "truncated", detail="unclosed code fence")
    cut = _cut_mid_sentence(answer_text)
    if cut:
        return Validity(False, "truncated", detail=cut)
    if _too_short(answer_text):
        return Validity(False, "too_short")
    return _VALID


_VALID = Validity(True, None)
_PHRASES_MAX_CHARS = max(
    PAGE_MAX_CHARS, REFUSAL_MAX_CHARS
)  # immutable: one verdict object for every valid answer
