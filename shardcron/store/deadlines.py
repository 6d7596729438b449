"""Deadlines on tick rows: the judgement (once per slot and kind, under the shard's fence), and acks.

A judgement is one conditional update: it sets the kind's ``*_missed_at_ms`` column only if that is
still empty and the row shows the deadline missed (``rules.deadlines.missed``, written here in SQL).
So whichever leader judges a slot, and however often (a successor judges again what its predecessor
may have judged before dying), a miss is recorded once, and the one update that records it is the
one that raises it (its alert and its count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from sqlalchemy import Column, ColumnElement, Connection, Engine, and_, false, or_, select, true, update

from shardcron.errors import TickNotFound
from shardcron.jobkey import namespace_of
from shardcron.model import RecordedMiss, TickStatus
from shardcron.rules.deadlines import KINDS, DeadlineKind, Judgement, SlotState
from shardcron.store.engine import reading
from shardcron.store.fences import FencedOutcome, run_fenced, run_fenced_many
from shardcron.store.schema import deadline_misses, notifications, ticks
from shardcron.store.sql import chunks

MISS_HISTORY_MS = 30 * 86_400_000  # how long deadline_misses keeps a miss (the ticks keep theirs)

MISSED_AT: Mapping[DeadlineKind, Column[int]] = {
    DeadlineKind.START: ticks.c.start_deadline_missed_at_ms,
    DeadlineKind.FINISH: ticks.c.deadline_missed_at_ms,
    DeadlineKind.HEARTBEAT: ticks.c.heartbeat_missed_at_ms,
}


def _acked_by(due_ms: int) -> ColumnElement[bool]:
    return and_(ticks.c.acked_at_ms.is_not(None), ticks.c.acked_at_ms <= due_ms)


def _missed(j: Judgement) -> ColumnElement[bool]:
    """``rules.deadlines.missed`` as a condition on the row."""
    if j.kind is DeadlineKind.START:
        return or_(ticks.c.started_at_ms.is_(None), ticks.c.started_at_ms > j.due_ms)
    if j.kind is DeadlineKind.HEARTBEAT:
        return ~_acked_by(j.due_ms)
    succeeded = and_(
        ticks.c.status == TickStatus.SUCCEEDED.value,
        ticks.c.finished_at_ms.is_not(None),
        ticks.c.finished_at_ms <= j.due_ms,
    )
    return or_(~succeeded, ~_acked_by(j.due_ms) if j.needs_ack else false())


def record_misses(
    engine: Engine, batches: Mapping[tuple[int, int], Sequence[Judgement]], *, now_ms: int
) -> FencedOutcome[list[tuple[int, Judgement]]]:
    """Judge each of ``batches`` (``{(shard, fence): judgements}``) in one transaction; the value: the
    (shard, judgement) pairs found missed now, each recorded on its row by this call alone. A shard whose
    fence moved is in ``fenced_out`` and nothing is judged for it."""

    def work(conn: Connection, live: Mapping[tuple[int, int], Sequence[Judgement]]) -> list[tuple[int, Judgement]]:
        out = []
        for (shard, fence), items in live.items():
            for j in items:
                missed_at = MISSED_AT[j.kind]
                result = conn.execute(
                    update(ticks)
                    .where(
                        ticks.c.job_id == j.job_id,
                        ticks.c.scheduled_at_ms == j.scheduled_at_ms,
                        ticks.c.shard == shard,
                        missed_at.is_(None),
                        _missed(j),
                    )
                    .values({missed_at: now_ms})
                )
                if result.rowcount:
                    out.append((shard, j))
                    conn.execute(
                        deadline_misses.insert().values(
                            job_id=j.job_id,
                            scheduled_at_ms=j.scheduled_at_ms,
                            kind=j.kind.value,
                            namespace=namespace_of(j.job_id),
                            shard=shard,
                            fence=fence,
                            missed_at_ms=now_ms,
                        )
                    )
        if out:  # the history of misses keeps a month (an index range: nothing to read when none are older)
            conn.execute(deadline_misses.delete().where(deadline_misses.c.missed_at_ms < now_ms - MISS_HISTORY_MS))
        return out

    return run_fenced_many(engine, batches, work)


def _slots_since(part: Sequence[tuple[str, int]]) -> ColumnElement[bool]:
    """The rows of each (job, earliest slot) of ``part``: a range of the primary key each."""
    return or_(*(and_(ticks.c.job_id == job_id, ticks.c.scheduled_at_ms >= since) for job_id, since in part))


def recent_misses(
    engine: Engine, *, since_ms: int, namespaces: frozenset[str] | None, limit: int
) -> list[RecordedMiss]:
    """The misses recorded at or after ``since_ms`` of the jobs of ``namespaces`` (None: every one), the
    newest ``limit`` first."""
    m = deadline_misses
    q = select(m.c.job_id, m.c.scheduled_at_ms, m.c.kind, m.c.missed_at_ms).where(m.c.missed_at_ms >= since_ms)
    if namespaces is not None:
        q = q.where(m.c.namespace.in_(sorted(namespaces)))
    q = q.order_by(m.c.missed_at_ms.desc(), m.c.job_id, m.c.scheduled_at_ms).limit(limit)
    with reading(engine) as conn:
        return [
            RecordedMiss(r.job_id, r.scheduled_at_ms, DeadlineKind(r.kind), r.missed_at_ms) for r in conn.execute(q)
        ]


class Unjudged(NamedTuple):
    """A scheduled slot's row, with the kinds of deadline not recorded missed on it (yet)."""

    job_id: str
    scheduled_at_ms: int
    state: SlotState
    open_kinds: frozenset[DeadlineKind]


def unjudged(engine: Engine, shard: int, since_ms: Mapping[str, int]) -> list[Unjudged]:
    """The shard's scheduled slots of the jobs in ``since_ms`` (job -> earliest slot to look at) with a
    deadline kind not recorded missed: what a new leader must judge, or judge again (most were met)."""
    out: list[Unjudged] = []
    columns = [ticks.c[n] for n in ("job_id", "scheduled_at_ms", "status", "started_at_ms", "finished_at_ms")]
    with reading(engine) as conn:
        for part in chunks(sorted(since_ms.items())):
            rows = conn.execute(
                select(*columns, ticks.c.acked_at_ms, *MISSED_AT.values()).where(
                    ticks.c.shard == shard,
                    ticks.c.manual == false(),
                    _slots_since(part),
                    or_(*(c.is_(None) for c in MISSED_AT.values())),
                )
            )
            for r in rows:
                state = SlotState(TickStatus(r.status), r.started_at_ms, r.finished_at_ms, r.acked_at_ms)
                open_kinds = frozenset(k for k in KINDS if getattr(r, MISSED_AT[k].name) is None)
                out.append(Unjudged(r.job_id, r.scheduled_at_ms, state, open_kinds))
    return out


class Ack(NamedTuple):
    scheduled_at_ms: int
    acked_at_ms: int
    already: bool  # acked before: this ack changed nothing


def ack_tick(engine: Engine, job_id: str, scheduled_at_ms: int | None, *, shard: int, fence: int, now_ms: int) -> Ack:
    """Record the slot's ack (its first one stays), as the shard's leader. ``scheduled_at_ms`` None: the
    job's newest scheduled slot at or before ``now_ms`` that has a tick. ``TickNotFound`` without one."""

    def work(conn: Connection) -> Ack:
        slot = ticks.c.scheduled_at_ms == scheduled_at_ms if scheduled_at_ms is not None else true()
        row = conn.execute(
            select(ticks.c.scheduled_at_ms, ticks.c.acked_at_ms)
            .where(ticks.c.job_id == job_id, ticks.c.shard == shard, slot)
            .where(ticks.c.manual == false(), ticks.c.scheduled_at_ms <= now_ms)
            .order_by(ticks.c.scheduled_at_ms.desc())
            .limit(1)
        ).first()
        if row is None:
            raise TickNotFound(job_id, scheduled_at_ms)
        if row.acked_at_ms is not None:
            return Ack(row.scheduled_at_ms, row.acked_at_ms, already=True)
        key = (ticks.c.job_id == job_id, ticks.c.scheduled_at_ms == row.scheduled_at_ms)
        if conn.execute(update(ticks).where(*key, ticks.c.acked_at_ms.is_(None)).values(acked_at_ms=now_ms)).rowcount:
            return Ack(row.scheduled_at_ms, now_ms, already=False)
        first = conn.execute(select(ticks.c.acked_at_ms).where(*key)).scalar_one()  # another ack came between
        return Ack(row.scheduled_at_ms, first, already=True)

    return run_fenced(engine, shard, fence, work)


def missed_without_notification(
    engine: Engine, shard: int, since_ms: Mapping[str, int]
) -> list[tuple[str, int, DeadlineKind]]:
    """The misses recorded on the shard's slots of the jobs in ``since_ms`` (job -> earliest slot to look
    at) that have no notification row of their kind: what a new leader claims, in case its predecessor
    died between recording a miss and claiming its notification."""
    out: list[tuple[str, int, DeadlineKind]] = []
    with reading(engine) as conn:
        for kind, missed_at in MISSED_AT.items():
            notified = (
                select(notifications.c.job_id)
                .where(
                    notifications.c.job_id == ticks.c.job_id,
                    notifications.c.scheduled_at_ms == ticks.c.scheduled_at_ms,
                    notifications.c.kind == kind.value,
                )
                .exists()
            )
            for part in chunks(sorted(since_ms.items())):
                rows = conn.execute(
                    select(ticks.c.job_id, ticks.c.scheduled_at_ms).where(
                        _slots_since(part),
                        ticks.c.shard == shard,
                        missed_at.is_not(None),
                        ~notified,
                    )
                )
                out += [(r.job_id, r.scheduled_at_ms, kind) for r in rows]
    return out
