"""Notification rows: claimed under the shard's fence, then settled (sent or failed) under it.

A row's identity is ``(job_id, scheduled_at_ms, kind)``: at most one notification of each kind per
slot, ever, whichever leader claims it. A claim that finds the row already there changes nothing, so
a successor that re-derives what is owed (``failed_without_notification``) claims only what its
predecessor did not. The default's rate limit is decided inside the claiming transaction, from the
job's own rows (``rules/notification_rate.py``), and recorded as the row's status.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, Engine, and_, func, or_, select

from shardcron.model import TickStatus
from shardcron.rules.notification_rate import Rate, allows, window_start_ms
from shardcron.rules.notifications import FAILED_STATUSES, NotificationKind, NotificationStatus, Source
from shardcron.store.engine import reading
from shardcron.store.fences import run_fenced
from shardcron.store.schema import notifications, ticks
from shardcron.store.sql import AnyRow, chunks
from shardcron.store.text import clip


@dataclass(frozen=True)
class NotificationClaim:
    job_id: str
    scheduled_at_ms: int
    kind: NotificationKind
    source: Source
    spec: str  # the executor table as JSON


@dataclass(frozen=True)
class NotificationRow:
    job_id: str
    scheduled_at_ms: int
    kind: NotificationKind
    shard: int
    fence: int
    node_id: str
    status: NotificationStatus
    source: Source
    spec: str
    claimed_at_ms: int
    sent_at_ms: int | None = None
    attempts: int = 0
    error: str | None = None
    next_attempt_at_ms: int | None = None  # sent in vain so far: not tried again before then

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.job_id, self.scheduled_at_ms, self.kind.value)


def claim(
    engine: Engine,
    claims: Sequence[NotificationClaim],
    *,
    shard: int,
    fence: int,
    node_id: str,
    now_ms: int,
    default_rate: Rate | None,
) -> list[NotificationRow]:
    """Insert the rows of ``claims`` not there yet, under ``fence``; returns those inserted (claimed, or
    suppressed by ``default_rate``). ``FencedOut`` when the fence moved (nothing is written)."""

    def work(conn: Connection) -> list[NotificationRow]:
        out = []
        for c in claims:
            if _exists(conn, c.job_id, c.scheduled_at_ms, c.kind):
                continue
            status = NotificationStatus.CLAIMED
            if c.source is Source.DEFAULT and default_rate is not None:
                sent = _default_claimed_since(conn, c.job_id, c.kind, window_start_ms(default_rate, now_ms))
                if not allows(default_rate, sent):
                    status = NotificationStatus.SUPPRESSED
            row = NotificationRow(
                c.job_id, c.scheduled_at_ms, c.kind, shard, fence, node_id, status, c.source, c.spec, now_ms
            )
            conn.execute(notifications.insert().values(_values(row)))
            out.append(row)
        return out

    return run_fenced(engine, shard, fence, work) if claims else []


def settle(
    engine: Engine,
    row: NotificationRow,
    status: NotificationStatus,
    *,
    fence: int,
    node_id: str,
    attempts: int,
    error: str | None,
    now_ms: int,
) -> bool:
    """Record a claimed notification's outcome under ``fence``; False when it was no longer claimed
    (another leader settled it). ``FencedOut`` when the fence moved."""
    return _update_claimed(
        engine,
        row,
        fence,
        status=status.value,
        node_id=node_id,
        attempts=attempts,
        error=clip(error) if error else None,
        sent_at_ms=now_ms,
    )


def postpone(
    engine: Engine,
    row: NotificationRow,
    *,
    fence: int,
    node_id: str,
    attempts: int,
    error: str | None,
    next_attempt_at_ms: int,
) -> bool:
    """Keep a claimed notification whose sends all failed claimed, to be tried again at
    ``next_attempt_at_ms``, with its ``attempts`` so far and the last error, under ``fence``; False when it
    was no longer claimed. ``FencedOut`` when the fence moved."""
    return _update_claimed(
        engine,
        row,
        fence,
        node_id=node_id,
        attempts=attempts,
        error=clip(error) if error else None,
        next_attempt_at_ms=next_attempt_at_ms,
    )


def _update_claimed(engine: Engine, row: NotificationRow, fence: int, **values: object) -> bool:
    """Set ``values`` (and ``fence``) on ``row`` if it is still claimed, under ``fence``."""

    def work(conn: Connection) -> bool:
        claimed = notifications.c.status == NotificationStatus.CLAIMED.value
        update = notifications.update().where(*_key_of(row), claimed).values(fence=fence, **values)
        return conn.execute(update).rowcount == 1

    return run_fenced(engine, row.shard, fence, work)


def _key_of(row: NotificationRow) -> tuple[ColumnElement[bool], ...]:
    return (
        notifications.c.job_id == row.job_id,
        notifications.c.scheduled_at_ms == row.scheduled_at_ms,
        notifications.c.kind == row.kind.value,
    )


def is_claimed(engine: Engine, row: NotificationRow) -> bool:
    """Whether ``row`` is still claimed and not settled (a sender looks before it sends)."""
    with reading(engine) as conn:
        return (
            conn.execute(select(notifications.c.status).where(*_key_of(row))).scalar()
            == NotificationStatus.CLAIMED.value
        )


def unsent(engine: Engine, shards: Collection[int], *, now_ms: int) -> list[NotificationRow]:
    """The notifications of ``shards`` claimed and not settled, due to be tried at ``now_ms`` (not postponed
    past it), in one read: their leader sends them."""
    if not shards:
        return []
    with reading(engine) as conn:
        rows = conn.execute(
            select(notifications).where(
                notifications.c.shard.in_(sorted(shards)),
                notifications.c.status == NotificationStatus.CLAIMED.value,
                or_(notifications.c.next_attempt_at_ms.is_(None), notifications.c.next_attempt_at_ms <= now_ms),
            )
        )
        return [_row(r) for r in rows]


def failed_without_notification(
    engine: Engine, shard: int, job_ids: Sequence[str], *, since_ms: int
) -> list[tuple[str, int]]:
    """The slots of ``job_ids`` (the shard's jobs that want on_failure) scheduled after ``since_ms`` that
    failed (or were abandoned) and have no on_failure row: what a new leader claims in case its predecessor
    died between the two. Read per job along the primary key: the status index holds only unresolved
    ticks, and a scan of the last hour by time would read every shard's ticks."""
    n = notifications
    missing = (
        ~select(n.c.job_id)
        .where(
            n.c.job_id == ticks.c.job_id,
            n.c.scheduled_at_ms == ticks.c.scheduled_at_ms,
            n.c.kind == NotificationKind.ON_FAILURE.value,
        )
        .exists()
    )
    out: list[tuple[str, int]] = []
    with reading(engine) as conn:
        for part in chunks(sorted(job_ids)):
            out += [
                tuple(r)
                for r in conn.execute(
                    select(ticks.c.job_id, ticks.c.scheduled_at_ms)
                    .where(
                        ticks.c.job_id.in_(part),
                        ticks.c.scheduled_at_ms > since_ms,
                        ticks.c.shard == shard,
                        ticks.c.status.in_([s.value for s in FAILED_STATUSES]),
                        missing,
                    )
                    .order_by(ticks.c.job_id, ticks.c.scheduled_at_ms)
                )
            ]
    return out


def recently_failed_jobs(engine: Engine, shard: int, job_ids: Sequence[str], *, since_ms: int) -> set[str]:
    """Of ``job_ids`` (the shard's jobs that want on_recovery), those with a failed (or abandoned) slot
    scheduled after ``since_ms``: the ones whose next success may be a recovery."""
    out: set[str] = set()
    with reading(engine) as conn:
        for part in chunks(sorted(job_ids)):
            out.update(
                conn.execute(
                    select(ticks.c.job_id)
                    .distinct()
                    .where(
                        ticks.c.job_id.in_(part),
                        ticks.c.scheduled_at_ms > since_ms,
                        ticks.c.shard == shard,
                        ticks.c.status.in_([s.value for s in FAILED_STATUSES]),
                    )
                ).scalars()
            )
    return out


def previous_run_status(engine: Engine, job_id: str, before_ms: int) -> TickStatus | None:
    """The status of the job's newest tick before ``before_ms`` that ran to an end (succeeded, failed,
    abandoned; skipped and unfinished ones pass over); None when there is none."""
    with reading(engine) as conn:
        value = conn.execute(
            select(ticks.c.status)
            .where(
                ticks.c.job_id == job_id,
                ticks.c.scheduled_at_ms < before_ms,
                ticks.c.status.in_([TickStatus.SUCCEEDED.value, *(s.value for s in FAILED_STATUSES)]),
            )
            .order_by(ticks.c.scheduled_at_ms.desc())
            .limit(1)
        ).scalar()
    return TickStatus(value) if value is not None else None


def next_run(engine: Engine, job_id: str, after_ms: int) -> tuple[int, TickStatus] | None:
    """The job's oldest tick after ``after_ms`` that ran to an end, as (slot, status); None when there is
    none yet. A failure that lands after a later slot's success (a slow run) makes that success a recovery."""
    with reading(engine) as conn:
        row = conn.execute(
            select(ticks.c.scheduled_at_ms, ticks.c.status)
            .where(
                ticks.c.job_id == job_id,
                ticks.c.scheduled_at_ms > after_ms,
                ticks.c.status.in_([TickStatus.SUCCEEDED.value, *(s.value for s in FAILED_STATUSES)]),
            )
            .order_by(ticks.c.scheduled_at_ms)
            .limit(1)
        ).first()
    return (row.scheduled_at_ms, TickStatus(row.status)) if row is not None else None


def between(engine: Engine, from_ms: int, to_ms: int, job_id: str | None = None) -> list[NotificationRow]:
    """Rows of slots in ``[from_ms, to_ms)`` (the audit's window), of one job or all."""
    q = select(notifications).where(notifications.c.scheduled_at_ms >= from_ms, notifications.c.scheduled_at_ms < to_ms)
    if job_id is not None:
        q = q.where(notifications.c.job_id == job_id)
    with reading(engine) as conn:
        return [_row(r) for r in conn.execute(q)]


def list_for_job(engine: Engine, job_id: str) -> list[NotificationRow]:
    with reading(engine) as conn:
        return [
            _row(r)
            for r in conn.execute(
                select(notifications)
                .where(notifications.c.job_id == job_id)
                .order_by(notifications.c.scheduled_at_ms, notifications.c.kind)
            )
        ]


def _exists(conn: Connection, job_id: str, slot_ms: int, kind: NotificationKind) -> bool:
    return (
        conn.execute(
            select(notifications.c.status).where(
                notifications.c.job_id == job_id,
                notifications.c.scheduled_at_ms == slot_ms,
                notifications.c.kind == kind.value,
            )
        ).first()
        is not None
    )


def _default_claimed_since(conn: Connection, job_id: str, kind: NotificationKind, since_ms: int) -> int:
    return conn.execute(
        select(func.count())
        .select_from(notifications)
        .where(
            and_(
                notifications.c.job_id == job_id,
                notifications.c.kind == kind.value,
                notifications.c.source == Source.DEFAULT.value,
                notifications.c.status != NotificationStatus.SUPPRESSED.value,
                notifications.c.claimed_at_ms > since_ms,
            )
        )
    ).scalar_one()


def _values(row: NotificationRow) -> dict[str, object]:
    return {
        "job_id": row.job_id,
        "scheduled_at_ms": row.scheduled_at_ms,
        "kind": row.kind.value,
        "shard": row.shard,
        "fence": row.fence,
        "node_id": row.node_id,
        "status": row.status.value,
        "source": row.source.value,
        "spec": row.spec,
        "claimed_at_ms": row.claimed_at_ms,
        "sent_at_ms": row.sent_at_ms,
        "attempts": row.attempts,
        "error": row.error,
        "next_attempt_at_ms": row.next_attempt_at_ms,
    }


def _row(r: AnyRow) -> NotificationRow:
    return NotificationRow(
        r.job_id,
        r.scheduled_at_ms,
        NotificationKind(r.kind),
        r.shard,
        r.fence,
        r.node_id,
        NotificationStatus(r.status),
        Source(r.source),
        r.spec,
        r.claimed_at_ms,
        r.sent_at_ms,
        r.attempts,
        r.error,
        r.next_attempt_at_ms,
    )
