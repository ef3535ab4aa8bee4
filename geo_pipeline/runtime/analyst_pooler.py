"""The analyst endpoint (issue #35): PgBouncer in front of a tenant's analyst server, so the
limits an analyst login lives under are the pooler's, not session defaults the login can change.

What PgBouncer holds whatever the session does (PgBouncer 1.18, pgbouncer.ini(5)):

- ``query_timeout``: a query running longer is cancelled by the pooler, whatever the session's
  ``statement_timeout`` (``SET statement_timeout = 0`` included);
- ``idle_transaction_timeout``: a client idle inside a transaction longer is disconnected;
- ``max_client_conn``: the (N+1)th client connection is refused ("no more connections allowed
  (max_client_conn)"); one pooler serves one tenant, so this is that tenant's limit;
- ``max_db_connections`` / ``max_user_connections``: at most this many server connections, so
  however many clients, the analyst server runs at most that many statements at once (the
  others wait, up to ``query_wait_timeout``);
- ``pool_mode = transaction`` with ``server_reset_query = DISCARD ALL`` and
  ``server_reset_query_always = 1``: a server connection is reset after every transaction, so no
  session ``SET`` outlives the transaction it ran in (a measured choice: docs/analysts.md);
- ``auth_type = scram-sha-256`` with an ``auth_file`` of the logins' SCRAM verifiers, read from
  the analyst server's catalogue by the operator (no password is written anywhere: a verifier
  cannot be replayed as a password; PgBouncer logs in to the server with the client's own SCRAM
  proof, "SCRAM pass-through"), in a state directory only the pooler's account can read;
- ``ignore_startup_parameters = extra_float_digits``: what BI drivers (JDBC, Grafana's) send at
  start-up, dropped rather than refused.

The server behind it should be a hot standby of the tenant's analyst replica
(``embedded_pg.start_standby``): there ``ALTER ROLE`` and every write are refused as read-only
by the server itself, which no pooler can parse SQL to do. The binary: ``GEO_PGBOUNCER_BIN``,
else ``pgbouncer`` on PATH (or ``/usr/sbin``, where Debian installs it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from geo_pipeline.runtime.embedded_pg import RunAs, _let_through
from geo_pipeline.settings import environment, settings
from geo_pipeline.store import tenancy
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

# The limits an analyst login lives under at the endpoint (the server's own defaults match).
QUERY_TIMEOUT_S = tenancy.ANALYST_STATEMENT_SECONDS
IDLE_TRANSACTION_TIMEOUT_S = tenancy.ANALYST_STATEMENT_SECONDS
MAX_CLIENT_CONNECTIONS = tenancy.ANALYST_CONNECTION_LIMIT
MAX_SERVER_CONNECTIONS = 4
IGNORED_STARTUP_PARAMETERS = ("extra_float_digits",)
START_TIMEOUT_S = 60.0


def replica_admits_analysts(replica: Conn) -> list[dict[str, object]]:
    """The replica's pg_hba.conf lines that let an analyst login reach the replica's own server
    over TCP (its login exists there: the standby is a copy). There a session is not read-only by
    the server and no pooler holds its time: ``ALTER ROLE <itself> SET statement_timeout = 0``
    works, and replicates to the standby. Reads the file as it is now (superuser)."""
    return [dict(r) for r in replica.execute(Q("pooler.replica_hba_admits_analysts"))]


def hba_warning(lines: list[dict[str, object]]) -> str | None:
    if not lines:
        return None
    shown = "; ".join(
        f"line {r['line_number']}: {r['type']} {r['database']} {r['user_name']} "
        f"{r['address'] or ''} {r['auth_method']}".replace("  ", " ")
        for r in lines
    )
    return (
        f"warning: the analyst replica's pg_hba.conf lets analyst logins connect to it directly, "
        f"bypassing the endpoint's limits ({shown}); put `host all +geo_analyst all reject` "
        "(and the same for hostssl) above them and reload the replica "
        "(docs/analysts.md, 'The analyst endpoint')"
    )


class PoolerUnavailable(RuntimeError):
    """PgBouncer could not be found or started; the message says what was tried."""


def pgbouncer_binary() -> str:
    """``GEO_PGBOUNCER_BIN``, else ``pgbouncer`` on PATH, else Debian's ``/usr/sbin/pgbouncer``
    (``/usr/sbin`` is often not on an ordinary user's PATH)."""
    env = settings().pgbouncer_bin
    candidates = [env] if env else []
    candidates += [shutil.which("pgbouncer") or "", "/usr/sbin/pgbouncer"]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise PoolerUnavailable(
        f"no `pgbouncer` binary found (tried {[c for c in candidates if c]}); install PgBouncer "
        "(Debian/Ubuntu: `apt-get install pgbouncer`, macOS: `brew install pgbouncer`) or set "
        "GEO_PGBOUNCER_BIN"
    )


@dataclass(frozen=True)
class PoolerConfig:
    server_host: str  # the analyst server: a host name, or a Unix socket directory
    server_port: int
    dbname: str = "geo"
    listen_addr: str = "127.0.0.1"
    listen_port: int = 6432
    query_timeout_s: float = QUERY_TIMEOUT_S
    idle_transaction_timeout_s: float = IDLE_TRANSACTION_TIMEOUT_S
    max_client_conn: int = MAX_CLIENT_CONNECTIONS
    max_server_connections: int = MAX_SERVER_CONNECTIONS
    pool_mode: str = "transaction"

    def ini(self, state: Path) -> str:
        # session pooling gives each client a server connection for its whole life, so the
        # server connections must cover every client that may connect
        session = self.pool_mode == "session"
        limit = self.max_client_conn if session else self.max_server_connections
        lines = [
            "[databases]",
            f"{self.dbname} = host={self.server_host} port={self.server_port} "
            f"dbname={self.dbname} pool_size={limit}",
            "",
            "[pgbouncer]",
            f"listen_addr = {self.listen_addr}",
            f"listen_port = {self.listen_port}",
            f"unix_socket_dir = {state}",
            "unix_socket_mode = 0700",
            "auth_type = scram-sha-256",
            f"auth_file = {state / 'users.txt'}",
            f"pool_mode = {self.pool_mode}",
            f"max_client_conn = {self.max_client_conn}",
            f"default_pool_size = {limit}",
            f"max_db_connections = {limit}",
            f"max_user_connections = {limit}",
            f"query_timeout = {self.query_timeout_s:g}",
            f"query_wait_timeout = {self.query_timeout_s:g}",
            f"idle_transaction_timeout = {self.idle_transaction_timeout_s:g}",
            "server_reset_query = DISCARD ALL",
            "server_reset_query_always = 1",
            f"ignore_startup_parameters = {','.join(IGNORED_STARTUP_PARAMETERS)}",
            "application_name_add_host = 0",
            f"logfile = {state / 'pgbouncer.log'}",
            f"pidfile = {state / 'pgbouncer.pid'}",
            "log_connections = 1",
            "log_disconnections = 1",
            "log_pooler_errors = 1",
            "",
        ]
        return "\n".join(lines)


def auth_file(verifiers: Iterable[tuple[str, str]]) -> str:
    """userlist.txt lines: each login with its SCRAM verifier (never a password)."""
    out = []
    for login, verifier in verifiers:
        if not verifier.startswith("SCRAM-SHA-256$"):
            raise PoolerUnavailable(
                f"analyst login {login} has no SCRAM verifier on the analyst server (set its "
                "password with password_encryption = scram-sha-256: `grant-analyst --rotate`)"
            )
        out.append(f'"{login}" "{verifier}"')
    return "\n".join(out) + "\n"


@dataclass
class Pooler:
    """A running PgBouncer; ``stop`` (or the interpreter's exit) ends it."""

    config: PoolerConfig
    state: Path
    process: subprocess.Popen[bytes]
    _stopped: bool = field(default=False, repr=False)

    @property
    def host(self) -> str:
        return self.config.listen_addr

    @property
    def port(self) -> int:
        return self.config.listen_port

    def url(self, login: str, password: str | None = None, dbname: str | None = None) -> str:
        secret = f":{quote(password, safe='')}" if password else ""
        name, db = quote(login, safe=""), dbname or self.config.dbname
        return f"postgresql://{name}{secret}@{self.host}:{self.port}/{db}"

    def log(self) -> str:
        try:
            return (self.state / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def reload_users(self, verifiers: Iterable[tuple[str, str]]) -> None:
        """Rewrite the auth file (a login granted or rotated) and have PgBouncer re-read it."""
        _write_private(self.state / "users.txt", auth_file(verifiers), RunAs.for_current_user())
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        atexit.unregister(self.stop)
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # PgBouncer: safe shutdown
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _write_private(path: Path, text: str, who: RunAs) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if who.dropping:
        os.chown(tmp, who.uid or 0, who.gid or 0)
    os.replace(tmp, path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(config: PoolerConfig, state: Path, verifiers: Iterable[tuple[str, str]]) -> Pooler:
    """Write the configuration and auth file into ``state`` (mode 0700) and start PgBouncer in
    the foreground of a child process; returns once it accepts connections. As root it runs as
    the same unprivileged account as the embedded PostgreSQL (PgBouncer refuses root)."""
    binary = pgbouncer_binary()
    who = RunAs.for_current_user()
    state = state.expanduser().resolve()
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o700)
    if who.dropping:
        _let_through(state, who)
        os.chown(state, who.uid or 0, who.gid or 0)
    _write_private(state / "users.txt", auth_file(verifiers), who)
    _write_private(state / "pgbouncer.ini", config.ini(state), who)
    extra: dict[str, object] = {}
    if who.dropping:
        extra = {"user": who.uid, "group": who.gid, "extra_groups": []}
    env = {k: v for k, v in environment().items() if not k.startswith("PG")}
    with (state / "stderr.log").open("wb") as stderr:  # what it says before its log is open
        process = subprocess.Popen(
            [binary, "-q", str(state / "pgbouncer.ini")],
            cwd=state,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            **extra,  # type: ignore[call-overload]
        )
    pooler = Pooler(config, state, process)
    atexit.register(pooler.stop)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            err = (state / "stderr.log").read_text(errors="replace")
            raise PoolerUnavailable(
                f"pgbouncer exited ({process.returncode}) at start: {err}\n{pooler.log()[-3000:]}"
            )
        try:
            with socket.create_connection((config.listen_addr, config.listen_port), timeout=1):
                return pooler
        except OSError:
            if time.monotonic() > deadline:
                pooler.stop()
                raise PoolerUnavailable(
                    f"pgbouncer did not listen on {config.listen_addr}:{config.listen_port} in "
                    f"{START_TIMEOUT_S:.0f} s\n{pooler.log()[-3000:]}"
                ) from None
            time.sleep(0.05)


def analyst_verifiers(conn: Conn) -> list[tuple[str, str]]:
    """Every analyst login of the server with its SCRAM verifier (run as a superuser)."""
    return [(r["login"], r["verifier"] or "") for r in conn.execute(Q("pooler.analyst_verifiers"))]
