"""Bringing a database's schema to the version this shardcron understands.

Alembic is configured in code: the environment and the revisions ship inside
the package (``store/migrations``), so no ``alembic.ini`` is read at runtime.

Several nodes may start against an empty database at once. Each upgrade runs
under a database-wide migration lock and re-reads the schema version once it
holds it, so exactly one of them creates the tables and the others find them.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, text
from sqlalchemy import exc as sa_exc

from shardcron.errors import ConfigError
from shardcron.store.engine import reading, store_errors
from shardcron.store.schema import VERSION_TABLE

SCRIPT_LOCATION = "shardcron.store:migrations"  # resolved by Alembic via importlib.resources

# PostgreSQL advisory lock key for migrations; any constant works, this one
# spells "shrdcron" in ASCII so it is recognisable in pg_locks.
_PG_LOCK_KEY = 0x73687264_63726F6E
_MARIADB_LOCK_WAIT_S = 60


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "store/migrations has no revisions"
    return head


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision; ``None`` for a database shardcron never touched."""
    with reading(engine) as conn:
        return _current(conn)


def upgrade(engine: Engine) -> None:
    """Upgrade to head (``shardcron db upgrade``); refuses a newer, unknown revision."""
    ensure_schema(engine, auto_upgrade=True)


def ensure_schema(engine: Engine, *, auto_upgrade: bool) -> None:
    """Make sure the schema is the one this shardcron understands.

    Empty database: create it. At head: nothing to do. Older: upgrade if
    ``auto_upgrade``, else ``ConfigError``. Newer or unknown: ``ConfigError``,
    since this shardcron cannot know what the newer one changed.
    """
    head = head_revision()
    with store_errors(engine), engine.connect() as conn:
        try:
            with conn.begin():
                _lock(conn)
                current = _current(conn)
                if current == head:
                    return
                if current is not None:
                    if not _is_known(current):
                        raise ConfigError(
                            f"database schema is at {current}, which is newer than this shardcron ({head}): "
                            "upgrade shardcron"
                        )
                    if not auto_upgrade:
                        raise ConfigError(
                            f"database schema is at {current}, this shardcron understands up to {head}; "
                            "run `shardcron db upgrade`"
                        )
                cfg = alembic_config()
                # env.py runs the revisions on this connection, inside this
                # transaction and under this lock.
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        finally:
            _unlock(conn)


def _current(conn: Connection) -> str | None:
    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def _is_known(revision: str) -> bool:
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


def _lock(conn: Connection) -> None:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        # Released by the transaction's end, commit or rollback.
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    elif dialect in ("mysql", "mariadb"):
        # MariaDB DDL commits implicitly, so the lock cannot be a transaction's:
        # a named lock, per database, held by the session until _unlock.
        got = conn.execute(
            text("SELECT GET_LOCK(LEFT(CONCAT('shardcron.migrate.', DATABASE()), 64), :t)"),
            {"t": _MARIADB_LOCK_WAIT_S},
        ).scalar()
        if got != 1:
            raise ConfigError(f"another process held the schema migration lock for over {_MARIADB_LOCK_WAIT_S}s")
    # SQLite: the transaction began with BEGIN IMMEDIATE (engine.py), which
    # already excludes every other writer of the file.


def _unlock(conn: Connection) -> None:
    if conn.dialect.name not in ("mysql", "mariadb"):
        return
    try:
        conn.execute(text("SELECT RELEASE_LOCK(LEFT(CONCAT('shardcron.migrate.', DATABASE()), 64))"))
        conn.rollback()  # RELEASE_LOCK autobegan a transaction; end it
    except sa_exc.DBAPIError:
        pass  # the connection is gone, and the server released the lock with it


__all__ = ["alembic_config", "current_revision", "ensure_schema", "head_revision", "upgrade"]
