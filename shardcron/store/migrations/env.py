"""Alembic environment shipped inside the package.

shardcron runs it programmatically (``shardcron.store.migrate``), handing over
an open connection in ``config.attributes["connection"]`` whose transaction and
migration lock the caller already holds. The ``alembic`` command line also works
for developers writing a new revision: it builds an engine from
``sqlalchemy.url``.
"""

from __future__ import annotations

from typing import Any

from alembic import context

from shardcron.store.engine import make_engine
from shardcron.store.schema import VERSION_TABLE, metadata

config = context.config


def _configure(**kw: Any) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=True,
        compare_type=True,
        **kw,
    )


def run_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("alembic.ini sets no sqlalchemy.url: pass an open connection or set one")
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
