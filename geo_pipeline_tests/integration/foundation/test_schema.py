"""The migrations reproduce the canonical schema (procrastinate's check), and the database
enforces the state rules of geo_pipeline.domain.states exactly."""

from __future__ import annotations

import psycopg
import pytest

from geo_pipeline.domain.states import TRANSITIONS
from geo_pipeline.store import migrate
from geo_pipeline.store.queries import names, sql_dir
from geo_pipeline_tests.fixtures.postgres import create_database, drop_database

CATALOGUE = {
    "columns": """
        SELECT table_schema, table_name, column_name, data_type, is_nullable,
               coalesce(column_default, ''), coalesce(generation_expression, '')
        FROM information_schema.columns WHERE table_schema IN ('geo', 'analytics')""",
    "constraints": """
        SELECT n.nspname, c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname IN ('geo', 'analytics')""",
    "indexes": """
        SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname IN ('geo', 'analytics')""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
        WHERE NOT tgisinternal""",
    "functions": """
        SELECT n.nspname, p.proname, md5(pg_get_functiondef(p.oid)) FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname IN ('geo', 'analytics')""",
    "views": """
        SELECT schemaname, viewname, md5(definition) FROM pg_views
        WHERE schemaname IN ('geo', 'analytics')
        UNION ALL
        SELECT schemaname, matviewname, md5(definition) FROM pg_matviews
        WHERE schemaname IN ('geo', 'analytics')""",
    "reloptions": """
        SELECT n.nspname, c.relname, coalesce(array_to_string(c.reloptions, ','), '')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname IN ('geo', 'analytics')""",
    "transitions": "SELECT layer, coalesce(from_state, ''), to_state FROM geo.allowed_transitions",
    # Who may see and do what: row-level security, policies, grants and owners (tenancy).
    "policies": """
        SELECT schemaname, tablename, policyname, permissive, roles::text, cmd,
               coalesce(qual, ''), coalesce(with_check, '')
        FROM pg_policies WHERE schemaname IN ('geo', 'analytics')""",
    "security": """
        SELECT n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity,
               pg_get_userbyid(c.relowner)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname IN ('geo', 'analytics')""",
    "grants": """
        SELECT table_schema, table_name, grantee, privilege_type
        FROM information_schema.role_table_grants
        WHERE table_schema IN ('geo', 'analytics') AND grantee LIKE 'geo\\_%'""",
    # Owners and grants of what role_table_grants does not cover: schemas, functions, sequences.
    "acls": """
        SELECT 'schema', n.nspname, pg_get_userbyid(n.nspowner), coalesce(n.nspacl::text, '')
        FROM pg_namespace n WHERE n.nspname IN ('geo', 'analytics')
        UNION ALL
        SELECT 'function', p.oid::regprocedure::text, pg_get_userbyid(p.proowner),
               coalesce(p.proacl::text, '')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname IN ('geo', 'analytics')
        UNION ALL
        SELECT 'relation', c.oid::regclass::text, pg_get_userbyid(c.relowner),
               coalesce(c.relacl::text, '')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname IN ('geo', 'analytics')""",
    "sequences": """
        SELECT schemaname, sequencename, data_type::text, start_value, increment_by, cycle
        FROM pg_sequences WHERE schemaname IN ('geo', 'analytics')""",
    "types": """
        SELECT n.nspname, t.typname, t.typtype, coalesce(pg_get_constraintdef(c.oid), ''),
               coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                         FROM pg_enum e WHERE e.enumtypid = t.oid), '')
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        LEFT JOIN pg_constraint c ON c.contypid = t.oid
        WHERE n.nspname IN ('geo', 'analytics') AND t.typtype IN ('e', 'd', 'c')
          AND (t.typtype <> 'c' OR t.typrelid IN (SELECT oid FROM pg_class WHERE relkind = 'c'))""",
    "comments": """
        SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
        FROM pg_description d
        WHERE (d.classoid = 'pg_class'::regclass AND d.objoid IN (
                 SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname IN ('geo', 'analytics')))
           OR (d.classoid = 'pg_proc'::regclass AND d.objoid IN (
                 SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname IN ('geo', 'analytics')))
           OR (d.classoid = 'pg_namespace'::regclass AND d.objoid IN (
                 SELECT n.oid FROM pg_namespace n WHERE n.nspname IN ('geo', 'analytics')))""",
}


def catalogue(url: str) -> dict[str, set[tuple]]:
    with psycopg.connect(url) as conn:
        return {k: set(conn.execute(q).fetchall()) for k, q in CATALOGUE.items()}  # type: ignore[arg-type]


@pytest.fixture
def schema_db(pg_admin_url):
    import uuid

    name = f"geo_s_{uuid.uuid4().hex[:10]}"
    url = create_database(pg_admin_url, name)
    with psycopg.connect(url) as conn:
        conn.execute((sql_dir() / "schema.sql").read_text())  # type: ignore[arg-type]
    yield url
    drop_database(pg_admin_url, name)


def test_migrations_reproduce_canonical_schema(schema_db, empty_db_url):
    with psycopg.connect(empty_db_url) as conn:
        applied = migrate.upgrade(conn)
    assert applied, "no migrations found"
    from_schema, from_migrations = catalogue(schema_db), catalogue(empty_db_url)
    for part in CATALOGUE:
        only_schema = from_schema[part] - from_migrations[part]
        only_migr = from_migrations[part] - from_schema[part]
        assert not only_schema and not only_migr, (
            f"{part} differ: only in schema.sql {sorted(only_schema)[:5]}, "
            f"only in migrations {sorted(only_migr)[:5]}"
        )
    assert len(from_schema["columns"]) > 100


def test_upgrade_is_idempotent_and_checks_checksums(empty_db_url, tmp_path, monkeypatch):
    with psycopg.connect(empty_db_url) as conn:
        first = migrate.upgrade(conn)
        second = migrate.upgrade(conn)
    assert first and second == []
    # An edited, already-applied migration is an error, not a silent skip.
    fake = tmp_path / "sql"
    (fake / "migrations").mkdir(parents=True)
    (fake / "queries").mkdir()
    (fake / "schema.sql").write_text("")
    for m in migrate.migrations():
        (fake / "migrations" / m.path.name).write_text(m.sql)
    edited = fake / "migrations" / migrate.migrations()[0].path.name
    edited.write_text(edited.read_text() + "\n-- edited\n")
    monkeypatch.setenv("GEO_SQL_DIR", str(fake))
    with (
        psycopg.connect(empty_db_url) as conn,
        pytest.raises(migrate.MigrationError, match="never edit"),
    ):
        migrate.upgrade(conn)


def test_database_rules_equal_domain_rules(db):
    rows = db.execute("SELECT layer, from_state, to_state FROM geo.allowed_transitions").fetchall()
    in_db: dict[str, set[tuple[str, str]]] = {}
    initial: dict[str, str] = {}
    for r in rows:
        if r["from_state"] is None:
            initial[r["layer"]] = r["to_state"]
        else:
            in_db.setdefault(r["layer"], set()).add((r["from_state"], r["to_state"]))
    assert {k: frozenset(v) for k, v in in_db.items()} == TRANSITIONS
    assert initial == {
        "submission": "planned",
        "collection": "queued",
        "evidence": "pending",
        "analysis": "pending",
    }


def test_every_named_query_parses(db):
    """Each named query is valid SQL for this schema (PREPARE checks it without running it)."""
    import re

    from geo_pipeline.store.queries import Q

    temp_tables = {
        m.group(1)
        for name in names()
        for m in re.finditer(
            r"CREATE\s+TEMP(?:ORARY)?\s+TABLE\s+(?:IF NOT EXISTS\s+)?(\w+)", Q(name), re.I
        )
    }
    bad = []
    for i, name in enumerate(names()):
        from geo_pipeline.store.queries import Q

        text = Q(name)
        first = text.lstrip().split(None, 1)[0].upper() if text.strip() else ""
        if first not in {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES"}:
            continue  # PREPARE takes only these; DDL and COPY run in their own tests
        if any(re.search(rf"\b{t}\b", text) for t in temp_tables):
            continue  # reads a temp table that a sibling query creates at run time
        # psycopg placeholders -> PREPARE parameters of unknown type
        import re

        params: dict[str, int] = {}

        def sub(m, params=params):
            key = m.group(1) or f"_{len(params)}"
            params.setdefault(key, len(params) + 1)
            return f"${params[key]}"

        sql = re.sub(r"%\((\w+)\)s|%s", sub, text).rstrip().rstrip(";")
        if ";" in sql:
            continue  # multi-statement blocks are exercised by their own tests
        try:
            with db.transaction():
                db.execute(f"PREPARE q{i} AS {sql}")  # type: ignore[arg-type]
                db.execute(f"DEALLOCATE q{i}")  # type: ignore[arg-type]
        except psycopg.errors.IndeterminateDatatype:
            continue  # a bare parameter with no context; type comes from the caller
        except psycopg.Error as exc:
            bad.append(f"{name}: {str(exc).splitlines()[0]}")
    assert not bad, "\n".join(bad)
