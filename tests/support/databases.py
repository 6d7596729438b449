"""Real databases for tests: SQLite files, PostgreSQL and MariaDB, never mocks.

Every test gets its own empty database (``sc_<random>`` on the servers, a file
under its tmp_path for SQLite), dropped at teardown, so tests cannot see each
other, and runs by other people against the same servers are left alone.

``make test`` starts PostgreSQL and MariaDB, so a server that does not answer
is a failure, not a skip. To run without one, restrict the list:
``SHARDCRON_TEST_DBS=sqlite`` (a comma list of sqlite, postgresql, mariadb;
all three by default).

Fixtures:

* ``db_url``: an empty database's URL, parametrized over the enabled kinds
  (test ids ``[sqlite]``, ``[postgresql]``, ``[mariadb]``).
* ``store_engine``: an engine on ``db_url`` with the schema applied.
* ``fresh_db_url``: a factory, ``fresh_db_url(kind) -> url``, for tests that
  need more databases or a given kind.

Cluster tests that start node processes use ``create_database(kind)``, which
returns ``(url, drop)``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from shardcron.store.engine import make_engine
from shardcron.store.migrate import ensure_schema

KINDS = ("sqlite", "postgresql", "mariadb")

# Where the servers are (scripts/ensure-services.sh), and the database used
# to create and drop the per-test ones; SHARDCRON_TEST_POSTGRESQL_URL and
# SHARDCRON_TEST_MARIADB_URL point elsewhere.
SERVER_URLS = {
    "postgresql": os.environ.get("SHARDCRON_TEST_POSTGRESQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    "mariadb": os.environ.get("SHARDCRON_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
_SERVER_CHECK_TIMEOUT_S = 3


def enabled_kinds() -> tuple[str, ...]:
    """The database kinds to test against, from SHARDCRON_TEST_DBS (default: all)."""
    raw = os.environ.get("SHARDCRON_TEST_DBS", "").strip()
    if not raw:
        return KINDS
    kinds = tuple(k.strip().lower() for k in raw.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise pytest.UsageError(
            f"SHARDCRON_TEST_DBS: unknown {', '.join(unknown)}; use a comma list of {', '.join(KINDS)}"
        )
    return kinds


def create_database(kind: str, directory: str | Path | None = None) -> tuple[str, Callable[[], None]]:
    """A new, empty database of ``kind``: its URL and a callable that drops it.

    SQLite files go in ``directory`` (a new temporary directory if omitted,
    removed by the drop). The URL names the drivers shardcron ships.
    """
    name = f"sc_{uuid.uuid4().hex[:16]}"
    if kind == "sqlite":
        own_dir = directory is None
        folder = Path(tempfile.mkdtemp(prefix="shardcron-db-") if own_dir else directory)
        path = folder / f"{name}.db"

        def drop() -> None:
            if own_dir:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)

        return f"sqlite:///{path}", drop
    if kind == "postgresql":
        admin = _admin_engine(kind)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

        def drop() -> None:
            with admin.connect() as conn:
                if conn.dialect.server_version_info >= (13,):
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    return
                # Before 13: end the sessions a test left behind, then drop.
                conn.execute(
                    text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name}
                )
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')

    elif kind == "mariadb":
        admin = _admin_engine(kind)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")

        def drop() -> None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")

    else:
        raise ValueError(f"unknown database kind {kind!r}; expected one of {KINDS}")
    url = make_url(SERVER_URLS[kind]).set(database=name)
    return url.render_as_string(hide_password=False), drop


def server_problem(kind: str) -> str | None:
    """Why ``kind``'s server does not answer, or None if it does (SQLite always does)."""
    if kind == "sqlite":
        return None
    try:
        with _admin_engine(kind).connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as e:  # noqa: BLE001 (any failure is the answer)
        reason = " ".join(str(getattr(e, "orig", None) or e).split())
        return f"{kind} at {make_url(SERVER_URLS[kind]).render_as_string()} does not answer: {reason}"
    return None


@cache
def _admin_engine(kind: str) -> Engine:
    # AUTOCOMMIT: CREATE/DROP DATABASE cannot run in a transaction (PostgreSQL).
    # NullPool: no idle connection lingers in the `test` database between uses.
    return create_engine(
        SERVER_URLS[kind],
        isolation_level="AUTOCOMMIT",
        poolclass=NullPool,
        connect_args={"connect_timeout": _SERVER_CHECK_TIMEOUT_S},
    )


@pytest.fixture(scope="session")
def database_servers() -> dict[str, str | None]:
    """Checked once per session: each enabled kind -> None if it answers, else why not."""
    return {kind: server_problem(kind) for kind in enabled_kinds()}


@pytest.fixture
def fresh_db_url(database_servers, tmp_path) -> Iterator[Callable[[str], str]]:
    """``fresh_db_url(kind) -> url``: a new empty database, dropped after the test."""
    drops: list[Callable[[], None]] = []

    def make(kind: str) -> str:
        if kind not in database_servers:
            pytest.skip(f"{kind} is not in SHARDCRON_TEST_DBS")
        problem = database_servers[kind]
        if problem:
            pytest.fail(
                f"{problem}. `make test` starts it (scripts/ensure-services.sh); "
                f"or set SHARDCRON_TEST_DBS to the kinds you have",
                pytrace=False,
            )
        url, drop = create_database(kind, directory=tmp_path)
        drops.append(drop)
        return url

    yield make
    for drop in reversed(drops):
        drop()


@pytest.fixture(params=enabled_kinds())
def db_kind(request) -> str:
    return request.param


@pytest.fixture
def db_url(db_kind, fresh_db_url) -> str:
    """An empty database of each enabled kind in turn."""
    return fresh_db_url(db_kind)


@pytest.fixture
def store_engine(db_url) -> Iterator[Engine]:
    """An engine on ``db_url`` with the schema at head."""
    engine = make_engine(db_url)
    try:
        ensure_schema(engine, auto_upgrade=True)
        yield engine
    finally:
        engine.dispose()


@contextmanager
def postgresql_refusing_connections(url: str) -> Iterator[Callable[[bool], None]]:
    """``url``'s PostgreSQL database refusing new connections, its sessions cut (as a store restarting is),
    until the yielded ``accept(True)``; accepting again on the way out."""
    database = make_url(url).database
    admin = make_engine(SERVER_URLS["postgresql"]).execution_options(isolation_level="AUTOCOMMIT")

    def accept(allowed: bool) -> None:
        with admin.connect() as c:
            c.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allowed).lower()}')
            if not allowed:
                c.exec_driver_sql(
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
                )

    accept(False)
    try:
        yield accept
    finally:
        accept(True)
        admin.dispose()
