"""A tenant's analyst replica (issue #35): a PostgreSQL server of the tenant's own, fed by logical
replication with row filters, so what its analyst can learn from it is about that tenant alone.

On the shared primary, row-level security keeps other tenants' rows out of an analyst's results,
but not out of the server's catalogue: planner estimates (``pg_statistic``), ``reltuples`` and
``pg_stat_user_tables`` counts are table-wide, and every login can name every role
(``oid::regrole``). No grant closes those per row. A server that holds one tenant's rows and one
tenant's login does: its statistics are computed from that tenant's rows, its role list holds
that tenant's login, the operator and the schema's group roles.

- **primary** (``wal_level=logical``): a publication with an opaque name publishes every
  analyst-readable tenant table (``replicated_tables`` in sql/queries/replica.sql) with the row
  filter ``WHERE (tenant_id = '<tenant>')``; migration 0058 gives each a replica identity that
  covers tenant_id, which PostgreSQL needs to publish UPDATE and DELETE through the filter;
- **question texts** (``geo.question_revisions``) are shared by tenants (content-addressed), so
  no row filter can publish them: ``create`` copies the tenant's, and every pass of the
  replica's guard (``guard-analysts --replica``) copies those of later runs (until then
  ``analytics.sample_facts`` lacks those runs' rows);
- **replica** (its own server, one per tenant): the project's migrations (so the ``analytics``
  views, policies, grants and revokes are the primary's; views are defined there, not
  replicated), the replicated tables emptied once, a subscription of the same opaque name, the
  database's limits (connection limit, ``temp_file_limit``, timeouts, read-only by default), and
  then the tenant's analyst login, bound there (the analyst guard runs against it:
  ``guard-analysts --replica``; no analyst logs in to the primary).

Schema changes are not replicated: after a migration of the primary, run ``create`` again (it
migrates the replica and refreshes the subscription). Everything here runs as a superuser on
both servers (CREATE SUBSCRIPTION and migration 0031 need one).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from geo_pipeline.store import migrate, tenancy
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

# The replica database's own limits (ALTER DATABASE, by the operator). A login may still SET
# the timeouts for its session; the analyst guard, run against the replica, cancels past them.
REPLICA_CONNECTION_LIMIT = tenancy.ANALYST_CONNECTION_LIMIT
REPLICA_SETTINGS = {
    "default_transaction_read_only": "on",
    "statement_timeout": f"{tenancy.ANALYST_STATEMENT_SECONDS}s",
    "idle_in_transaction_session_timeout": f"{tenancy.ANALYST_STATEMENT_SECONDS}s",
    "temp_file_limit": "1GB",
}
SYNC_TIMEOUT_S = 600.0


class ReplicaError(RuntimeError):
    """The replica cannot be made or read as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ReplicaCreated:
    tenant_id: str
    publication: str  # also the subscription's and the replication slot's name
    tables: list[str]
    grant: tenancy.AnalystGrant | None  # None: the tenant's login on the replica existed


def _one(conn: Conn, name: str, params: dict[str, Any] | None = None) -> Any:
    row = conn.execute(Q(name), params or {}).fetchone()
    assert row is not None, name
    return next(iter(dict(row).values()))


def _run_ddl(conn: Conn, name: str, params: dict[str, Any]) -> None:
    """Run the statement the named query composes (DDL takes no bind parameters)."""
    for row in conn.execute(Q(name), params).fetchall():
        conn.execute(next(iter(dict(row).values())))


def replicated_tables(conn: Conn) -> list[str]:
    return [r["rel"] for r in conn.execute(Q("replica.replicated_tables"))]


def tenant_tables_not_replicated(conn: Conn) -> list[str]:
    replicated = replicated_tables(conn)
    return [
        r["rel"]
        for r in conn.execute(Q("replica.tenant_tables_not_replicated"), {"replicated": replicated})
    ]


def publication_of(primary: Conn, tenant_id: str) -> str | None:
    rows = primary.execute(Q("replica.publication_of_tenant"), {"tenant_id": tenant_id}).fetchall()
    return str(rows[0]["publication"]) if rows else None


def require_logical(primary: Conn) -> None:
    level = _one(primary, "replica.wal_level")
    if level != "logical":
        raise ReplicaError(
            f"the primary runs wal_level={level}; an analyst replica needs wal_level=logical "
            "(postgresql.conf or `ALTER SYSTEM SET wal_level = logical`, then a restart of the "
            "primary: docs/operations.md, 'Analyst replicas')"
        )


def publish(primary: Conn, tenant_id: str) -> tuple[str, list[str]]:
    """Create (or bring up to date) the tenant's publication; returns (name, tables). Autocommit."""
    require_logical(primary)
    exists = primary.execute(Q("tenancy.get_tenant"), {"tenant_id": tenant_id}).fetchone()
    if exists is None:
        raise ReplicaError(f"no tenant {tenant_id!r} on the primary (`tenants create` first)")
    # The replica identities (primary key + tenant_id) are built by the first replica only: a
    # deployment without analyst replicas keeps its inserts free of those indexes (0058).
    primary.execute(Q("replica.enable_replica_identities")).fetchone()
    tables = replicated_tables(primary)
    name = publication_of(primary, tenant_id)
    verb = "ALTER" if name else "CREATE"
    name = name or "ana_" + secrets.token_hex(6)
    _run_ddl(
        primary,
        "replica.publication_ddl",
        {"verb": verb, "publication": name, "tenant_id": tenant_id, "tables": tables},
    )
    return name, tables


def subscribe(replica: Conn, publication: str, conninfo: str, tables: list[str]) -> bool:
    """Migrate the replica, then subscribe it (first time: empty the tables, copy) or refresh its
    subscription. Returns True when the subscription was created. Autocommit."""
    replica.execute("SET default_transaction_read_only = off")
    replica.autocommit = False
    migrate.upgrade(replica)
    replica.commit()
    replica.autocommit = True
    own = {r["subscription"] for r in replica.execute(Q("replica.subscription"))}
    if own - {publication}:
        raise ReplicaError(
            f"this replica database already subscribes to {', '.join(sorted(own))}: one tenant "
            "per replica server (another tenant's rows and login would be visible to both)"
        )
    if publication in own:
        _run_ddl(
            replica,
            "replica.subscription_ddl",
            {"verb": "REFRESH", "subscription": publication, "conninfo": ""},
        )
        return False
    _run_ddl(replica, "replica.truncate_ddl", {"tables": tables})
    _run_ddl(
        replica,
        "replica.subscription_ddl",
        {"verb": "CREATE", "subscription": publication, "conninfo": conninfo},
    )
    return True


def set_limits(replica: Conn) -> None:
    _run_ddl(
        replica,
        "replica.database_limits_ddl",
        {"connections": REPLICA_CONNECTION_LIMIT, "settings": json.dumps(REPLICA_SETTINGS)},
    )


def subscription(replica: Conn) -> dict[str, Any] | None:
    row = replica.execute(Q("replica.subscription")).fetchone()
    return dict(row) if row else None


def wait_synced(replica: Conn, timeout_s: float = SYNC_TIMEOUT_S) -> dict[str, Any]:
    """Wait until every table of the subscription has its initial copy (polls the replica's
    pg_subscription_rel; the bound is for a server that never gets there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sub = subscription(replica)
        if sub and sub["tables"] and sub["tables_ready"] == sub["tables"]:
            return sub
        if time.monotonic() > deadline:
            raise ReplicaError(
                f"the replica's initial copy did not finish in {timeout_s:.0f} s: {sub}"
            )
        time.sleep(0.2)


def current_lsn(primary: Conn) -> str:
    return str(_one(primary, "replica.current_lsn"))


def wait_caught_up(
    primary: Conn, publication: str, lsn: str | None = None, timeout_s: float = SYNC_TIMEOUT_S
) -> None:
    """Wait until the replica has confirmed the primary's WAL up to ``lsn`` (default: now)."""
    target = lsn or current_lsn(primary)
    deadline = time.monotonic() + timeout_s
    while not _one(primary, "replica.caught_up", {"publication": publication, "lsn": target}):
        if time.monotonic() > deadline:
            slot = primary.execute(Q("replica.publisher_slot"), {"publication": publication})
            raise ReplicaError(
                f"the replica did not confirm {target} in {timeout_s:.0f} s: {slot.fetchall()}"
            )
        time.sleep(0.1)


def copy_question_texts(primary: Conn, replica: Conn, tenant_id: str) -> int:
    """Copy the texts of the tenant's questions (not replicated: shared by tenants). Returns the
    number of texts the replica did not have."""
    rows = primary.execute(Q("replica.tenant_question_texts"), {"tenant_id": tenant_id}).fetchall()
    return _insert_question_texts(replica, rows)


def _insert_question_texts(replica: Conn, rows: list[Any]) -> int:
    cur = replica.execute(
        Q("replica.insert_question_texts"),
        {
            "revisions": [r["question_revision"] for r in rows],
            "texts": [r["text"] for r in rows],
            "created": [r["created_at"] for r in rows],
        },
    )
    return cur.rowcount


def sync_question_texts(primary: Conn, replica: Conn) -> int:
    """Copy the texts the replica's samples ask and it lacks (runs made since the last copy), as
    the replica's guard does on every pass. Reads the replica's samples and, on the primary, only
    the runs that ask a missing text. Returns the number of texts copied."""
    tenants = [r["tenant_id"] for r in replica.execute(Q("replica.replica_tenant"))]
    if len(tenants) != 1:  # before the first `create`: nothing to copy for
        return 0
    missing = replica.execute(Q("replica.missing_question_texts")).fetchall()
    if not missing:
        return 0
    rows = primary.execute(
        Q("replica.question_texts_of_runs"),
        {
            "tenant_id": tenants[0],
            "run_ids": [r["run_id"] for r in missing],
            "revisions": [r["question_revision"] for r in missing],
        },
    ).fetchall()
    return _insert_question_texts(replica, rows)


def create(
    primary: Conn,
    replica: Conn,
    tenant_id: str,
    conninfo: str,
    *,
    login: str | None = None,
    timeout_s: float = SYNC_TIMEOUT_S,
) -> ReplicaCreated:
    """The whole command: publish, subscribe, wait for the copy, set the limits, grant the login
    (an opaque one unless ``login``; none if the tenant has one on this replica already)."""
    publication, tables = publish(primary, tenant_id)
    subscribe(replica, publication, conninfo, tables)
    wait_synced(replica, timeout_s)
    set_limits(replica)
    copy_question_texts(primary, replica, tenant_id)
    replica.autocommit = False
    grant = None
    if not tenancy.analyst_logins(replica, tenant_id):
        grant = tenancy.grant_analyst(replica, tenant_id, login)
    replica.commit()
    return ReplicaCreated(tenant_id, publication, tables, grant)


def status(primary: Conn, replica: Conn | None, tenant_id: str) -> dict[str, Any]:
    publication = publication_of(primary, tenant_id)
    out: dict[str, Any] = {"tenant_id": tenant_id, "publication": publication}
    if publication:
        slot = primary.execute(Q("replica.publisher_slot"), {"publication": publication}).fetchone()
        out.update(dict(slot) if slot else {"slot_name": None})
    if replica is not None:
        sub = subscription(replica)
        out["subscription"] = sub
        out["analyst_logins"] = [r["login"] for r in tenancy.analyst_logins(replica, tenant_id)]
    return out


def drop(primary: Conn, replica: Conn | None, tenant_id: str) -> str | None:
    """Drop the subscription (and with it the slot) and the publication. Without a reachable
    replica, the slot is dropped on the primary. Returns the publication's name, if any."""
    publication = publication_of(primary, tenant_id)
    if publication is None:
        return None
    if replica is not None:
        params = {"verb": "DROP", "subscription": publication, "conninfo": ""}
        _run_ddl(replica, "replica.subscription_ddl", params)
    try:
        primary.execute(Q("replica.drop_slot"), {"publication": publication}).fetchall()
    except psycopg.errors.ObjectInUse as exc:  # the replica still streams from it
        raise ReplicaError(
            f"the replica still uses slot {publication}; drop with the replica's URL set"
        ) from exc
    _run_ddl(primary, "replica.drop_publication_ddl", {"publication": publication})
    return publication
