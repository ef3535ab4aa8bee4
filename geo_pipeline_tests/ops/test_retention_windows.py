"""Retention beyond evidence objects (D9): raw answer text past the raw window, the execution log
past its own window, published outbox rows and settled dead letters; analysis, aggregates and
the ledger kept. Real PostgreSQL, run as the service role's grants allow."""

from __future__ import annotations

from datetime import timedelta

from geo_pipeline.evidence.archive import LocalArchive
from geo_pipeline.flows import retention
from geo_pipeline_tests.ops.helpers import complete, fail, make_run


def _n(db, sql, *args):
    return db.execute(sql, args).fetchone()["n"]


def _finished_run(db, run_id="run-ops"):
    samples = make_run(db, run_id)
    for s in samples[:4]:
        # As the worker records them: the display derived from the text (sanitized_html '').
        complete(db, s, html="", raw=f"raw answer of *{s['sample_id']}*")
    for s in samples[4:]:
        fail(db, s, "X")
    # Analysis of two answers finished; the other two are still pending and keep their text.
    db.execute(
        "UPDATE geo.samples SET analysis_state='accepted' WHERE sample_id = ANY(%s)",
        ([s["sample_id"] for s in samples[:2]],),
    )
    db.commit()
    return samples


def test_raw_text_and_log_expire_on_their_windows(db, tmp_path):
    samples = _finished_run(db)
    archive = LocalArchive(tmp_path / "evidence")
    db.execute("UPDATE geo.tenants SET retention_days=30, log_retention_days=7")
    db.commit()
    transitions = _n(db, "SELECT count(*) AS n FROM geo.state_transitions WHERE run_id='run-ops'")
    assert transitions > 0
    now = retention.database_now(db)

    # Day 10: the log window (7) has passed, the raw window (30) has not.
    rep = retention.apply_retention(db, archive, now + timedelta(days=10), dry_run=False)
    assert [r.run_id for r in rep.runs] == ["run-ops"]
    assert rep.transitions == transitions and rep.answers == 0
    assert _n(db, "SELECT count(*) AS n FROM geo.state_transitions WHERE run_id='run-ops'") == 0
    assert _n(db, "SELECT count(*) AS n FROM geo.answers WHERE raw_text IS NULL") == 0

    # Day 31: raw text of the analysed answers goes; the pending ones keep theirs.
    later = now + timedelta(days=31)
    dry = retention.apply_retention(db, archive, later, dry_run=True)
    assert dry.answers == 2
    real = retention.apply_retention(db, archive, later, dry_run=False)
    assert real.as_dict() | {"dry_run": True} == dry.as_dict()
    rows = db.execute(
        "SELECT sample_id, raw_text, raw_expired_at, sanitized_html, raw_sha256 FROM geo.answers "
        "ORDER BY sample_id"
    ).fetchall()
    cleared = {r["sample_id"] for r in rows if r["raw_text"] is None}
    assert cleared == {s["sample_id"] for s in samples[:2]}
    assert all(r["raw_expired_at"] is not None for r in rows if r["raw_text"] is None)
    assert all(r["sanitized_html"] and r["raw_sha256"] for r in rows)  # display + proof kept
    # The display of a cleared answer was stored from its text before the text went.
    for r in rows:
        assert r["sanitized_html"] == f"<p>raw answer of <em>{r['sample_id']}</em></p>\n", r
    assert _n(db, "SELECT count(*) AS n FROM geo.samples WHERE run_id='run-ops'") == 8
    log = db.execute(
        "SELECT answers_cleared, transitions_deleted FROM geo.retention_log ORDER BY retention_id"
    ).fetchall()
    assert [(r["answers_cleared"], r["transitions_deleted"]) for r in log] == [
        (0, transitions),
        (2, 0),
    ]
    # Nothing is left to do.
    assert retention.apply_retention(db, archive, later, dry_run=False).runs == []


def test_published_outbox_rows_and_settled_dead_letters(db, tmp_path):
    samples = _finished_run(db)
    archive = LocalArchive(tmp_path / "evidence")
    db.execute("DELETE FROM geo.outbox")
    db.execute(
        "INSERT INTO geo.outbox (stream, kind, sample_id, published_at) VALUES "
        "('collect:kimi', 'collect', 'a', now() - interval '2 days'), "
        "('collect:kimi', 'collect', 'b', now() - interval '1 hour'), "
        "('collect:kimi', 'collect', 'c', NULL)"
    )
    db.execute(
        "INSERT INTO geo.dead_letters (stream, message_id, sample_id, deliveries, reason, at) "
        "VALUES ('collect:kimi', '1-0', %s, 5, 'x', now() - interval '2 days'), "
        "('collect:kimi', '2-0', 'unsettled', 5, 'x', now() - interval '2 days'), "
        "('collect:kimi', '3-0', 'unsettled', 5, 'x', now() - interval '40 days'), "
        "('collect:kimi', '4-0', %s, 5, 'x', now() - interval '1 hour')",
        (samples[0]["sample_id"], samples[1]["sample_id"]),
    )
    db.commit()
    now = retention.database_now(db)
    dry = retention.apply_retention(db, archive, now, dry_run=True)
    assert (dry.outbox, dry.dead_letters) == (1, 2)
    real = retention.apply_retention(
        db, archive, now, dry_run=False, windows=retention.TableWindows(chunk=1)
    )
    assert (real.outbox, real.dead_letters) == (1, 2)
    left = db.execute("SELECT sample_id FROM geo.outbox ORDER BY sample_id").fetchall()
    assert [r["sample_id"] for r in left] == ["b", "c"]  # the unpublished row is never touched
    dead = db.execute("SELECT message_id FROM geo.dead_letters ORDER BY message_id").fetchall()
    assert [r["message_id"] for r in dead] == ["2-0", "4-0"]


def test_the_service_role_may_not_expire_history(db, db_url, tmp_path):
    """Production processes run as geo_service, which may not rewrite the record of what
    happened: as the service, the pass removes attempts, published outbox rows and dead letters,
    and reports raw text and the transition log as refused (they stay); the owner expires them."""
    import psycopg
    from psycopg.rows import dict_row

    from geo_pipeline.store import tenancy
    from geo_pipeline_tests.integration.tenancy.helpers import login_role, with_user

    samples = _finished_run(db)
    db.execute(
        "INSERT INTO geo.dead_letters (stream, message_id, sample_id, deliveries, reason, at) "
        "VALUES ('collect:kimi', '9-0', %s, 5, 'x', now() - interval '40 days')",
        (samples[0]["sample_id"],),
    )
    db.execute(
        "INSERT INTO geo.outbox (stream, kind, sample_id, published_at) "
        "VALUES ('collect:kimi', 'collect', 'a', now() - interval '2 days')"
    )
    db.execute(
        "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id) "
        "VALUES (%s, 1, 1, 'w')",
        (samples[0]["sample_id"],),
    )
    db.commit()
    transitions = _n(db, "SELECT count(*) AS n FROM geo.state_transitions")
    archive = LocalArchive(tmp_path / "evidence")
    with login_role(db_url, "geo_ret", tenancy.SERVICE_ROLE) as login:
        with psycopg.connect(with_user(db_url, login), row_factory=dict_row) as svc:  # type: ignore[arg-type]
            assert svc.execute("SELECT current_user AS u").fetchone()["u"] == "geo_service"
            now = retention.database_now(svc) + timedelta(days=31)
            rep = retention.apply_retention(svc, archive, now, dry_run=False)
    assert rep.refused == [retention.REFUSED_HISTORY]
    assert (rep.answers, rep.transitions) == (0, 0)  # the report says what really happened
    assert rep.attempts == 1 and rep.outbox == 1 and rep.dead_letters == 1
    assert _n(db, "SELECT count(*) AS n FROM geo.state_transitions") == transitions
    assert _n(db, "SELECT count(*) AS n FROM geo.answers WHERE raw_text IS NULL") == 0
    # The owner's pass expires them.
    rep = retention.apply_retention(db, archive, now, dry_run=False)
    assert rep.refused == [] and rep.answers == 2 and rep.transitions == transitions
