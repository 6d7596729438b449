"""Backfills in the store: one row per request, written under its shard's fence.

A backfill's row holds what it was asked (job, ``[from_ms, to_ms)``, overlap,
rate) and how far it got (``cursor_ms``: the last slot handled, counts, state).
Only the shard's leader writes it, under the fence, like a tick. The ticks it
adds are ordinary rows keyed by (job, slot), so a slot is never run twice
whoever gets there first; the cursor only spares a successor the slots known
to be handled, and ``recount`` re-derives the counts from the ticks themselves.

A tick belongs to a backfill when it lies in its range and was claimed at or
after the backfill was created (a backfill covers only the past, so the live
schedule had claimed every slot of the range it was going to before then).
The audit uses the same rule (``backfilled_slots``).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace

from sqlalchemy import ColumnElement, Engine, and_, case, false, func, select

from shardcron.errors import JobNotFound
from shardcron.model import Backfill, BackfillState, Overlap, TickStatus
from shardcron.store.engine import reading
from shardcron.store.fences import run_fenced
from shardcron.store.schema import backfills, ticks
from shardcron.store.sql import AnyRow, key_in_namespaces
from shardcron.store.text import clip


class BackfillNotFound(JobNotFound):
    """NOT_FOUND, like a job: the API maps every ``JobNotFound`` to it."""

    def __init__(self, backfill_id: str):
        Exception.__init__(self, f"backfill {backfill_id!r} not found")
        self.job_id = backfill_id


def new_backfill_id() -> str:
    return "bf-" + uuid.uuid4().hex[:12]


def create_backfill(engine: Engine, bf: Backfill, *, fence: int, node_id: str) -> Backfill:
    bf = replace(bf, fence=fence, node_id=node_id, updated_at_ms=bf.created_at_ms)
    run_fenced(engine, bf.shard, fence, lambda conn: conn.execute(backfills.insert().values(**_row(bf))))
    return bf


def get_backfill(engine: Engine, backfill_id: str) -> Backfill:
    with reading(engine) as conn:
        row = conn.execute(select(backfills).where(backfills.c.id == backfill_id)).first()
    if row is None:
        raise BackfillNotFound(backfill_id)
    return _from_row(row)


def list_backfills(
    engine: Engine, *, job_id: str | None = None, limit: int = 100, namespaces: Collection[str] | None = None
) -> list[Backfill]:
    """Newest first; a job's, or everyone's (``namespaces``: only of these; None: every namespace)."""
    q = select(backfills).order_by(backfills.c.created_at_ms.desc(), backfills.c.id).limit(limit)
    if job_id is not None:
        q = q.where(backfills.c.job_id == job_id)
    if namespaces is not None:
        q = q.where(key_in_namespaces(backfills.c.job_id, namespaces))
    with reading(engine) as conn:
        return [_from_row(r) for r in conn.execute(q)]


def active_backfills(engine: Engine, shard: int) -> list[Backfill]:
    """The shard's backfills still to run, oldest first: what its leader works through."""
    q = (
        select(backfills)
        .where(backfills.c.shard == shard, backfills.c.state == BackfillState.ACTIVE.value)
        .order_by(backfills.c.created_at_ms, backfills.c.id)
    )
    with reading(engine) as conn:
        return [_from_row(r) for r in conn.execute(q)]


def save_progress(engine: Engine, bf: Backfill, *, fence: int, node_id: str, now_ms: int) -> None:
    """Write ``bf``'s cursor, counts, state and error, under ``fence`` (``FencedOut`` once it moved)."""
    values = dict(
        cursor_ms=bf.cursor_ms,
        done=bf.done,
        skipped=bf.skipped,
        state=bf.state.value,
        error=clip(bf.error) if bf.error else None,
        fence=fence,
        node_id=node_id,
        updated_at_ms=now_ms,
    )
    run_fenced(
        engine,
        bf.shard,
        fence,
        lambda conn: conn.execute(backfills.update().where(backfills.c.id == bf.id).values(**values)),
    )


def recount(engine: Engine, bf: Backfill) -> Backfill:
    """``bf`` with ``done`` and ``skipped`` counted from the ticks it wrote (see the module doc):
    exact whatever a failover cut short between a claim and the progress write after it."""
    skipped = func.sum(case((ticks.c.status == TickStatus.SKIPPED.value, 1), else_=0))
    q = select(func.count(), skipped).where(*_written_by(bf))
    with reading(engine) as conn:
        n, s = conn.execute(q).one()
    return replace(bf, done=int(n or 0), skipped=int(s or 0))


def unstarted(engine: Engine, bf: Backfill) -> int:
    """How many ticks ``bf`` wrote are still only claimed: neither started nor recorded skipped yet."""
    q = select(func.count()).where(*_written_by(bf), ticks.c.status == TickStatus.CLAIMED.value)
    with reading(engine) as conn:
        return int(conn.execute(q).scalar() or 0)


def _written_by(bf: Backfill) -> tuple[ColumnElement[bool], ...]:
    return (
        ticks.c.job_id == bf.job_id,
        ticks.c.scheduled_at_ms >= bf.from_ms,
        ticks.c.scheduled_at_ms < bf.to_ms,
        ticks.c.manual == false(),
        ticks.c.claimed_at_ms >= bf.created_at_ms,
    )


def backfills_over(engine: Engine, from_ms: int, to_ms: int, job_ids: Sequence[str] | None = None) -> list[Backfill]:
    """Backfills whose range meets ``[from_ms, to_ms)`` (for the audit)."""
    q = select(backfills).where(and_(backfills.c.from_ms < to_ms, backfills.c.to_ms > from_ms))
    if job_ids is not None:
        q = q.where(backfills.c.job_id.in_(list(job_ids)))
    with reading(engine) as conn:
        return [_from_row(r) for r in conn.execute(q)]


def recorded_slots(engine: Engine, job_id: str, from_ms: int, to_ms: int) -> set[int]:
    """The job's scheduled (not manual) slots in ``[from_ms, to_ms)`` that have a row."""
    q = select(ticks.c.scheduled_at_ms).where(
        ticks.c.job_id == job_id,
        ticks.c.scheduled_at_ms >= from_ms,
        ticks.c.scheduled_at_ms < to_ms,
        ticks.c.manual == false(),
    )
    with reading(engine) as conn:
        return set(conn.execute(q).scalars())


def _row(bf: Backfill) -> dict[str, object]:
    return dict(
        id=bf.id,
        job_id=bf.job_id,
        shard=bf.shard,
        from_ms=bf.from_ms,
        to_ms=bf.to_ms,
        overlap=bf.overlap.value,
        rate_per_s=bf.rate_per_s,
        cursor_ms=bf.cursor_ms,
        state=bf.state.value,
        planned=bf.planned,
        done=bf.done,
        skipped=bf.skipped,
        fence=bf.fence,
        node_id=bf.node_id,
        created_at_ms=bf.created_at_ms,
        updated_at_ms=bf.updated_at_ms,
        error=bf.error,
    )


def _from_row(r: AnyRow) -> Backfill:
    return Backfill(
        r.id,
        r.job_id,
        r.shard,
        r.from_ms,
        r.to_ms,
        Overlap(r.overlap),
        float(r.rate_per_s),
        r.planned,
        r.created_at_ms,
        BackfillState(r.state),
        r.cursor_ms,
        r.done,
        r.skipped,
        r.fence,
        r.node_id,
        r.updated_at_ms,
        r.error,
    )


__all__ = [
    "Backfill",
    "BackfillNotFound",
    "BackfillState",
    "active_backfills",
    "backfills_over",
    "create_backfill",
    "get_backfill",
    "list_backfills",
    "new_backfill_id",
    "recorded_slots",
    "recount",
    "save_progress",
    "unstarted",
]
