"""Schema migrations: ``sql/migrations/NNNN_what.sql``, applied in order, each in its own
transaction, recorded with a checksum. Idempotent: applying twice changes nothing; an applied
migration whose file changed is an error, not a silent skip.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from geo_pipeline.store.queries import sql_dir

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Serialises concurrent `db upgrade` calls (workers starting together).
_LOCK_ID = 0x67656F5F6D6967  # 'geo_mig'


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


class MigrationError(RuntimeError):
    pass


def migrations(directory: Path | None = None) -> list[Migration]:
    mdir = directory or sql_dir() / "migrations"
    found = []
    for path in sorted(mdir.glob("*.sql")):
        m = _FILE.match(path.name)
        if not m:
            raise MigrationError(f"migration file {path.name} must be named NNNN_what.sql")
        found.append(Migration(int(m.group(1)), m.group(2), path))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration numbers in {mdir}: {versions}")
    return found


def applied(conn: psycopg.Connection[Any]) -> dict[int, str]:
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('public.geo_schema_migrations') IS NOT NULL AS present")
        row = cur.fetchone()
        if not row or not _first(row):
            return {}
        cur.execute("SELECT version, checksum FROM public.geo_schema_migrations")
        return {int(str(_first(r))): str(_second(r)) for r in cur.fetchall()}


class SchemaNotReady(MigrationError):
    """The database lacks migrations this code needs: never migrated, or behind."""


def require_current(conn: psycopg.Connection[Any], where: str = "the database") -> int:
    """Raise SchemaNotReady unless every migration of this code is applied; returns the
    version. Processes call it before their first write, so an unmigrated database says what
    to do instead of failing on a missing relation."""
    have = applied(conn)
    conn.rollback()  # a read only: leave no transaction open on the caller's connection
    missing = [m for m in migrations() if m.version not in have]
    if missing:
        state = (
            "was never migrated"
            if not have
            else (f"is at schema version {max(have)}, {len(missing)} migrations behind")
        )
        raise SchemaNotReady(f"{where} {state}: run `geo-pipeline db upgrade`")
    return max(have, default=0)


def upgrade(conn: psycopg.Connection[Any], directory: Path | None = None) -> list[Migration]:
    """Apply every pending migration (of ``directory``, default sql/migrations); returns those
    applied now."""
    done: list[Migration] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
        conn.execute(
            """CREATE TABLE IF NOT EXISTS public.geo_schema_migrations (
                 version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        have = applied(conn)
        for mig in migrations(directory):
            if mig.version in have:
                if have[mig.version] != mig.checksum:
                    raise MigrationError(
                        f"migration {mig.path.name} was applied with checksum "
                        f"{have[mig.version][:12]} but the file now has {mig.checksum[:12]}: "
                        "never edit an applied migration, add a new one"
                    )
                continue
            with conn.transaction():
                conn.execute(mig.sql)  # type: ignore[arg-type]  # trusted file from the repo
                conn.execute(
                    "INSERT INTO public.geo_schema_migrations (version, name, checksum) "
                    "VALUES (%s, %s, %s)",
                    (mig.version, mig.name, mig.checksum),
                )
            done.append(mig)
    return done


def _first(row: object) -> object:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]  # type: ignore[index]


def _second(row: object) -> object:
    return list(row.values())[1] if isinstance(row, dict) else row[1]  # type: ignore[index]
