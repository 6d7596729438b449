"""A job's tick rows read straight from the store, for tests that check what was recorded."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine

from shardcron.store.schema import ticks


def rows_in_range(engine: Engine, job_id: str, from_ms: int, to_ms: int) -> list:
    """``job_id``'s tick rows whose slot is in ``[from_ms, to_ms)``, by slot."""
    with engine.connect() as c:
        return c.execute(
            select(ticks)
            .where(ticks.c.job_id == job_id, ticks.c.scheduled_at_ms >= from_ms, ticks.c.scheduled_at_ms < to_ms)
            .order_by(ticks.c.scheduled_at_ms)
        ).all()
