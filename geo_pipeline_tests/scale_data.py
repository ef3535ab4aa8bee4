"""Data at scale for the growth tests and bench/_scale_analysis.py, and a count of the work
PostgreSQL did (buffers and rows read, as geo_pipeline.store.work counts them), which unlike
wall-clock time does not depend on the machine: a run of N completed samples with stored answers and citations (created the way the
product creates one, then moved through the allowed transitions and filled with COPY, as
bench/analysis.py does), and a monitor's analyst history of N samples written with COPY straight
into the analyst tables that analysis would have filled (one day = one run).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store.queries import Q
from geo_pipeline.store.work import Work

COMPETITORS = [("星巴克", "Starbucks"), ("库迪咖啡", "Cotti Coffee"), ("Manner Coffee", "Manner"),
               ("Tims咖啡", "Tim Hortons"), ("Costa咖啡", "Costa Coffee"), ("幸运咖", "Lucky Cup"),
               ("挪瓦咖啡", "NOWWA"), ("Peet's Coffee", "皮爷咖啡"), ("M Stand", "M Stand Coffee")]  # fmt: skip


def run_config(samples: int, tenant: str) -> dict[str, Any]:
    """A config whose plan has ``samples`` samples (a multiple of 200): 10 channel settings x
    20 repeats x samples / 200 questions; 10 tracked brands."""
    if samples < 200 or samples % 200:
        raise ValueError(f"samples must be a positive multiple of 200, got {samples}")
    return {
        "tenant": tenant,
        "brand": {"name": "瑞幸咖啡", "aliases": ["Luckin Coffee", "luckin", "瑞幸"],
                  "domains": ["luckincoffee.com"]},
        "competitors": [{"name": n, "aliases": [a],
                         "domains": [f"{a.lower().replace(' ', '')}.com"]} for n, a in COMPETITORS],
        "questions": [f"第{i}个问题：哪个咖啡品牌性价比最高？" for i in range(samples // 200)],
        "channels": [
            {"platform": "deepseek", "device": "web", "regions": ["cn", "global"],
             "modes": ["standard", "deep_thinking", "web_search"]},
            {"platform": "doubao", "device": "web", "modes": ["standard", "deep_thinking"]},
            {"platform": "kimi", "device": "web", "modes": ["standard", "web_search"]},
        ],
        "repeats": 20,
    }  # fmt: skip


def completed_run(conn: Any, run_id: str, samples: int, *, tenant: str = "scale") -> int:
    """Create a run of ``samples`` samples, every one completed with stored evidence, one answer
    (0-4 brands named, 1 in 25 invalid) and two citations; committed. Returns the sample count."""
    caps = load_registry().capabilities()
    config = normalise_and_validate(run_config(samples, tenant), caps)
    plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)
    create_run(conn, plan, confirm=False, dispatch=False)
    params = {"run_id": run_id}
    conn.execute(
        "UPDATE geo.samples SET submission_state = 'submitting' WHERE run_id = %(run_id)s", params
    )
    conn.execute(
        "UPDATE geo.samples SET submission_state = 'accepted', upstream_id = 'u' || sample_id,"
        " collection_state = 'running', lease_until = now() + interval '1h'"
        " WHERE run_id = %(run_id)s",
        params,
    )
    conn.execute(
        "UPDATE geo.samples SET collection_state = 'completed', lease_until = NULL,"
        " evidence_state = 'stored', completed_at = now() WHERE run_id = %(run_id)s",
        params,
    )
    rng = random.Random(run_id)
    brands = [config.brand, *config.competitors]
    filler = "这家咖啡的价格、口味和门店数量都各有特点，适合不同人群。" * 6
    with conn.cursor() as cur:
        with cur.copy(
            "COPY geo.answers (sample_id, revision, attempt_no, raw_text, sanitized_html,"
            " raw_sha256, captured_at, validity, validity_reason, validity_rule_version)"
            " FROM STDIN"
        ) as copy:
            for i, s in enumerate(plan.samples):
                picks = rng.sample(brands, rng.randint(0, 4))
                text = filler + "".join(f"\n- {rng.choice(b.names)}：推荐。" for b in picks)
                invalid = i % 25 == 0
                copy.write_row((
                    s.sample_id, 1, 1, text, text, hashlib.sha256(text.encode()).hexdigest(),
                    "2026-11-29T00:00:00Z", "invalid" if invalid else "valid",
                    "error_page" if invalid else None, "scale",
                ))  # fmt: skip
        with cur.copy(
            "COPY geo.citations (sample_id, revision, ordinal, relation, raw_url,"
            " normalized_url, registrable_domain) FROM STDIN"
        ) as copy:
            for s in plan.samples:
                for k in range(2):
                    b = rng.choice(brands)
                    dom = b.domains[0] if b.domains else "zhihu.com"
                    u = f"https://{dom}/a"
                    copy.write_row((s.sample_id, 1, k, "cited" if k == 0 else "retrieved", u, u,
                                    dom))  # fmt: skip
    conn.commit()
    return len(plan.samples)


# The analyst's questions of a monitor, as the dashboard and the run report ask them: the
# latest 30 days of mention rates and share of voice, the report's trend (ops.report_brand_trends
# with its run resolved to the monitor and day), and the day's flagged changes.
ANALYST_QUERIES = {
    "mention rate, 30 days": """
        SELECT scheduled_for, channel, brand, n, mention_rate, mention_rate_lower,
               mention_rate_upper, n_effective
          FROM analytics.channel_brand_metrics
         WHERE tenant_id = %(tenant)s AND monitor_id = %(monitor)s
           AND scheduled_for BETWEEN %(day)s::date - 29 AND %(day)s::date
         ORDER BY channel, brand, scheduled_for""",
    "share of voice, 30 days": """
        SELECT scheduled_for, channel, brand, n, share_of_answers_mentioning_any_brand,
               share_of_all_tracked_mentions
          FROM analytics.share_of_voice
         WHERE monitor_id = %(monitor)s
           AND scheduled_for BETWEEN %(day)s::date - 29 AND %(day)s::date
         ORDER BY channel, brand, scheduled_for""",
    "trends (report, 30 days)": """
        WITH fdr AS (SELECT (SELECT c.fdr_q FROM analytics.brand_changes c
                              WHERE c.monitor_id = %(monitor)s
                              ORDER BY c.scheduled_for DESC LIMIT 1) AS fdr_q)
        SELECT t.channel, t.brand, t.is_target, t.scheduled_for, t.n, t.mentions, t.questions,
               t.mention_rate, t.mention_rate_lower, t.mention_rate_upper, t.n_effective,
               t.flagged_day_over_day, t.flagged_rolling_7d, fdr.fdr_q
          FROM analytics.brand_trends t CROSS JOIN fdr
         WHERE t.monitor_id = %(monitor)s
           AND t.scheduled_for BETWEEN %(day)s::date - 29 AND %(day)s::date
         ORDER BY t.channel, t.is_target DESC NULLS LAST, t.brand, t.scheduled_for""",
    "changes flagged on the day": """
        SELECT channel, brand, comparison, rate_change, p_value, q_value, flagged
          FROM analytics.brand_changes
         WHERE monitor_id = %(monitor)s AND scheduled_for = %(day)s::date
         ORDER BY q_value NULLS LAST""",
}


@dataclass(frozen=True)
class History:
    """A monitor's analyst history: ``days`` daily runs of questions x channels x repeats."""

    tenant: str
    monitor: str
    first_day: date
    days: int
    samples: int
    brand_metrics_rows: int


def analyst_history(
    conn: Any,
    samples: int,
    *,
    tenant: str = "scale",
    monitor: str = "m-scale",
    questions: int = 50,
    channels: int = 10,
    repeats: int = 5,
    brands: int = 10,
    first_day: date = date(2024, 1, 1),
    stored_days: int | None = None,
) -> History:
    """``samples`` samples of history (days = samples / (questions x channels x repeats)) as
    the refresh leaves them: analytics.brand_metrics per run x channel x question x brand,
    channel_brand_metrics and share_of_voice per run x channel x brand, written with COPY and
    ANALYZEd, and the monitor's stored trends and changes (analytics.rebuild_brand_rollup);
    committed. Each question has its own rate per brand (the question effect)."""
    per_day = questions * channels * repeats
    days = max(1, samples // per_day)
    rng = random.Random(samples)
    names = [f"brand {b}" for b in range(brands)]
    q_rate = [[rng.betavariate(2, 5) for _ in range(brands)] for _ in range(questions)]
    bm_rows = 0
    with conn.cursor() as cur:
        with cur.copy(
            "COPY analytics.brand_metrics (run_id, tenant_id, monitor_id, scheduled_for, channel,"
            " platform, device, region, mode, question_revision, question_index, brand,"
            " is_target, samples, valid_samples, invalid_samples, analysing_samples,"
            " review_samples, n, mentions, mention_rate, domain_cited, domain_retrieved)"
            " FROM STDIN"
        ) as copy:
            for d in range(days):
                day = first_day + timedelta(days=d)
                run_id = f"{monitor}-{day:%Y%m%d}"
                for c in range(channels):
                    for q in range(questions):
                        for b in range(brands):
                            x = sum(rng.random() < q_rate[q][b] for _ in range(repeats))
                            copy.write_row((
                                run_id, tenant, monitor, day, f"p{c}/web/cn/standard", f"p{c}",
                                "web", "cn", "standard", f"q{q}", q, names[b], b == 0, repeats,
                                repeats, 0, 0, 0, repeats, x, x / repeats, 0, 0,
                            ))  # fmt: skip
                            bm_rows += 1
        conn.execute(
            "INSERT INTO analytics.channel_brand_metrics (run_id, tenant_id, monitor_id,"
            " scheduled_for, channel, platform, brand, is_target, samples, valid_samples,"
            " invalid_samples, analysing_samples, review_samples, n, mentions, mention_rate,"
            " domain_cited, questions)"
            " SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand,"
            " bool_or(is_target), sum(samples), sum(valid_samples), 0, 0, 0, sum(n),"
            " sum(mentions), sum(mentions)::float8 / sum(n), 0, count(*)"
            " FROM analytics.brand_metrics WHERE monitor_id = %(m)s"
            " GROUP BY run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand",
            {"m": monitor},
        )
        conn.execute(
            "INSERT INTO analytics.share_of_voice (run_id, tenant_id, monitor_id, scheduled_for, channel,"
            " region, mode, brand, is_target, n, answers_mentioning_brand,"
            " answers_mentioning_any_tracked_brand, brand_mentions, all_tracked_mentions,"
            " questions)"
            " SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, 'cn', 'standard', brand,"
            " is_target, n, mentions, n, mentions, n, questions"
            " FROM analytics.channel_brand_metrics WHERE monitor_id = %(m)s",
            {"m": monitor},
        )
        cur.execute(
            "ANALYZE analytics.brand_metrics, analytics.channel_brand_metrics,"
            " analytics.share_of_voice"
        )
        # and the monitor's stored trends and changes, as the refresh keeps them (of its last
        # ``stored_days`` days only, when given: a quicker set-up whose analyst tables hold fewer
        # rows than a real history's)
        if stored_days is None:
            cur.execute("SELECT analytics.rebuild_brand_rollup(%(m)s)", {"m": monitor})
        else:
            last = first_day + timedelta(days=days - 1)
            cur.execute(
                "SELECT analytics.rewrite_brand_days(%(m)s, ARRAY(SELECT generate_series("
                "%(last)s::date - %(n)s + 1, %(last)s::date, interval '1 day')::date))",
                {"m": monitor, "last": last, "n": stored_days},
            )
        cur.execute("ANALYZE analytics.brand_day_changes, analytics.brand_day_trends")
    conn.commit()
    return History(tenant, monitor, first_day, days, days * per_day, bm_rows)


def _counters(conn: Any) -> Work:
    # A backend sends its counts when it goes idle outside a transaction, at most once a second
    # unless told to: force it, let it go idle, then read in a fresh transaction.
    conn.commit()
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.commit()
    row = conn.execute(Q("work.cumulative_counters")).fetchone()
    conn.commit()
    rows_read, buffers, scans = row.values() if isinstance(row, dict) else row
    return Work(rows_read=int(rows_read), buffers=int(buffers), scans=int(scans))


def quiet_autovacuum(conn: Any) -> None:
    """Switch autovacuum off for the project's tables of this (scratch) database, so that only
    this connection's statements are counted."""
    tables = conn.execute(
        "SELECT format('%I.%I', n.nspname, c.relname) AS t FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname IN ('geo', 'analytics') AND c.relkind = 'r'"
    ).fetchall()
    for row in tables:
        name = row["t"] if isinstance(row, dict) else row[0]
        conn.execute(f"ALTER TABLE {name} SET (autovacuum_enabled = off)")
    conn.commit()


@contextmanager
def counted(conn: Any) -> Iterator[Work]:
    """What the block cost PostgreSQL, as ``geo_pipeline.store.work.measured`` counts it (rows
    and index entries read, buffers, scans; statements are not counted), for a block that
    commits by itself: from the database's cumulative statistics, so only this connection may
    be working in the database (a scratch database; see quiet_autovacuum). Commits around it."""
    work = Work()
    before = _counters(conn)
    yield work
    after = _counters(conn)
    work.rows_read = after.rows_read - before.rows_read
    work.buffers = after.buffers - before.buffers
    work.scans = after.scans - before.scans


# ------------------------------------------------------------------ bulk history (set-based)
# A history of N samples generated inside PostgreSQL (INSERT ... SELECT over generate_series,
# indexes built once after the rows), fast enough for 10M samples (20M analytics.brand_metrics
# rows). Its numbers repeat with a period of PERIOD days: day d's counts are a hash of
# (d mod PERIOD, channel, question, brand). So every stored trend and change of a day d >= BASE +
# PERIOD equals, but for its dates, the stored row of the day BASE + (d - BASE) mod PERIOD (its
# windows, d-13..d at most, all lie in full periods of the same counts): the refresh's rows are
# computed by the refresh's own functions (analytics.rebuild_brand_rollup) for the first
# BASE + PERIOD days only, then copied forward with their dates shifted, in one statement per
# table. check_bulk_rollup proves the copy equal to a full rebuild at a small size.
PERIOD = 28
BASE = 14  # the first day whose 14-day rolling window lies wholly in the history

_BULK_BM = """
INSERT INTO analytics.brand_metrics (run_id, tenant_id, monitor_id, scheduled_for, channel,
  platform, device, region, mode, question_revision, question_index, brand, is_target, samples,
  valid_samples, invalid_samples, analysing_samples, review_samples, n, mentions, mention_rate,
  domain_cited, domain_retrieved)
SELECT %(m)s || '-' || to_char(day, 'YYYYMMDD'), %(t)s, %(m)s, day, 'p' || c || '/web/cn/standard',
       'p' || c, 'web', 'cn', 'standard', 'q' || q, q, 'brand ' || b, b = 0, %(r)s, %(r)s, 0, 0,
       0, %(r)s, x, x::float8 / %(r)s, 0, 0
  FROM generate_series(%(d0)s::int, %(d1)s::int - 1) d
 CROSS JOIN LATERAL (SELECT %(first)s::date + d AS day) dd
 CROSS JOIN generate_series(0, %(c)s::int - 1) c
 CROSS JOIN generate_series(0, %(q)s::int - 1) q
 CROSS JOIN generate_series(0, %(b)s::int - 1) b
 CROSS JOIN LATERAL (SELECT least(%(r)s, floor(
         (abs(hashint8(((d %% %(p)s) * 1000003 + c * 10007 + q * 101 + b)::bigint)) %% 100000)
         / 100000.0 * (1 + 2 * %(r)s * (0.05 + (abs(hashint4(q * 17 + b)) %% 600) / 1000.0))
       ))::int AS x) xx
"""

_ROLLUP_COLUMNS = {
    "brand_day_changes": "scheduled_for, prev_from, prev_to, family",
    "brand_day_trends": "scheduled_for, run_ids",
}


def _shifted_select(table: str, monitor_days: str) -> str:
    """The stored rows of table's template days, each copied to every later day with the same
    place in the period, its date-bearing columns shifted."""
    cols = [
        "tenant_id", "monitor_id", "channel", "brand", "is_target", "scheduled_for",
        *(["comparison", "prev_from", "prev_to", "prev_n", "prev_mentions", "prev_mention_rate",
           "n", "mentions", "mention_rate", "rate_change", "questions", "df", "z", "p_value",
           "family", "family_size", "fdr_q", "q_value", "flagged"]
          if table == "brand_day_changes" else
          ["run_ids", "n", "mentions", "questions", "mention_rate", "design_effect",
           "n_effective", "mention_rate_lower", "mention_rate_upper", "n_7d", "mentions_7d",
           "questions_7d", "mention_rate_7d", "n_effective_7d", "mention_rate_7d_lower",
           "mention_rate_7d_upper", "flagged_day_over_day", "flagged_rolling_7d",
           "mention_rate_interval"]),
    ]  # fmt: skip
    exprs = {
        "scheduled_for": "s.scheduled_for + k.shift",
        "prev_from": "s.prev_from + k.shift",
        "prev_to": "s.prev_to + k.shift",
        "family": "'monitor ' || s.monitor_id || ', ' || (s.scheduled_for + k.shift) || ', '"
        " || s.comparison || ': every brand x channel tested'",
        "run_ids": "ARRAY(SELECT regexp_replace(x, '\\d{8}$', to_char(s.scheduled_for + k.shift,"
        " 'YYYYMMDD')) FROM unnest(s.run_ids) x)",
    }
    select = ", ".join(exprs.get(c, f"s.{c}") for c in cols)
    return (
        f"INSERT INTO analytics.{table} ({', '.join(cols)}) SELECT {select}"
        f" FROM analytics.{table} s"
        f" JOIN (SELECT g * %(p)s AS shift FROM generate_series(1, %(periods)s) g) k ON true"
        f" WHERE s.monitor_id = %(m)s AND s.scheduled_for >= %(base)s::date"
        f" AND s.scheduled_for < %(base)s::date + %(p)s"
        f" AND s.scheduled_for + k.shift <= %(last)s::date"
        # written day after day, as the refresh writes them (a query over 30 days reads 30
        # days' pages, not one row from each of many)
        f" ORDER BY s.scheduled_for + k.shift, s.channel, s.brand"
    )


def _rebuild_indexes(conn: Any, table: str) -> list[str]:
    """Drop table's indexes (the primary key too), returning the statements that restore them."""
    rows = conn.execute(
        "SELECT i.indexrelid::regclass::text AS idx, pg_get_indexdef(i.indexrelid) AS def,"
        " c.conname, pg_get_constraintdef(c.oid) AS cdef"
        " FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid"
        " AND c.contype IN ('p', 'u') WHERE i.indrelid = %s::regclass",
        (table,),
    ).fetchall()
    restore = []
    for r in rows:
        r = (
            r
            if isinstance(r, dict)
            else dict(zip(("idx", "def", "conname", "cdef"), r, strict=True))
        )
        if r["conname"]:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {r['conname']}")
            restore.append(f"ALTER TABLE {table} ADD CONSTRAINT {r['conname']} {r['cdef']}")
        else:
            conn.execute(f"DROP INDEX {r['idx']}")
            restore.append(r["def"])
    return restore


def bulk_analyst_history(
    conn: Any,
    samples: int,
    *,
    tenant: str = "scale",
    monitor: str = "m-scale",
    questions: int = 50,
    channels: int = 10,
    repeats: int = 5,
    brands: int = 10,
    first_day: date = date(2024, 1, 1),
) -> History:
    """As analyst_history (same shape: days = samples / (questions x channels x repeats)), made
    set-based inside PostgreSQL with periodic numbers (PERIOD above); committed. The first
    BASE + PERIOD days' trends and changes come from analytics.rebuild_brand_rollup, the later
    days' are those rows shifted by whole periods."""
    per_day = questions * channels * repeats
    days = max(1, samples // per_day)
    head = min(days, BASE + PERIOD)
    params = {"m": monitor, "t": tenant, "r": repeats, "c": channels, "q": questions,
              "b": brands, "p": PERIOD, "first": first_day}  # fmt: skip
    conn.execute("SET LOCAL work_mem = '256MB'")
    conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
    conn.execute(_BULK_BM, {**params, "d0": 0, "d1": head})
    _derived_tables(conn, monitor)
    conn.execute("SELECT analytics.rebuild_brand_rollup(%(m)s)", {"m": monitor})
    if days > head:
        restore = _rebuild_indexes(conn, "analytics.brand_metrics")
        conn.execute(_BULK_BM, {**params, "d0": head, "d1": days})
        for stmt in restore:
            conn.execute(stmt)
        conn.execute("DELETE FROM analytics.share_of_voice WHERE monitor_id = %(m)s", params)
        conn.execute("DELETE FROM analytics.channel_brand_metrics WHERE monitor_id = %(m)s", params)
        _derived_tables(conn, monitor)
        last = first_day + timedelta(days=days - 1)
        base = first_day + timedelta(days=BASE)
        shift = {**params, "base": base, "last": last, "periods": (days - BASE) // PERIOD + 1}
        for table in _ROLLUP_COLUMNS:
            conn.execute(_shifted_select(table, monitor), shift)
    conn.commit()
    conn.execute(
        "ANALYZE analytics.brand_metrics, analytics.channel_brand_metrics,"
        " analytics.share_of_voice, analytics.brand_day_changes, analytics.brand_day_trends"
    )
    conn.commit()
    return History(tenant, monitor, first_day, days, days * per_day, days * channels * questions
                   * brands)  # fmt: skip


def _derived_tables(conn: Any, monitor: str) -> None:
    """channel_brand_metrics and share_of_voice of the monitor's brand_metrics, as
    analyst_history writes them."""
    conn.execute(
        "INSERT INTO analytics.channel_brand_metrics (run_id, tenant_id, monitor_id,"
        " scheduled_for, channel, platform, brand, is_target, samples, valid_samples,"
        " invalid_samples, analysing_samples, review_samples, n, mentions, mention_rate,"
        " domain_cited, questions)"
        " SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand,"
        " bool_or(is_target), sum(samples), sum(valid_samples), 0, 0, 0, sum(n),"
        " sum(mentions), sum(mentions)::float8 / sum(n), 0, count(*)"
        " FROM analytics.brand_metrics WHERE monitor_id = %(m)s"
        " GROUP BY run_id, tenant_id, monitor_id, scheduled_for, channel, platform, brand"
        " ORDER BY scheduled_for, channel, brand",
        {"m": monitor},
    )
    conn.execute(
        "INSERT INTO analytics.share_of_voice (run_id, tenant_id, monitor_id, scheduled_for, channel,"
        " region, mode, brand, is_target, n, answers_mentioning_brand,"
        " answers_mentioning_any_tracked_brand, brand_mentions, all_tracked_mentions,"
        " questions)"
        " SELECT run_id, tenant_id, monitor_id, scheduled_for, channel, 'cn', 'standard', brand,"
        " is_target, n, mentions, n, mentions, n, questions"
        " FROM analytics.channel_brand_metrics WHERE monitor_id = %(m)s"
        " ORDER BY scheduled_for, channel, brand",
        {"m": monitor},
    )


def rollup_difference(conn: Any, monitor: str) -> dict[str, int]:
    """Rows of the monitor's stored trends and changes that differ from what
    analytics.rebuild_brand_rollup (the refresh's own functions, over the whole history) writes:
    per table, rows stored but not rebuilt plus rows rebuilt but not stored; rolls back."""
    out = {}
    for table in _ROLLUP_COLUMNS:
        conn.execute(f"CREATE TEMP TABLE stored_{table} AS SELECT * FROM analytics.{table}"
                     " WHERE monitor_id = %(m)s", {"m": monitor})  # fmt: skip
    conn.execute("SELECT analytics.rebuild_brand_rollup(%(m)s)", {"m": monitor})
    for table in _ROLLUP_COLUMNS:
        row = conn.execute(
            f"SELECT (SELECT count(*) FROM (SELECT * FROM stored_{table} EXCEPT ALL"
            f" SELECT * FROM analytics.{table} WHERE monitor_id = %(m)s) a)"
            f" + (SELECT count(*) FROM (SELECT * FROM analytics.{table} WHERE monitor_id = %(m)s"
            f" EXCEPT ALL SELECT * FROM stored_{table}) b) AS differ,"
            f" (SELECT count(*) FROM stored_{table}) AS stored",
            {"m": monitor},
        ).fetchone()
        differ, stored = row.values() if isinstance(row, dict) else row
        out[table] = int(differ)
        out[f"{table}_rows"] = int(stored)
    conn.rollback()
    return out
