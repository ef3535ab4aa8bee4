"""The brand dashboard (issue 37, item 4), checked without Grafana (not installable here): its JSON
is a dashboard Grafana loads, every panel reads the provisioned analyst data source, the data
source's credentials come from the environment only, and every query -- with Grafana's macros and
template variables substituted the way Grafana's PostgreSQL data source does -- runs against a
real PostgreSQL as tenant A's analyst role over two tenants' data, returning tenant A's rows
only and the same numbers as the analyst views. (The data source points at the analyst endpoint,
port 6432: no analyst logs in to the service's server, issue 35; here the role is reached by a
login that starts as it, and test_analyst_pooler.py checks the endpoint's protocol side.)"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql
from psycopg.rows import dict_row

from geo_pipeline.analysis import analyse_run
from geo_pipeline.domain.stance import STANCE_VERSION
from geo_pipeline.store import tenancy
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer
from geo_pipeline_tests.integration.tenancy.helpers import analyst_role, analyst_session

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "brand.json"
DATASOURCE = DEPLOY / "grafana" / "provisioning" / "datasources" / "analyst.yaml"
UID = "geo-analyst"


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panel(dash: dict[str, Any], pid: int) -> dict[str, Any]:
    return next(p for p in dash["panels"] if p["id"] == pid)


# ------------------------------------------------------------------ Grafana's substitution
# Grafana's SQL data sources (public docs, "PostgreSQL query editor" -> Macros; "Variable syntax"
# -> Advanced variable format options):
#   $__timeFilter(col) -> col BETWEEN '<from RFC 3339, UTC>' AND '<to>'
#   $__timeFrom() / $__timeTo() -> '<from>' / '<to>'
#   ${var:sqlstring} -> every value quoted, ' doubled, joined by ','
#   a repeated panel sees its own single value of the repeat variable.
def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(text: str, variables: dict[str, list[str]], t_from: datetime, t_to: datetime) -> str:
    frm, to = f"'{_iso(t_from)}'", f"'{_iso(t_to)}'"
    out = re.sub(r"\$__timeFilter\(([^)]+)\)", lambda m: f"{m[1]} BETWEEN {frm} AND {to}", text)
    out = out.replace("$__timeFrom()", frm).replace("$__timeTo()", to)

    def sqlstring(m: re.Match[str]) -> str:
        values = variables[m[1]]
        return ",".join("'" + v.replace("'", "''") + "'" for v in values)

    out = re.sub(r"\$\{(\w+):sqlstring\}", sqlstring, out)
    assert "$" not in out, f"a macro or variable Grafana would expand is left: {out}"
    return out


def test_render_follows_grafana() -> None:
    t0, t1 = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 3, 12, tzinfo=UTC)
    got = render(
        "WHERE $__timeFilter(d) AND c IN (${c:sqlstring}) AND $__timeFrom() < x",
        {"c": ["a", "o'b"]},
        t0,
        t1,
    )
    assert got == (
        "WHERE d BETWEEN '2026-11-01T00:00:00Z' AND '2026-11-03T12:00:00Z' AND c IN "
        "('a','o''b') AND '2026-11-01T00:00:00Z' < x"
    )
    with pytest.raises(AssertionError):
        render("WHERE $__unixEpochFilter(d)", {}, t0, t1)


# ------------------------------------------------------------------ structure, offline
def test_dashboard_structure_and_the_one_interval() -> None:
    dash = _dashboard()
    ops = json.loads((DASHBOARD.parent / "geo_pipeline.json").read_text(encoding="utf-8"))
    assert dash["uid"] and dash["uid"] != ops["uid"] and dash["title"]
    assert dash["schemaVersion"] >= 36
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"monitor", "channel", "brand", "region", "mode", "tag", "stance_version"}
    for v in dash["templating"]["list"]:
        assert v["type"] == "query" and v["datasource"]["uid"] == UID
        if v["multi"]:  # opens on All: every channel's panel
            assert v["includeAll"] and v["current"]["value"] == ["$__all"]
        used = set(re.findall(r"\$\{(\w+):sqlstring\}", v["query"]))
        assert used <= names - {v["name"]}, (v["name"], used)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in dash["panels"]}
    assert any("Mention rate" in t for t in titles) and any("Share of voice" in t for t in titles)
    assert any("Flagged changes" in t for t in titles) and "Top cited domains" in titles
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == UID
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
        if "repeat" in p:
            assert p["repeat"] in names
        for t in p["targets"]:
            assert t["refId"] and t["rawSql"] and t["datasource"]["uid"] == UID
            assert t["format"] == "table" and t["rawQuery"]
            used = set(re.findall(r"\$\{(\w+):sqlstring\}", t["rawSql"]))
            assert used <= names, used
            # Never a second interval formula: the bands are the views' own columns.
            low = t["rawSql"].lower()
            for formula in ("sqrt", "wilson", "design_effect", "1.96", "t_critical", "analytics.("):
                assert formula not in low, (p["title"], formula)
    # The bands: the upper bound fills down to the lower, both selected by the query under
    # exactly those names, and they are the views' interval columns.
    for pid, lower, upper in (
        (1, "mention_rate_lower", "mention_rate_upper"),
        (2, "share_of_answers_lower", "share_of_answers_upper"),
    ):
        p = _panel(dash, pid)
        assert p["repeat"] == "channel"
        fills = [
            (o["matcher"]["options"], prop["value"])
            for o in p["fieldConfig"]["overrides"]
            for prop in o["properties"]
            if prop["id"] == "custom.fillBelowTo"
        ]
        assert fills == [("95% upper", "95% lower")]
        q = p["targets"][0]["rawSql"]
        assert f'{lower} AS "95% lower"' in q and f'{upper} AS "95% upper"' in q
    assert "AND flagged" in _panel(dash, 3)["targets"][0]["rawSql"]
    # By question tag: the views' rates and their interval columns, one stance version.
    stance = _panel(dash, 5)["targets"][0]["rawSql"]
    assert (
        "FROM analytics.stance_rates_by_tag" in stance
        and "Stance rates" in _panel(dash, 5)["title"]
    )
    for col in ("stance_rate_lower", "stance_rate_upper", "n_effective", "stance_version ="):
        assert col in stance, col
    assert "FROM analytics.brand_rates_by_tag" in _panel(dash, 6)["targets"][0]["rawSql"]


def test_the_data_source_is_one_analyst_login_from_the_environment() -> None:
    text = DATASOURCE.read_text(encoding="utf-8")
    ds = yaml.safe_load(text)["datasources"]
    assert [d["uid"] for d in ds] == [UID]
    d = ds[0]
    assert d["type"] == "grafana-postgresql-datasource"
    env = re.compile(r"^\$\{GEO_ANALYST_[A-Z_]+\}$")
    for value in (d["url"], d["user"], d["jsonData"]["database"], d["secureJsonData"]["password"]):
        assert env.match(value), f"not an environment reference: {value!r}"
    assert d["jsonData"]["maxOpenConns"] <= 10  # the login's connection limit
    assert "password" not in d and "password" not in d["jsonData"]
    compose = yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text(encoding="utf-8"))
    grafana_env = compose["services"]["grafana"]["environment"]
    for var in re.findall(r"\$\{(GEO_ANALYST_[A-Z_]+)\}", text):
        # passed through from deploy/.env, never a literal
        assert grafana_env[var].startswith("${" + var), (var, grafana_env[var])
    assert any(
        v.split(":")[1] == "/etc/grafana/provisioning"
        for v in compose["services"]["grafana"]["volumes"]
    )
    # The analyst endpoint (PgBouncer, port 6432), never the service's server (issue 35).
    assert "analyst-replica endpoint" in text and "6432" in text


def test_the_analyst_host_default_names_nothing_the_compose_file_does_not_define() -> None:
    """The endpoint runs next to the tenant's replica, outside this compose file: the operator
    sets GEO_ANALYST_DB_HOST. A default naming a host no service of the file provides (Grafana:
    'lookup analyst-endpoint: no such host') reads as if compose started one; so the default is
    empty, or a service of the file, and never the service's server."""
    compose = yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text(encoding="utf-8"))
    value = compose["services"]["grafana"]["environment"]["GEO_ANALYST_DB_HOST"]
    match = re.fullmatch(r"\$\{GEO_ANALYST_DB_HOST(?::?-(?P<default>[^}]*))?\}", value)
    assert match, value
    default = match["default"] or ""
    host = default.rpartition(":")[0] or default
    assert host in ("", *compose["services"]), f"{default!r} names no service of the compose file"
    assert host != "postgres", "no analyst logs in to the service's server (issue 35)"
    example = (DEPLOY / "env.example").read_text(encoding="utf-8")
    assert "GEO_ANALYST_DB_HOST" in example and "outside this compose file" in example


# ------------------------------------------------------------------ the queries, executed
QUESTIONS = ["哪个咖啡品牌最好？", "上班族早上买咖啡推荐哪个品牌？", "性价比最高的咖啡？"]
# Topics: two questions on "brand", one on "price" (the tag panels' rows).
TOPICS = {QUESTIONS[0]: "brand", QUESTIONS[1]: "brand", QUESTIONS[2]: "price"}
DAYS = [date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 3)]
CHANNELS = [{"platform": "kimi", "device": "web"}, {"platform": "deepseek", "device": "web"}]
LUCKIN, SB = "瑞幸咖啡", "星巴克"
# tenant -> channel -> day index -> per question, how many of 4 answers name Luckin (the others
# Starbucks). A's kimi jumps from none to all on day 2: a flagged change.
HITS = {
    "a": {"kimi__web": [[0, 0, 0], [4, 4, 4], [4, 4, 4]],
          "deepseek__web": [[2, 2, 1], [2, 1, 2], [1, 2, 2]]},
    "b": {"kimi__web": [[1, 2, 3], [3, 2, 1], [4, 0, 4]],
          "deepseek__web": [[4, 4, 4], [0, 0, 0], [0, 0, 0]]},
}  # fmt: skip
DOMAIN = {"a": "a-only.example", "b": "b-only.example"}


@dataclass(frozen=True)
class Two:
    admin_url: str
    a_url: str
    a: str
    b: str
    monitor: dict[str, str]
    cited: dict[tuple[str, str], int]  # (platform, domain) -> A's answers citing it


@pytest.fixture(scope="module")
def two(pg_admin_url: str, pg_template: str) -> Iterator[Two]:
    from geo_pipeline_tests.fixtures.postgres import create_database, drop_database

    name = f"geo_dash_{uuid.uuid4().hex[:10]}"
    url = create_database(pg_admin_url, name, template=pg_template)
    sfx = uuid.uuid4().hex[:8]
    tenants = {"a": f"dash-a-{sfx}", "b": f"dash-b-{sfx}"}
    monitor = {k: f"m-{k}-{sfx}" for k in tenants}
    cited: dict[tuple[str, str], int] = {}
    login = None
    sessions = ExitStack()
    try:
        with psycopg.connect(url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
            c: Any = conn
            for t in tenants.values():
                tenancy.create_tenant(c, t)
            c.commit()
            for k, tenant in tenants.items():
                for d, day in enumerate(DAYS):
                    run_id = f"r-{k}-{sfx}-{day:%m%d}"
                    samples = make_run(c, run_id, questions=QUESTIONS, channels=CHANNELS,
                                       repeats=4, monitor=monitor[k], scheduled_for=day,
                                       tenant=tenant,
                                       question_tags={q: {"topic": t} for q, t in TOPICS.items()},
                                       )  # fmt: skip
                    for s in samples:
                        luckin = s["repeat_index"] < HITS[k][s["channel"]][d][s["question_index"]]
                        cites = [("cited", DOMAIN[k])]
                        if luckin:
                            cites.append(("cited", "luckincoffee.com"))
                        if s["question_index"] == 0:
                            cites.append(("retrieved", "zhihu.com"))
                        text = "推荐瑞幸。" if luckin else "推荐星巴克。"
                        store_answer(c, s["sample_id"], text, citations=cites)
                        if k == "a":
                            platform = s["channel"].split("__")[0]
                            for rel, dom in cites:
                                if rel == "cited":
                                    cited[(platform, dom)] = cited.get((platform, dom), 0) + 1
                    analyse_run(c, run_id)
        # A's analyst role: NOLOGIN on the service's server (issue 35; the dashboard's login lives
        # on A's replica, behind the endpoint), reached here by a login that starts as it.
        login = analyst_role(url, tenants["a"])
        a_url = sessions.enter_context(analyst_session(url, login))
        yield Two(
            admin_url=url,
            a_url=a_url,
            a=tenants["a"],
            b=tenants["b"],
            monitor=monitor,
            cited=cited,
        )
    finally:
        sessions.close()
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            drop_database(pg_admin_url, name)
            if login:
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(login)))


def _rows(url: str, query: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:  # type: ignore[arg-type]
        return [dict(r) for r in conn.execute(query).fetchall()]  # type: ignore[arg-type]


def _one(rows: list[dict[str, Any]]) -> list[str]:
    return [next(iter(r.values())) for r in rows]


T_FROM = datetime(2026, 10, 31, tzinfo=UTC)
T_TO = datetime(2026, 11, 4, tzinfo=UTC)


def _variables(two: Two, url: str, monitor: str | None = None) -> dict[str, list[str]]:
    """The template variables as Grafana resolves them for ``url``'s login: each query run in
    dependency order, the first value of a single-valued variable, All of a multi-valued one."""
    dash = _dashboard()
    out: dict[str, list[str]] = {}
    for v in dash["templating"]["list"]:
        values = _one(_rows(url, render(v["query"], out, T_FROM, T_TO)))
        if v["name"] == "monitor" and monitor is not None:
            values = [monitor]
        assert values, f"variable {v['name']} has no value"
        out[v["name"]] = values if v["multi"] else values[:1]
    return out


def test_the_variables_offer_tenant_a_only(two: Two) -> None:
    v = _variables(two, two.a_url)
    monitors = render(_dashboard()["templating"]["list"][0]["query"], {}, T_FROM, T_TO)
    assert _one(_rows(two.a_url, monitors)) == [two.monitor["a"]]  # B's is not even listed
    assert sorted(v["channel"]) == ["deepseek__web", "kimi__web"]
    assert v["brand"] == [LUCKIN]  # the monitored brand first
    # The superuser lists both tenants' monitors: the list above is RLS's doing, not the data's.
    assert sorted(_one(_rows(two.admin_url, monitors))) == sorted(two.monitor.values())


def _expected_trends(two: Two, channel: str, brand: str) -> list[dict[str, Any]]:
    return _rows(
        two.admin_url,
        "SELECT mention_rate, mention_rate_lower, mention_rate_upper, n, n_effective, questions"
        f" FROM analytics.brand_trends WHERE tenant_id = '{two.a}'"
        f" AND monitor_id = '{two.monitor['a']}' AND channel = '{channel}' AND brand = '{brand}'"
        " AND scheduled_for BETWEEN date '2026-10-31' AND date '2026-11-04'"
        " ORDER BY scheduled_for",
    )


def test_every_panel_returns_tenant_a_only_and_the_views_numbers(two: Two) -> None:
    dash = _dashboard()
    v = _variables(two, two.a_url)
    a_runs = f"(SELECT run_id FROM geo.runs WHERE tenant_id = '{two.a}')"

    # Mention rate, one repeated panel per channel: the views' rate and interval, day by day.
    mention = _panel(dash, 1)["targets"][0]["rawSql"]
    for channel in v["channel"]:
        got = _rows(two.a_url, render(mention, {**v, "channel": [channel]}, T_FROM, T_TO))
        assert [g["time"].date() for g in got] == DAYS
        want = _expected_trends(two, channel, LUCKIN)
        assert [
            (g["mention rate"], g["95% lower"], g["95% upper"], g["n"], g["effective n"],
             g["questions"]) for g in got
        ] == [tuple(w.values()) for w in want]  # fmt: skip
        for g in got:
            # (at a rate of 0 the views' lower bound is a rounding error above 0: 4e-17)
            assert g["95% lower"] - 1e-12 <= g["mention rate"] <= g["95% upper"] + 1e-12
            assert g["n"] == 12 and g["questions"] == 3
        rates = [g["mention rate"] for g in got]
        hits = HITS["a"][channel]
        assert rates == pytest.approx([sum(h) / 12 for h in hits])  # A's answers, not B's

    # Share of voice, per channel x region x mode: the table's share and its interval.
    share = _panel(dash, 2)["targets"][0]["rawSql"]
    for channel in v["channel"]:
        got = _rows(two.a_url, render(share, {**v, "channel": [channel]}, T_FROM, T_TO))
        want = _rows(
            two.admin_url,
            "SELECT share_of_answers_mentioning_any_brand, share_of_answers_lower,"
            " share_of_answers_upper, share_of_all_tracked_mentions,"
            " answers_mentioning_any_tracked_brand, share_n_effective, questions"
            f" FROM analytics.share_of_voice WHERE run_id IN {a_runs}"
            f" AND monitor_id = '{two.monitor['a']}' AND channel = '{channel}'"
            f" AND brand = '{LUCKIN}' AND region = '{v['region'][0]}' AND mode = '{v['mode'][0]}'"
            " ORDER BY scheduled_for, run_id",
        )
        assert len(got) == len(DAYS)
        assert [tuple(g.values())[1:] for g in got] == [tuple(w.values()) for w in want]
        # every answer names Luckin or Starbucks: the share is the mention rate here
        assert [g["share of answers naming any tracked brand"] for g in got] == pytest.approx(
            [sum(h) / 12 for h in HITS["a"][channel]]
        )

    # Flagged changes: the BH-flagged rows of brand_changes, A's only.
    changes = _panel(dash, 3)["targets"][0]["rawSql"]
    got = _rows(two.a_url, render(changes, v, T_FROM, T_TO))
    want = _rows(
        two.admin_url,
        "SELECT comparison, channel, brand, n, mention_rate, q_value FROM analytics.brand_changes"
        f" WHERE tenant_id = '{two.a}' AND monitor_id = '{two.monitor['a']}' AND flagged"
        " ORDER BY scheduled_for DESC, q_value, channel, brand, comparison",
    )
    assert want, "the planted jump should be flagged"
    assert [(g["comparison"], g["channel"], g["brand"], g["n"], g["mention_rate"], g["q_value"])
            for g in got] == [tuple(w.values()) for w in want]  # fmt: skip
    assert ("day_over_day", "kimi__web", LUCKIN) in {
        (g["comparison"], g["channel"], g["brand"]) for g in got
    }
    assert all(g["q_value"] <= g["fdr_q"] for g in got)

    # Top cited domains: A's citations as planted; B's own domain never appears.
    domains = _panel(dash, 4)["targets"][0]["rawSql"]
    got = _rows(two.a_url, render(domains, v, T_FROM, T_TO))
    assert {(g["platform"], g["domain"]): g["answers"] for g in got} == two.cited
    assert DOMAIN["b"] not in {g["domain"] for g in got}
    assert all(g["runs"] == len(DAYS) for g in got if g["domain"] == DOMAIN["a"])
    want = _rows(
        two.admin_url,
        "SELECT registrable_domain, platform, sum(answers) AS answers FROM analytics.source_domains"
        f" WHERE run_id IN {a_runs} AND relation = 'cited' GROUP BY 1, 2",
    )
    assert {(w["platform"], w["registrable_domain"]): w["answers"] for w in want} == two.cited


def test_the_tag_panels_show_the_views_stance_and_mention_rates_by_topic(two: Two) -> None:
    """Stance rates by topic and mention rates by topic, as tenant A's analyst: the rows of
    analytics.stance_rates_by_tag / brand_rates_by_tag for A's monitor, and the planted counts."""
    dash = _dashboard()
    v = _variables(two, two.a_url)
    assert v["tag"] == ["topic"] and v["stance_version"] == [STANCE_VERSION]
    a = f"tenant_id = '{two.a}' AND monitor_id = '{two.monitor['a']}'"
    stance = _rows(two.a_url, render(_panel(dash, 5)["targets"][0]["rawSql"], v, T_FROM, T_TO))
    want = _rows(
        two.admin_url,
        "SELECT scheduled_for, channel, value, stance, stance_rate, stance_rate_lower,"
        " stance_rate_upper, stance_count, n, n_effective, questions, interval_method"
        f" FROM analytics.stance_rates_by_tag WHERE {a} AND brand = '{LUCKIN}' AND tag = 'topic'"
        f" AND stance_version = '{STANCE_VERSION}'"
        " ORDER BY scheduled_for DESC, channel, value, stance",
    )
    assert want and [tuple(g.values())[1:] for g in stance] == [tuple(w.values())[1:] for w in want]
    assert [g["time"].date() for g in stance] == [w["scheduled_for"] for w in want]
    # "推荐瑞幸。" is a recommendation: every answer naming Luckin recommends it (each other stance
    # has a row at 0); n per topic is
    # A's planted count of answers naming Luckin (B's never enter).
    for g in stance:
        d = DAYS.index(g["time"].date())
        qs = [i for i, q in enumerate(QUESTIONS) if TOPICS[q] == g["tag value"]]
        assert g["n"] == sum(HITS["a"][g["channel"]][d][i] for i in qs)
        assert g["stance rate"] == (1.0 if g["stance"] == "recommended" else 0.0)
        assert g["95% lower"] <= g["stance rate"] <= g["95% upper"] + 1e-12
    mention = _rows(two.a_url, render(_panel(dash, 6)["targets"][0]["rawSql"], v, T_FROM, T_TO))
    assert len(mention) == len(DAYS) * 2 * 2  # days x channels x topics
    for g in mention:
        d = DAYS.index(g["time"].date())
        qs = [i for i, q in enumerate(QUESTIONS) if TOPICS[q] == g["tag value"]]
        assert (g["n"], g["mentions"], g["questions"]) == (
            4 * len(qs),
            sum(HITS["a"][g["channel"]][d][i] for i in qs),
            len(qs),
        )
    want = _rows(
        two.admin_url,
        "SELECT mention_rate, mention_rate_lower, mention_rate_upper FROM analytics.brand_rates_by_tag"
        f" WHERE {a} AND brand = '{LUCKIN}' AND tag = 'topic'"
        " ORDER BY scheduled_for DESC, channel, value",
    )
    assert [(g["mention rate"], g["95% lower"], g["95% upper"]) for g in mention] == [
        tuple(w.values()) for w in want
    ]


def test_the_time_range_filters_by_day(two: Two) -> None:
    v = _variables(two, two.a_url)
    mention = _panel(_dashboard(), 1)["targets"][0]["rawSql"]
    got = _rows(
        two.a_url,
        render(mention, {**v, "channel": ["kimi__web"]},
               datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 2, 23, 59, tzinfo=UTC)),
    )  # fmt: skip
    assert [g["time"].date() for g in got] == [DAYS[1]]


def test_tenant_b_s_monitor_asked_for_by_name_returns_nothing_to_a(two: Two) -> None:
    """A's login given B's monitor (a hand-edited URL variable): every panel comes back empty,
    while the same queries as the superuser return B's rows -- RLS, not the filter, isolates."""
    dash = _dashboard()
    v = _variables(two, two.admin_url, monitor=two.monitor["b"])
    for p in dash["panels"]:
        q = render(p["targets"][0]["rawSql"], v, T_FROM, T_TO)
        assert _rows(two.a_url, q) == [], p["title"]
        if p["id"] != 3:  # B has flagged changes too, but need not: the others always have rows
            assert _rows(two.admin_url, q), p["title"]
