"""The guard's SQL store: ``SqlDeduper`` (PostgreSQL, MariaDB, SQLite), which can commit with the consumer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Connection, Engine, MetaData, Table, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from shardcron import clock
from shardcron.consumer.guard import Verdict
from shardcron.consumer.tick import TickInfo
from shardcron.store.engine import make_engine, writing
from shardcron.store.schema import ID_LENGTH, exact_string
from shardcron.store.sql import insert_ignoring_duplicates


class SqlDeduper:
    """Admits ticks against a SQL database (PostgreSQL, MariaDB, SQLite).

    Two tables, created if missing: ``<table_prefix>_slots`` (one row per
    admitted slot) and ``<table_prefix>_fences`` (each job's highest fence).
    Each admission locks the job's fence row first, so two consumers of one job
    take turns and exactly one of them records a slot. Pass ``connection=`` (a
    Connection or Session in the consumer's own transaction) to commit the
    record with the consumer's writes; the lock is then held until that commit.
    """

    def __init__(self, engine_or_url: Engine | str, *, table_prefix: str = "shardcron_dedupe") -> None:
        self.engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        md = MetaData()
        opts: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}
        self.slots = Table(
            f"{table_prefix}_slots",
            md,
            Column("job_id", exact_string(ID_LENGTH), primary_key=True),
            Column("scheduled_at_ms", BigInteger, primary_key=True, autoincrement=False),
            Column("fence", BigInteger, nullable=False),
            Column("seen_at_ms", BigInteger, nullable=False),
            **opts,
        )
        self.fences = Table(
            f"{table_prefix}_fences",
            md,
            Column("job_id", exact_string(ID_LENGTH), primary_key=True),
            Column("fence", BigInteger, nullable=False),
            **opts,
        )
        try:
            md.create_all(self.engine, checkfirst=True)
        except sa_exc.DBAPIError:
            # Another consumer created them between our check and our CREATE.
            md.create_all(self.engine, checkfirst=True)

    def admit(self, tick: TickInfo, *, connection: Connection | Session | None = None) -> Verdict:
        if connection is None:
            with writing(self.engine) as conn:
                return self._admit(conn, tick)
        if isinstance(connection, Session):
            connection = connection.connection()
        return self._admit(connection, tick)

    def release(self, tick: TickInfo, *, connection: Connection | Session | None = None) -> None:
        """Forget an admitted slot (its run failed), so a retry or redelivery is FIRST again."""
        stmt = self.slots.delete().where(
            self.slots.c.job_id == tick.key, self.slots.c.scheduled_at_ms == tick.scheduled_at_ms
        )
        if connection is None:
            with writing(self.engine) as conn:
                conn.execute(stmt)
            return
        if isinstance(connection, Session):
            connection = connection.connection()
        connection.execute(stmt)

    def _admit(self, conn: Connection, tick: TickInfo) -> Verdict:
        f = self.fences.c
        # 1. The job's fence row exists (a no-op if it does) and is locked: every
        #    admission of the job waits here for the one before it to commit.
        #    On SQLite this write takes the database's write lock instead.
        insert_ignoring_duplicates(conn, self.fences, [{"job_id": tick.key, "fence": tick.fence}])
        highest = conn.execute(select(f.fence).where(f.job_id == tick.key).with_for_update()).scalar_one()
        if tick.fence < highest:
            return Verdict.STALE_FENCE
        # 2. Record the slot. The unique violation, not a prior SELECT, decides:
        #    under REPEATABLE READ a SELECT could read an old snapshot. The
        #    savepoint keeps the caller's transaction usable after it.
        verdict = Verdict.FIRST
        try:
            with conn.begin_nested():
                conn.execute(
                    self.slots.insert().values(
                        job_id=tick.key,
                        scheduled_at_ms=tick.scheduled_at_ms,
                        fence=tick.fence,
                        seen_at_ms=clock.wall_ms(),
                    )
                )
        except sa_exc.IntegrityError:
            verdict = Verdict.DUPLICATE
        # 3. A higher fence is news even on a duplicate: its leader deposed the older one.
        if tick.fence > highest:
            conn.execute(update(self.fences).where(f.job_id == tick.key).values(fence=tick.fence))
        return verdict


__all__ = ["SqlDeduper"]
