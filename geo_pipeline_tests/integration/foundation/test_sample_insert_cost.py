"""What inserting a run's samples costs, and what it still guarantees (issue 39, migration 0033).

create_run sends the same statements whatever the run's size (its batches are one statement, its
samples one COPY); work is counted by PostgreSQL (geo_pipeline.store.work), never timed. The
7-column identity index is gone (the dearest per-row cost of the COPY); R5 is kept by the
database: a sample id is the hash of its identity, so a second sample of one identity collides
on the primary key, and a made-up id or a changed identity is refused.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.domain.plan import sample_id_for
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store.queries import sql_dir
from geo_pipeline.store.work import measured
from geo_pipeline_tests.fixtures.postgres import with_database
from geo_pipeline_tests.growth import plan_of
from geo_pipeline_tests.integration.evidence.helpers import seed_sample

# The migration that last wrote the SQL rule (geo.sample_id_for).
RULE = sql_dir() / "migrations" / "0087_sample_id_rule_cheaper.sql"

COPY_ONE = """INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,
                question_index, platform, device, region, mode, repeat_index, screenshot_policy)
              SELECT %(id)s, run_id, tenant_id, batch_no, question_revision, question_index,
                     platform, device, region, mode, %(repeat)s, screenshot_policy
              FROM geo.samples WHERE sample_id = %(of)s"""


@pytest.fixture
def run(db: Any) -> dict[str, Any]:
    """A funded tenant and one small run, committed; one of its samples."""
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    create_run(db, plan_of(1, "insert-cost"), dispatch=False)
    db.commit()
    row = db.execute(
        "SELECT * FROM geo.samples WHERE run_id = 'insert-cost' ORDER BY sample_id LIMIT 1"
    ).fetchone()
    return dict(row)


def test_create_run_sends_the_same_statements_whatever_its_size(db: Any) -> None:
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    work = {}
    for questions in (5, 50):  # 1,000 and 10,000 samples: 10 and 100 batches
        plan = plan_of(questions, f"stmts-{questions}")
        with measured(db) as w:
            assert create_run(db, plan) == (plan.run_id, True)
        work[questions] = w
    assert work[5].statements > 0
    assert work[50].statements == work[5].statements, (work[5], work[50])


def test_every_sample_id_in_the_database_is_its_identity_hash(db: Any, run: dict[str, Any]) -> None:
    keys = ("question_revision", "platform", "device", "region", "mode", "repeat_index")
    rows = db.execute("SELECT * FROM geo.samples WHERE run_id = 'insert-cost'").fetchall()
    assert len(rows) == 200
    assert all(r["sample_id"] == sample_id_for(r["run_id"], *(r[k] for k in keys)) for r in rows)


def test_a_made_up_sample_id_is_refused(db: Any, run: dict[str, Any]) -> None:
    """A new identity (another repeat) under an id that is not its hash."""
    with pytest.raises(psycopg.errors.CheckViolation, match="sample_id_is_identity_hash"):
        db.execute(COPY_ONE, {"id": "s" + "f" * 24, "repeat": 999, "of": run["sample_id"]})
    db.rollback()


def test_a_second_sample_of_one_identity_is_refused(db: Any, run: dict[str, Any]) -> None:
    """R5: the identity's own id is taken already (and any other id fails the check above)."""
    with pytest.raises(psycopg.errors.UniqueViolation, match="samples_pkey"):
        db.execute(
            COPY_ONE,
            {"id": run["sample_id"], "repeat": run["repeat_index"], "of": run["sample_id"]},
        )
    db.rollback()


def test_a_samples_identity_cannot_change(db: Any, run: dict[str, Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="sample_id_is_identity_hash"):
        db.execute(
            "UPDATE geo.samples SET repeat_index = repeat_index + 1000 WHERE sample_id = %s",
            (run["sample_id"],),
        )
    db.rollback()


def test_samples_of_a_partition_are_found_by_index(db: Any, run: dict[str, Any]) -> None:
    """The (run, channel) partition queries reach their rows by the samples_run_channel index."""
    db.execute("SET LOCAL enable_seqscan = off")
    plan = db.execute(
        "EXPLAIN (FORMAT JSON) SELECT sample_id FROM geo.samples"
        " WHERE run_id = %s AND channel = %s",
        (run["run_id"], run["channel"]),
    ).fetchone()
    text = str(plan)
    assert "samples_run_channel" in text, text
    db.rollback()


# ------------------------------------------------------------------ the run key (migration 0035)
def test_create_run_looks_its_run_up_once_not_once_per_sample(db: Any) -> None:
    """The run of the inserted samples is checked per statement: index scans do not follow the
    samples (the foreign key made one scan of geo.runs per sample: 1,097 -> 10,232 scans)."""
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    work = {}
    for questions in (5, 50):  # 1,000 and 10,000 samples
        plan = plan_of(questions, f"scans-{questions}")
        with measured(db) as w:
            create_run(db, plan)
        work[questions] = w
    assert work[5].scans > 0
    # 9,000 more samples: per-batch scans remain (the outbox's hint per batch and channel, 100
    # samples a batch), but fewer than one scan per 10 samples (the key made one per sample).
    assert work[50].scans - work[5].scans < 9_000 / 10, (work[5], work[50])


def _insert(db: Any, run_id: str, tenant_id: str, like: dict[str, Any]) -> None:
    keys = ("question_revision", "platform", "device", "region", "mode")
    db.execute(
        "INSERT INTO geo.samples (sample_id, run_id, tenant_id, batch_no, question_revision,"
        " question_index, platform, device, region, mode, repeat_index, screenshot_policy)"
        " VALUES (%s, %s, %s, 0, %s, 0, %s, %s, %s, %s, 77, 'off')",
        (sample_id_for(run_id, *(like[k] for k in keys), 77), run_id, tenant_id,
         *(like[k] for k in keys)),
    )  # fmt: skip


def test_a_sample_of_a_missing_run_is_refused(db: Any, run: dict[str, Any]) -> None:
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        _insert(db, "no-such-run", run["tenant_id"], run)
    db.rollback()


def test_a_sample_of_another_tenants_run_is_refused(db: Any, run: dict[str, Any]) -> None:
    db.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES ('other', 'other')")
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        _insert(db, run["run_id"], "other", run)
    db.rollback()


def test_a_sample_cannot_move_to_another_tenant(db: Any, run: dict[str, Any]) -> None:
    db.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES ('other', 'other')")
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        db.execute(
            "UPDATE geo.samples SET tenant_id = 'other' WHERE sample_id = %s", (run["sample_id"],)
        )
    db.rollback()


def test_a_runs_key_cannot_change(db: Any, run: dict[str, Any]) -> None:
    db.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES ('other', 'other')")
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        db.execute("UPDATE geo.runs SET tenant_id = 'other' WHERE run_id = %s", (run["run_id"],))
    db.rollback()


def test_deleting_a_run_deletes_its_samples(db: Any) -> None:
    ref = seed_sample(db)  # a run without ledger entries (the ledger keeps a run otherwise)
    with db.transaction():
        db.execute("DELETE FROM geo.runs WHERE run_id = %s", (ref.run_id,))
    n = db.execute("SELECT count(*) AS n FROM geo.samples WHERE run_id = %s", (ref.run_id,))
    assert n.fetchone()["n"] == 0


def test_a_run_being_filled_cannot_be_deleted(db: Any, db_url: str, run: dict[str, Any]) -> None:
    """The insert holds the run row (KEY SHARE, as the key did) until it commits: a concurrent
    delete waits for it (here: gives up at its lock timeout)."""
    _insert(db, run["run_id"], run["tenant_id"], run)  # not committed
    with psycopg.connect(db_url, autocommit=True) as other:
        other.execute("SET lock_timeout = '100ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("DELETE FROM geo.runs WHERE run_id = %s", (run["run_id"],))
    db.rollback()


# ------------------------------------------------------------------ the one rule (migration 0051)
def test_an_id_of_any_other_shape_is_refused_by_the_identity_check(
    db: Any, run: dict[str, Any]
) -> None:
    """The format check is gone (an identity's hash is 's' + 24 hex digits by construction):
    an id of another shape is still refused."""
    with pytest.raises(psycopg.errors.CheckViolation, match="sample_id_is_identity_hash"):
        db.execute(COPY_ONE, {"id": "not an id", "repeat": 998, "of": run["sample_id"]})
    db.rollback()


def test_the_sql_rule_is_the_python_rule(db: Any, run: dict[str, Any]) -> None:
    keys = ("run_id", "question_revision", "platform", "device", "region", "mode")
    rows = db.execute(
        "SELECT *, geo.sample_id_for(run_id, question_revision, platform, device, region, mode,"
        " repeat_index + 7) AS other FROM geo.samples WHERE run_id = 'insert-cost'"
    ).fetchall()
    assert rows and all(
        r["other"] == sample_id_for(*(r[k] for k in keys), r["repeat_index"] + 7) for r in rows
    )


def _any_text(rnd: random.Random) -> str:
    """A text of any code point a PostgreSQL text can hold (no NUL): ASCII, the separator
    U+001F itself, tabs and newlines, CJK, combining marks, astral (4-byte UTF-8) emoji."""
    pools = [(1, 0x7F), (0x1F, 0x1F), (0x80, 0x7FF), (0x4E00, 0x9FFF), (0x300, 0x36F),
             (0xE000, 0xFFFD), (0x1F300, 0x1FAFF)]  # fmt: skip
    out = []
    for _ in range(rnd.choice([0, 1, 2, 7, 30, 200])):
        lo, hi = rnd.choice(pools)
        out.append(chr(rnd.randint(lo, hi)))
    return "".join(out)


IDENTITIES_SQL = """SELECT geo.sample_id_for(r, q, p, d, g, m, i) AS id
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::int[])
  WITH ORDINALITY AS u(r, q, p, d, g, m, i, n) ORDER BY n"""


def _identities(n: int, seed: int) -> list[tuple[Any, ...]]:
    rnd = random.Random(seed)
    return [
        (*(_any_text(rnd) for _ in range(6)), rnd.choice([0, 7, -1, 10**6, 2**31 - 1, -(2**31)]))
        for _ in range(n)
    ]


def test_the_sql_rule_is_the_python_rule_on_any_text(db: Any) -> None:
    """geo.sample_id_for (the check's rule) and domain.plan.sample_id_for give the same id for
    every identity, not only the plan's ASCII ones (migration 0087 rewrote the SQL rule)."""
    identities = _identities(3000, seed=39)
    rows = db.execute(IDENTITIES_SQL, [list(col) for col in zip(*identities, strict=True)])
    got = [r["id"] for r in rows.fetchall()]
    want = [sample_id_for(*k) for k in identities]
    assert len(got) == len(want) == 3000
    assert [(k, g, w) for k, g, w in zip(identities, got, want, strict=True) if g != w][:3] == []


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def test_the_sql_rule_is_the_python_rule_in_another_database_encoding(pg_admin_url: str) -> None:
    """The rule hashes the identity's UTF-8 bytes whatever the database's encoding (convert_to):
    in an EUC_CN database (Chinese text stored in another byte form) it still gives Python's id."""
    name = f"geo_test_euc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as c:
        c.execute(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'EUC_CN' "  # type: ignore[arg-type]
            "LC_COLLATE 'C' LC_CTYPE 'C'"
        )
    try:
        url = with_database(pg_admin_url, name)
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as c:  # type: ignore[arg-type]
            c.execute("SET client_encoding = 'UTF8'")
            c.execute("CREATE SCHEMA geo")
            c.execute(RULE.read_text(encoding="utf-8"))  # type: ignore[arg-type]
            rnd = random.Random(87)
            gb2312 = [c for c in map(chr, range(0x4E00, 0x9FA6)) if _encodes(c, "gb2312")]
            hanzi = "".join(rnd.choices(gb2312, k=400))  # what EUC_CN can store
            identities = [
                (
                    "r-瑞幸",
                    f"第{i}个问题：{hanzi[i : i + 20]}？",
                    "deepseek",
                    "web",
                    "cn",
                    "标准",
                    i,
                )
                for i in range(300)
            ]
            rows = c.execute(IDENTITIES_SQL, [list(col) for col in zip(*identities, strict=True)])
            got = [r["id"] for r in rows.fetchall()]
        assert got == [sample_id_for(*k) for k in identities]
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def test_plan_checks_hash_again_only_when_the_database_does_not(
    db: Any, run: dict[str, Any]
) -> None:
    """While sample_id_is_identity_hash is in force no stored id can be wrong, and the plan
    checks read a row per channel and batch; without it they hash every sample and find a
    wrong one."""
    from geo_pipeline.flows.create_run import check_plan
    from geo_pipeline.store.runs import run_config

    config = run_config(db, run["run_id"])
    assert db.execute("SELECT geo.sample_id_check_in_force() AS f").fetchone()["f"] is True
    assert all(c.passed for c in check_plan(db, config, run["run_id"]))
    db.execute("ALTER TABLE geo.samples DROP CONSTRAINT sample_id_is_identity_hash")
    assert db.execute("SELECT geo.sample_id_check_in_force() AS f").fetchone()["f"] is False
    assert all(c.passed for c in check_plan(db, config, run["run_id"]))  # re-hashed: all right
    db.execute(
        "UPDATE geo.samples SET repeat_index = repeat_index + 1000 WHERE sample_id = %s",
        (run["sample_id"],),
    )
    failed = [c for c in check_plan(db, config, run["run_id"]) if not c.passed]
    assert [(c.name, c.channel) for c in failed] == [("sample_identities_unique", run["channel"])]
    assert failed[0].metadata["examples"] == [run["sample_id"]]
    db.rollback()


# ------------------------------------------------------------ the indexes a new sample enters
# The index entries a freshly planned sample writes are most of a run's insert cost (issue 39:
# index inserts were 54 % of a 100,000-sample COPY's backend CPU; each partial index a queued
# sample enters measured ~0.15 s of backend CPU per 100k, the primary key ~0.3-0.5 s). Counted
# from the catalogue: every index of geo.samples whose predicate (if any) holds for a sample as
# create_run leaves it. A new index here is a cost on every run created: add it deliberately.
NEW_SAMPLE_INDEXES = {
    "samples_pkey",  # R5: one sample per identity (its id is its identity's hash)
    "samples_run_channel",  # a run's / a partition's samples
    # the claim's candidates per (tenant, platform), highest-priority and (per priority)
    # oldest-due; the sweeper and the gauges' queued rows (migration 0069: the two indexes
    # samples_due and samples_queued_tenant_due that repeated it are gone)
    "samples_queued_tenant_priority",
}


def test_a_new_sample_enters_only_the_indexes_its_readers_need(
    db: Any, run: dict[str, Any]
) -> None:
    indexes = db.execute(
        "SELECT c.relname AS name, pg_get_expr(i.indpred, i.indrelid) AS predicate"
        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'geo.samples'::regclass ORDER BY c.relname"
    ).fetchall()
    entered = set()
    for ix in indexes:
        if ix["predicate"] is None:
            entered.add(ix["name"])
            continue
        holds = db.execute(
            f"SELECT ({ix['predicate']}) AS holds FROM geo.samples WHERE sample_id = %s",
            (run["sample_id"],),
        ).fetchone()["holds"]
        if holds:
            entered.add(ix["name"])
    assert entered == NEW_SAMPLE_INDEXES, sorted(entered)
