"""Engines for the three databases shardcron supports, and the store's error boundary.

One function decides how shardcron talks to a database: which driver, which
timeouts, and how a transaction begins. Everything else in ``store/`` takes the
``Engine`` it returns and never looks at the URL again.

Connection and timeout failures leave this package as ``StoreUnavailable``
carrying the URL with its password masked, never as a driver traceback.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import ConnectionPoolEntry

from shardcron.errors import ConfigError, StoreUnavailable

# The drivers shardcron ships (see pyproject): users may write the bare backend
# name, as in most tools' documentation, and still get these.
_DRIVERS = {"postgresql": "psycopg", "mysql": "pymysql", "mariadb": "pymysql", "sqlite": "pysqlite"}
_BACKEND_ALIASES = {"postgres": "postgresql"}

# Connection execution option that marks a connection as read-only. On SQLite it
# lets the transaction start with a plain (deferred) BEGIN: readers then never
# queue behind writers, which WAL allows.
READ_ONLY = "shardcron_read_only"

# How long one store call may take, as ``make_engine`` sets it unless told otherwise (a node's engine is made
# so): a new connection within CONNECT_TIMEOUT_S, and each statement answered or cancelled within
# STATEMENT_TIMEOUT_S (PostgreSQL's statement_timeout, MariaDB's max_statement_time, SQLite's busy timeout).
# The coordinator's step budget is derived from them (coordination/coordinator_settings.py).
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_S = 10

# One write lock per SQLite engine (see ``writing``).
_SQLITE_WRITE_LOCKS: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()


def normalise_url(url: str | URL) -> URL:
    """The URL with its driver set to the one shardcron ships for that backend."""
    try:
        u = make_url(url)
    except sa_exc.ArgumentError:
        raise ConfigError(f"cannot parse the store URL {describe_url(url)}") from None
    backend = _BACKEND_ALIASES.get(u.get_backend_name(), u.get_backend_name())
    if backend not in _DRIVERS:
        raise ConfigError(f"unsupported store {describe_url(u)}: use postgresql://, mysql://, mariadb:// or sqlite:///")
    driver = u.get_driver_name() if "+" in u.drivername else None
    if driver not in (None, _DRIVERS[backend]):
        raise ConfigError(
            f"store driver {driver!r} is not shipped with shardcron; use {backend}:// (or {backend}+{_DRIVERS[backend]}://)"
        )
    return u.set(drivername=f"{backend}+{_DRIVERS[backend]}")


def describe_url(url: str | URL) -> str:
    """The URL fit for logs and error messages: the password becomes ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sa_exc.ArgumentError:
        # Not parseable as a URL: mask anything between "user:" and "@" anyway.
        return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", str(url))


def make_engine(
    url: str | URL, *, connect_timeout_s: float = CONNECT_TIMEOUT_S, statement_timeout_s: float = STATEMENT_TIMEOUT_S
) -> Engine:
    """An engine for ``url``, checked to answer: ``StoreUnavailable`` if it does not."""
    u = normalise_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(u, statement_timeout_s)
    elif backend == "postgresql":
        engine = _postgresql_engine(u, connect_timeout_s, statement_timeout_s)
    else:
        engine = _mariadb_engine(u, connect_timeout_s, statement_timeout_s)
    try:
        check_connection(engine)
    except StoreUnavailable:
        engine.dispose()
        raise
    return engine


def check_connection(engine: Engine) -> None:
    """One round trip; a failure becomes a one-line ``StoreUnavailable``."""
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except (sa_exc.DBAPIError, sa_exc.TimeoutError) as e:
        raise _unavailable(engine, e) from None


@contextmanager
def store_errors(engine: Engine) -> Iterator[None]:
    """Turn the driver's transient failures (connection lost, timeout, lock wait
    timeout, deadlock, "database is locked") into ``StoreUnavailable``.

    Integrity and programming errors pass through untouched: they are bugs, or
    races the caller handles itself.
    """
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as e:
        raise _unavailable(engine, e) from e


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """A write transaction: committed when the block ends, rolled back on an exception.

    On SQLite the threads of this process first take turns on a lock. SQLite
    lets one writer in at a time anyway, and its busy handler makes a waiting
    writer sleep in growing steps (up to 100 ms each): with 16 API calls at
    once, that added half a second to the unlucky ones. A lock hands over at
    once; writers in other processes still meet the busy handler.
    """
    lock = _SQLITE_WRITE_LOCKS.get(engine)
    with store_errors(engine), lock if lock is not None else nullcontext(), engine.connect() as conn, conn.begin():
        yield conn


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for reads only (no fence, no write lock)."""
    with store_errors(engine), engine.connect() as conn:
        conn.execution_options(**{READ_ONLY: True})
        yield conn


def _unavailable(engine: Engine, e: BaseException) -> StoreUnavailable:
    orig = getattr(e, "orig", None) or e
    reason = " ".join(str(orig).split()) or type(orig).__name__
    # Drivers do not usually echo the password, but a reason is free text.
    if engine.url.password:
        reason = reason.replace(str(engine.url.password), "***")
    return StoreUnavailable(f"store {describe_url(engine.url)} unavailable: {reason}")


def _switch_to_wal(cur: sqlite3.Cursor, timeout_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, tried again until ``timeout_s`` while the file is locked.

    Nodes started together on a new file each switch it to WAL, which takes an
    exclusive lock; SQLite answers "database is locked" at once instead of
    calling the busy handler, so without this a node could fail to start
    (seen in CI; reproduced with six processes opening a new file at once).
    """
    give_up = time.monotonic() + timeout_s
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= give_up:
                raise
            time.sleep(0.02)


def _sqlite_engine(u: URL, statement_timeout_s: float) -> Engine:
    busy_ms = int(statement_timeout_s * 1000)
    engine = create_engine(u, connect_args={"timeout": statement_timeout_s})
    _SQLITE_WRITE_LOCKS[engine] = threading.Lock()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        # Take BEGIN away from the sqlite3 module (it would start transactions
        # late, at the first write) so that the "begin" hook below decides.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # busy_timeout first: switching to WAL needs a lock another process may hold.
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        _switch_to_wal(cur, statement_timeout_s)
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # BEGIN IMMEDIATE takes the database's single write lock up front, so a
        # fenced transaction's fence check and its writes are one serial step
        # with respect to every other writer, in this process or another.
        # (A deferred BEGIN would read the fence under a shared lock and could
        # then be overtaken by a fence raise before it upgrades to write.)
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _postgresql_engine(u: URL, connect_timeout_s: float, statement_timeout_s: float) -> Engine:
    stmt_ms = int(statement_timeout_s * 1000)
    # A leader that vanished mid-transaction (host gone, no FIN) would keep its
    # share lock on the fence row until TCP keep-alive notices, hours later,
    # and stall the next leader's fence raise. No shardcron transaction idles.
    idle_ms = 2 * stmt_ms
    options = f"-c statement_timeout={stmt_ms} -c idle_in_transaction_session_timeout={idle_ms}"
    return create_engine(
        u,
        pool_pre_ping=True,
        connect_args={
            # libpq takes whole seconds and treats anything below 2 as 2.
            "connect_timeout": max(2, math.ceil(connect_timeout_s)),
            "options": options,
            "application_name": "shardcron",
            # statement_timeout is enforced by the server, so it cannot help when
            # the network drops packets: the client would wait on TCP for many
            # minutes. These make the kernel give up on the connection instead:
            # unacknowledged data for longer than the statement timeout, or an
            # idle connection whose peer stops answering keep-alive probes.
            "tcp_user_timeout": max(2000, stmt_ms // 2),
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
        },
    )


def _mariadb_engine(u: URL, connect_timeout_s: float, statement_timeout_s: float) -> Engine:
    stmt_s = max(1, math.ceil(statement_timeout_s))
    engine = create_engine(
        u,
        pool_pre_ping=True,
        # READ COMMITTED, like PostgreSQL's default: no gap locks, so two
        # writers racing to insert the same key meet on the key itself (one gets
        # a duplicate-key error and retries) rather than deadlocking on a gap.
        isolation_level="READ COMMITTED",
        connect_args={
            "charset": "utf8mb4",
            "connect_timeout": connect_timeout_s,
            # Socket timeouts sit above the server-side limits below, so the
            # server's own error (which names the cause) arrives first; they only
            # fire for a server that stopped answering.
            "read_timeout": statement_timeout_s + connect_timeout_s,
            "write_timeout": statement_timeout_s + connect_timeout_s,
        },
    )

    @event.listens_for(engine, "connect")
    # Any: a PyMySQL connection, and PyMySQL publishes no type information.
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"SET SESSION innodb_lock_wait_timeout = {stmt_s}")
        if "mariadb" in dbapi_conn.get_server_info().lower():
            # MariaDB only (MySQL has neither): a statement limit, and the
            # counterpart of PostgreSQL's idle_in_transaction_session_timeout.
            cur.execute(f"SET SESSION max_statement_time = {stmt_s}")
            cur.execute(f"SET SESSION idle_transaction_timeout = {2 * stmt_s}")
        cur.close()

    return engine


__all__ = [
    "CONNECT_TIMEOUT_S",
    "READ_ONLY",
    "STATEMENT_TIMEOUT_S",
    "check_connection",
    "describe_url",
    "make_engine",
    "normalise_url",
    "reading",
    "store_errors",
]
