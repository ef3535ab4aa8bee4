"""Connections to the system's PostgreSQL.

One place decides where the database is: ``GEO_DATABASE_URL`` (D2: credentials only from the
environment). Runtime code uses psycopg 3; pools have an upper bound (D8).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.settings import settings

DATABASE_URL_ENV = "GEO_DATABASE_URL"

# The connection type used across the code base: rows come back as dicts.
Conn: TypeAlias = psycopg.Connection[dict[str, Any]]


class DatabaseUnavailable(RuntimeError):
    """The database could not be reached; the message says which URL and how to start one."""


def database_url(explicit: str | None = None) -> str:
    url = explicit or settings().database_url
    if not url:
        raise DatabaseUnavailable(
            f"no database configured: set {DATABASE_URL_ENV} "
            "(e.g. postgresql://postgres@127.0.0.1:5432/geo) or run `geo-pipeline demo`, "
            "which starts an embedded PostgreSQL"
        )
    return to_psycopg_url(url)


def to_psycopg_url(url: str) -> str:
    """Accept SQLAlchemy-style schemes too; psycopg wants plain ``postgresql://``."""
    for prefix in ("postgresql+psycopg2://", "postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def redact(url: str) -> str:
    """The URL with any password replaced, safe for logs and error messages (D2): the
    ``user:pass@`` form, and ``password=...`` in a key=value string or a query string."""
    url = re.sub(r"(password=)('[^']*'|[^\s&]+)", r"\1***", url, flags=re.IGNORECASE)
    try:
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        pass
    return url


def connect(url: str | None = None, *, autocommit: bool = False) -> Conn:
    target = database_url(url)
    try:
        return psycopg.connect(target, autocommit=autocommit, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {redact(target)}: {exc}".strip()
        ) from exc


@contextmanager
def transaction(url: str | None = None) -> Iterator[Conn]:
    """A connection inside one transaction: committed on success, rolled back on error."""
    with connect(url) as conn, conn.transaction():
        yield conn
