"""Scraped vs API apart (issue 31): a world of planted answers whose truth is written here --
which answers mention the brand and at what rank, which searched and with which queries, which
domains they cite -- and the fan-out, citation gap and UI-vs-API agreement the analytics views
(migration 0054) publish, checked against counts worked out here from that world, and the
reports (terminal, HTML, JSON, CSV) and the Dagster metadata showing the same rows.

The world: engine deepseek asked through its browser lane (deepseek_web, access browser) and
its API (deepseek, access api) in one run, two questions x three repeats; doubao (api) beside
it has no consumer-product twin, so it has no agreement row."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import pytest

from geo_pipeline.analysis import analyse_run, refresh_analytics, ui_api
from geo_pipeline.domain.stats import clustered_rate
from geo_pipeline.ops import export as exportmod
from geo_pipeline.ops import report as reportmod
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

RUN = "r-ui-api"
UI, API, OTHER = "deepseek_web__desktop", "deepseek__web", "doubao__web"
QUESTIONS = ["Which chain has the best value?", "Which app do people use most?"]


@dataclass(frozen=True)
class Answer:
    """One planted answer and its truth: does it name the brand (Luckin), at which rank, does it
    name a competitor, did the engine search and with which queries, what does it cite."""

    channel: str
    q: int
    r: int
    text: str
    mentioned: bool
    rank: int | None
    competitor: bool
    searched: bool = False
    queries: tuple[str, ...] = ()
    cites: tuple[str, ...] = ()
    valid: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


WORLD = [
    # question 0, the consumer product (browser lane)
    Answer(
        UI,
        0,
        0,
        "Luckin first, then Starbucks.",
        True,
        1,
        True,
        True,
        ("best value coffee china", "luckin prices"),
        ("luckincoffee.com",),
    ),
    Answer(
        UI,
        0,
        1,
        "Starbucks is nicer; Luckin is cheaper.",
        True,
        2,
        True,
        True,
        ("  Best value coffee China ",),
        ("starbucks.com",),
    ),
    Answer(
        UI, 0, 2, "Manner makes the best flat white.", False, None, True, False, (), ("zhihu.com",)
    ),
    # question 0, the API
    Answer(API, 0, 0, "Luckin, clearly.", True, 1, False),
    Answer(API, 0, 1, "Starbucks, clearly.", False, None, True, cites=("starbucks.com",)),
    Answer(API, 0, 2, "Luckin, or Manner for quality.", True, 1, True),
    # question 1, the consumer product
    Answer(
        UI,
        1,
        0,
        "Starbucks has the best app.",
        False,
        None,
        True,
        True,
        ("coffee app",),
        ("weibo.com",),
    ),
    Answer(
        UI,
        1,
        1,
        "The Luckin app, by far.",
        True,
        1,
        False,
        True,
        ("coffee app", "luckin app"),
        ("luckincoffee.com", "weibo.com"),
    ),
    Answer(UI, 1, 2, "请登录后继续", False, None, False, valid=False),  # a login wall: in no n
    # question 1, the API (its third answer never arrives: analysing, in no n)
    Answer(API, 1, 0, "Luckin has the best app.", True, 1, False),
    Answer(API, 1, 1, "Manner has a neat app.", False, None, True),
    # doubao (api), no consumer-product twin
    Answer(OTHER, 0, 0, "Starbucks, I think.", False, None, True, cites=("douban.com",)),
]


def counted(a: Answer) -> bool:
    return a.valid


@pytest.fixture
def world(db, monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, int, int], str]:
    # deepseek_web is offered only while its profiles variable is set (never used here: the
    # answers are planted, nothing is sent).
    monkeypatch.setenv("GEO_BROWSER_PROFILES", "/nonexistent-profiles")
    samples = make_run(
        db,
        RUN,
        questions=QUESTIONS,
        channels=[
            {"platform": "deepseek_web", "device": "desktop", "regions": ["cn"],
             "modes": ["standard"]},
            {"platform": "deepseek", "device": "web", "regions": ["cn"], "modes": ["standard"]},
            {"platform": "doubao", "device": "web", "regions": ["cn"], "modes": ["standard"]},
        ],
        repeats=3,
    )  # fmt: skip
    by = {(s["channel"], s["question_index"], s["repeat_index"]): s["sample_id"] for s in samples}
    for a in WORLD:
        sid = by[a.channel, a.q, a.r]
        store_answer(
            db, sid, a.text, validity="valid" if a.valid else "invalid",
            reason=None if a.valid else "login_page",
            citations=[("cited", d) for d in a.cites],
        )  # fmt: skip
        # What evidence.recording writes for a connector's Evidence (search_queries, and
        # web_search_used = the flag or any query): tested in test_recording_keeps_fan_out.
        db.execute(
            "UPDATE geo.answers SET search_queries = %s, web_search_used = %s WHERE sample_id = %s",
            (list(a.queries), a.searched, sid),
        )
    db.commit()
    analyse_run(db, RUN)
    refresh_analytics(db, RUN)
    db.commit()
    return by


def rows(db, view: str, order: str) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in db.execute(
            f"SELECT * FROM analytics.{view} WHERE run_id = %s ORDER BY {order}", (RUN,)
        ).fetchall()
    ]


def test_the_detector_agrees_with_the_world(db, world) -> None:
    """The world's stated truth is what the analysis found (else the counts below test the
    detector, not the views)."""
    got = {
        r["sample_id"]: (r["target_mentioned"], r["target_rank"])
        for r in rows(db, "counted_answers", "sample_id")
    }
    want = {world[a.channel, a.q, a.r]: (a.mentioned, a.rank) for a in WORLD if counted(a)}
    assert got == want


def test_access_is_frozen_per_platform(db, world) -> None:
    got = {
        r["platform"]: (r["access"], r["engine"])
        for r in db.execute("SELECT * FROM geo.run_platforms WHERE run_id = %s", (RUN,)).fetchall()
    }
    assert got == {
        "deepseek_web": ("browser", "deepseek"),
        "deepseek": ("api", "deepseek"),
        "doubao": ("api", "doubao"),
    }


def test_fan_out_per_question_and_channel(db, world) -> None:
    per_q: dict[tuple[str, int], list[Answer]] = defaultdict(list)
    for a in WORLD:
        if counted(a):
            per_q[a.channel, a.q].append(a)
    got = {(r["channel"], r["question_index"]): r for r in rows(db, "fan_out", "channel")}
    assert set(got) == set(per_q)
    for key, answers in per_q.items():
        r = got[key]
        assert r["answers"] == len(answers)
        assert r["answers_searched"] == sum(a.searched for a in answers)
        assert r["answers_not_searched"] == sum(not a.searched for a in answers)
        assert r["queries"] == sum(len(a.queries) for a in answers)
        assert r["distinct_queries"] == len(
            {q.strip().casefold() for a in answers for q in a.queries}
        )
        assert r["share_searched"] == pytest.approx(r["answers_searched"] / len(answers))
        assert r["mentions_searched"] == sum(a.searched and a.mentioned for a in answers)
        assert r["mentions_not_searched"] == sum(not a.searched and a.mentioned for a in answers)
    # the channel: questions pooled, THE interval (domain.stats, the SQL's Python twin)
    chans = {r["channel"]: r for r in rows(db, "fan_out_channels", "channel")}
    assert set(chans) == {UI, API, OTHER}
    for ch, r in chans.items():
        qs = sorted({q for c, q in per_q if c == ch})
        want = clustered_rate(
            (sum(a.searched for a in per_q[ch, q]), len(per_q[ch, q])) for q in qs
        )
        assert (r["questions"], r["answers"], r["answers_searched"]) == (
            want.questions, want.n, want.successes)  # fmt: skip
        assert r["share_searched"] == pytest.approx(want.rate)
        assert r["share_searched_lower"] == pytest.approx(want.lower)
        assert r["share_searched_upper"] == pytest.approx(want.upper)
        answers = [a for q in qs for a in per_q[ch, q]]
        searched = [a for a in answers if a.searched]
        assert r["mention_rate_searched"] == (
            pytest.approx(sum(a.mentioned for a in searched) / len(searched)) if searched
            else None
        )  # fmt: skip
    # the UI lane searched; the API answers said nothing of a search
    assert chans[UI]["answers_searched"] > 0 and chans[API]["answers_searched"] == 0


def test_citation_gap(db, world) -> None:
    want: dict[tuple[str, str], set[str]] = defaultdict(set)
    with_brand: set[tuple[str, str]] = set()
    n: dict[str, int] = defaultdict(int)
    for a in WORLD:
        if not counted(a):
            continue
        n[a.channel] += 1
        for d in a.cites:
            if a.competitor:
                want[a.channel, d].add(world[a.channel, a.q, a.r])
            if a.mentioned:
                with_brand.add((a.channel, d))
    gap = {k: v for k, v in want.items() if k not in with_brand}
    got = {(r["channel"], r["domain"]): r for r in rows(db, "citation_gap", "channel, domain")}
    assert set(got) == set(gap)
    for key, sids in gap.items():
        assert got[key]["cited_with_competitor"] == len(sids)
        assert got[key]["n"] == n[key[0]]
    # spelled out: zhihu.com feeds competitor answers on the UI only; starbucks.com appears
    # beside the brand on the UI (not a gap there) but only with competitors on the API
    assert (UI, "zhihu.com") in got and (UI, "starbucks.com") not in got
    assert (API, "starbucks.com") in got and (OTHER, "douban.com") in got


def test_ui_api_agreement(db, world) -> None:
    ui = defaultdict(list)
    api = defaultdict(list)
    for a in WORLD:
        if counted(a) and a.channel in (UI, API):
            (ui if a.channel == UI else api)[a.q].append(a)
    per_q, rank_q = [], []
    for q in sorted(set(ui) & set(api)):
        pairs = list(product(ui[q], api[q]))
        per_q.append((sum(u.mentioned == v.mentioned for u, v in pairs), len(pairs)))
        both = [(u, v) for u, v in pairs if u.mentioned and v.mentioned]
        rank_q.append((sum(u.rank == v.rank for u, v in both), len(both)))
    want = clustered_rate(per_q)
    want_rank = clustered_rate(rank_q)
    got = rows(db, "ui_api_agreement", "ui_channel")
    assert len(got) == 1  # doubao has no twin; the API is never paired with itself
    r = got[0]
    assert (r["engine"], r["ui_channel"], r["ui_access"], r["api_channel"]) == (
        "deepseek", UI, "browser", API)  # fmt: skip
    assert (r["questions"], r["pairs"], r["agreeing_pairs"]) == (
        want.questions,
        want.n,
        want.successes,
    )
    assert r["agreement"] == pytest.approx(want.rate)
    assert r["agreement_lower"] == pytest.approx(want.lower)
    assert r["agreement_upper"] == pytest.approx(want.upper)
    assert r["n_effective"] == pytest.approx(want.n_effective)
    assert (r["rank_pairs"], r["rank_agreeing_pairs"]) == (want_rank.n, want_rank.successes)
    assert r["rank_agreement_lower"] == pytest.approx(want_rank.lower)
    assert r["rank_agreement_upper"] == pytest.approx(want_rank.upper)
    assert r["agreement_interval"] == f"question-clustered, {want.questions} questions"


def test_every_output_shows_the_views_rows(db, world, capsys) -> None:
    """The report (JSON, HTML, CSV), the terminal words and the Dagster metadata show exactly
    the rows the views hold: one computation, shown identically."""
    from geo_pipeline.defs.analysis.metadata import ui_api_metadata
    from geo_pipeline.defs.markdown import md_text

    rep = reportmod.build_report(db, RUN)
    views = ui_api.sections(db, RUN)
    assert rep.ui_api == views and all(views.values())
    data = json.loads(exportmod.render(rep, "json"))
    agreement = data["ui_api_agreement"][0]
    assert agreement["pairs"] == views["ui_api_agreement"][0]["pairs"]
    assert agreement == pytest.approx(views["ui_api_agreement"][0])
    assert {r["channel"]: r["access"] for r in data["mention_rates"]} == {
        UI: "browser", API: "api", OTHER: "api"}  # fmt: skip
    shown = ui_api.display_rows(views)
    html = exportmod.render(rep, "html")
    for name, table in shown.items():
        for row in table:
            for value in row.values():
                assert f">{value}</td>" in html.replace("&#39;", "'"), (name, value)
    meta = ui_api_metadata(ui_api.sections(db, RUN, UI))
    text = meta["ui_api_agreement"].value
    for value in shown["ui_api_agreement"][0].values():  # the same words, escaped for Markdown
        assert md_text(value) in text
    assert meta["ui_api_agreement_rows"].value == ui_api.sections(db, RUN, UI)["ui_api_agreement"]
    # the terminal report (the demo's): the same words, every section titled
    from geo_pipeline.cli.ops import _print_ui_api, _Ui

    _print_ui_api(rep, _Ui(quiet=False))
    out = capsys.readouterr().out
    for name, table in shown.items():
        assert ui_api.SECTION_TITLES[name].lower() in out
        for row in table:
            for value in row.values():
                assert value in out, (name, value)
    # the CSV: each sample's access, whether it searched and its queries
    got = {r["sample_id"]: r for r in csv.DictReader(io.StringIO(exportmod.render(rep, "csv")))}
    for a in WORLD:
        r = got[world[a.channel, a.q, a.r]]
        assert r["access"] == {UI: "browser", API: "api", OTHER: "api"}[a.channel]
        assert r["search_queries"] == " | ".join(a.queries)


def test_a_run_made_before_0054_gets_its_access_at_the_next_refresh(db, world) -> None:
    """Without frozen access (a run created before migration 0054) the channels read 'unknown'
    and nothing is paired, never guessed; the next refresh freezes the registry's words."""
    db.execute("DELETE FROM geo.run_platforms WHERE run_id = %s", (RUN,))
    db.commit()
    assert {r["access"] for r in rows(db, "counted_answers", "sample_id")} == {"unknown"}
    assert rows(db, "ui_api_agreement", "ui_channel") == []
    refresh_analytics(db, RUN)
    db.commit()
    assert {r["access"] for r in rows(db, "counted_answers", "sample_id")} == {"browser", "api"}
    assert len(rows(db, "ui_api_agreement", "ui_channel")) == 1
