"""Pruning ticks: bounded, fenced DELETE batches, and the horizons that tell the audit what was pruned.

Every batch is one ``fenced`` transaction that first moves the recorded horizon
forward (``shard_horizons`` or ``job_horizons``; never back) and then deletes at
most ``limit`` rows below it, oldest first. Recording and deleting commit
together, so no reader ever finds a deleted row without the horizon that
explains it; and a raise of the shard's fence (a new leader) waits for the
batch or refuses it (``FencedOut``), like every other leader write.

What a batch never deletes (``rules.retention.may_delete``, in SQL):

* a ``claimed`` or ``running`` tick: its leader, or the next one, settles it;
* a job's newest tick, and its newest scheduled (not manual) tick: catch-up
  resumes from the latter and ``jobs get`` shows the former as the last run.

A deleted tick's notification rows go with it once they are settled (sent,
failed or suppressed); one still ``claimed`` stays for its sender.

A row selected as final stays final (no write moves a final status back), so
the keys read first are still deletable when the DELETE of the same
transaction reaches them; the DELETE repeats the conditions anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    exists,
    false,
    or_,
    select,
    true,
    tuple_,
)

from shardcron.model import TickStatus
from shardcron.rules.notifications import NotificationStatus
from shardcron.rules.retention import advance_horizon, history_cutoff_ms
from shardcron.store.engine import reading
from shardcron.store.fences import run_fenced
from shardcron.store.schema import job_horizons, jobs, notifications, shard_horizons, ticks
from shardcron.store.sql import chunks, insert_ignoring_duplicates

_UNRESOLVED = (TickStatus.CLAIMED.value, TickStatus.RUNNING.value)
_newer = ticks.alias("newer")
_NEWER_ROW = and_(_newer.c.job_id == ticks.c.job_id, _newer.c.scheduled_at_ms > ticks.c.scheduled_at_ms)
# Deletable: final, and neither the job's newest row nor its newest scheduled one (a manual run after it
# does not count: catch-up resumes from the newest scheduled row, ``ticks.last_ticks``).
_DELETABLE = and_(
    ticks.c.status.not_in(_UNRESOLVED),
    or_(
        exists().where(_NEWER_ROW, _newer.c.manual == false()),
        and_(ticks.c.manual == true(), exists().where(_NEWER_ROW)),
    ),
)


def prune_shard_batch(engine: Engine, *, shard: int, fence: int, horizon_ms: int, limit: int, now_ms: int) -> int:
    """Record ``horizon_ms`` as the shard's horizon (if it is further on) and delete at most ``limit``
    deletable ticks of the shard scheduled before it; returns the rows deleted. ``FencedOut``: not done."""

    def work(conn: Connection) -> int:
        _advance(conn, _SHARD_HORIZON, shard_horizons, {"shard": shard}, horizon_ms, fence, now_ms)
        return _delete(conn, _SHARD_OLDEST, {"shard": shard, "below": horizon_ms, "limit": limit})

    return run_fenced(engine, shard, fence, work)


def prune_job_batch(engine: Engine, *, shard: int, fence: int, job_id: str, keep: int, limit: int, now_ms: int) -> int:
    """Keep the job's newest ``keep`` ticks (its ``history_limit``): record the oldest kept slot as the
    job's horizon and delete at most ``limit`` deletable ticks before it; returns the rows deleted."""

    def work(conn: Connection) -> int:
        newest = conn.execute(_JOB_NEWEST, {"job_id": job_id, "keep": keep}).scalars().all()
        cutoff = history_cutoff_ms(newest, keep)
        if cutoff is None:
            return 0  # fewer ticks than the limit: nothing to prune
        _advance(conn, _JOB_HORIZON, job_horizons, {"job_id": job_id}, cutoff, fence, now_ms)
        return _delete(conn, _JOB_OLDEST, {"job_id": job_id, "below": cutoff, "limit": limit})

    return run_fenced(engine, shard, fence, work)


def _delete(conn: Connection, oldest: Select[Any, Any], params: dict[str, object]) -> int:
    # Keys first, then a DELETE by key: MariaDB refuses a DELETE whose subquery reads its own table.
    keys = [tuple(k) for k in conn.execute(oldest, params)]
    deleted = 0
    for part in chunks(keys):
        deleted += conn.execute(_DELETE_KEYS, {"keys": list(part)}).rowcount
        conn.execute(_DELETE_SETTLED_NOTIFICATIONS, {"keys": list(part)})
    return deleted


def _advance(
    conn: Connection, move: Update, table: Table, key: dict[str, object], horizon_ms: int, fence: int, now_ms: int
) -> None:
    """Move the recorded horizon forward to ``horizon_ms``; a horizon already further on stays."""
    row = {"horizon_ms": horizon_ms, "fence": fence, "updated_at_ms": now_ms}
    if not conn.execute(
        move, {**{f"k_{k}": v for k, v in key.items()}, **{f"v_{k}": v for k, v in row.items()}}
    ).rowcount:  # no row yet, or one further on (then the insert is the no-op)
        insert_ignoring_duplicates(conn, table, [{**key, **row}])


# Built once, values bound at execution: building a statement costs several times what running it does, and
# the pruner runs beside the starts.
def _oldest(where: ColumnElement[bool]) -> Select[Any, Any]:
    return (
        select(ticks.c.job_id, ticks.c.scheduled_at_ms)
        .where(where, ticks.c.scheduled_at_ms < bindparam("below"), _DELETABLE)
        .order_by(ticks.c.scheduled_at_ms)
        .limit(bindparam("limit"))
    )


def _move(table: Table, key_col: Column[Any]) -> Update:
    return (
        table.update()
        .where(key_col == bindparam(f"k_{key_col.name}"), table.c.horizon_ms < bindparam("v_horizon_ms"))
        .values(
            horizon_ms=bindparam("v_horizon_ms"), fence=bindparam("v_fence"), updated_at_ms=bindparam("v_updated_at_ms")
        )
    )


_SHARD_OLDEST = _oldest(ticks.c.shard == bindparam("shard"))
_JOB_OLDEST = _oldest(ticks.c.job_id == bindparam("job_id"))
_JOB_NEWEST = (
    select(ticks.c.scheduled_at_ms)
    .where(ticks.c.job_id == bindparam("job_id"))
    .order_by(ticks.c.scheduled_at_ms.desc())
    .limit(bindparam("keep"))
)
_DELETE_KEYS = ticks.delete().where(
    tuple_(ticks.c.job_id, ticks.c.scheduled_at_ms).in_(bindparam("keys", expanding=True)),
    ticks.c.status.not_in(_UNRESOLVED),
)
_DELETE_SETTLED_NOTIFICATIONS = notifications.delete().where(
    tuple_(notifications.c.job_id, notifications.c.scheduled_at_ms).in_(bindparam("keys", expanding=True)),
    notifications.c.status != NotificationStatus.CLAIMED.value,
)
_SHARD_HORIZON = _move(shard_horizons, shard_horizons.c.shard)
_JOB_HORIZON = _move(job_horizons, job_horizons.c.job_id)


def shard_horizons_by_shard(engine: Engine) -> dict[int, int]:
    """shard -> its recorded retention horizon (shards never pruned are absent)."""
    with reading(engine) as conn:
        return dict(conn.execute(select(shard_horizons.c.shard, shard_horizons.c.horizon_ms)).all())


def horizons_of_jobs(engine: Engine, job_ids: Sequence[str]) -> dict[str, int]:
    """job id -> the later of its shard's horizon and its own (history_limit); jobs with neither are absent.

    By the job's current shard: a job resharded since its older rows were pruned
    under its old shard number is judged by its new shard's horizon (a known limit).
    """
    out: dict[str, int] = {}
    q = select(jobs.c.id, shard_horizons.c.horizon_ms, job_horizons.c.horizon_ms.label("job_horizon")).select_from(
        jobs.outerjoin(shard_horizons, shard_horizons.c.shard == jobs.c.shard).outerjoin(
            job_horizons, job_horizons.c.job_id == jobs.c.id
        )
    )
    with reading(engine) as conn:
        for part in chunks(list(job_ids), 1000):
            for r in conn.execute(q.where(jobs.c.id.in_(list(part)))):
                horizon = advance_horizon(r.horizon_ms, r.job_horizon)
                if horizon is not None:
                    out[r.id] = horizon
    return out


__all__ = ["horizons_of_jobs", "prune_job_batch", "prune_shard_batch", "shard_horizons_by_shard"]
