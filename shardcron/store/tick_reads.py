"""Ticks' plain reads: where a new leader resumes, a job's history, the last runs, the audit's windows.

Nothing here takes a fence: the writes are ``ticks`` (claims and takeovers) and
``tick_results`` (status changes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Engine, ScalarSelect, Select, bindparam, false, func, or_, select

from shardcron.model import Tick, TickStatus
from shardcron.rules.deadlines import KINDS
from shardcron.store.engine import reading
from shardcron.store.schema import jobs, ticks, unresolved
from shardcron.store.sql import AnyRow, chunks


def last_ticks(engine: Engine, shard: int) -> dict[str, int]:
    """job_id -> latest scheduled slot with a tick (manual runs excluded), for
    the jobs that belong to ``shard`` now: where a new leader resumes each job.

    By the job's current shard, not the tick's: after a reshard a job's older
    ticks carry its old shard number, and they still say where it left off.
    """
    # Per job, the primary key walked backwards to the first scheduled row: no index
    # over (shard, manual, ...) for every insert to keep up, and no read of a
    # job's whole history.
    newest = (
        select(ticks.c.scheduled_at_ms)
        .where(ticks.c.job_id == jobs.c.id, ticks.c.manual == false())
        .order_by(ticks.c.scheduled_at_ms.desc())
        .limit(1)
        .correlate(jobs)
        .scalar_subquery()
    )
    q = select(jobs.c.id, newest).where(jobs.c.shard == shard)
    with reading(engine) as conn:
        return {job_id: at for job_id, at in conn.execute(q) if at is not None}


def unresolved_ticks(engine: Engine, shard: int) -> list[Tick]:
    """The shard's claimed or running ticks, oldest first: a new leader's orphans."""
    q = (
        select(ticks)
        .where(ticks.c.shard == shard, unresolved(ticks.c.status))
        .order_by(ticks.c.scheduled_at_ms, ticks.c.job_id)
    )
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


def list_ticks(engine: Engine, job_id: str, *, limit: int = 50, before_ms: int | None = None) -> list[Tick]:
    """A job's ticks, newest first; pass the oldest slot seen as ``before_ms`` for the next page."""
    q = select(ticks).where(ticks.c.job_id == job_id)
    if before_ms is not None:
        q = q.where(ticks.c.scheduled_at_ms < before_ms)
    q = q.order_by(ticks.c.scheduled_at_ms.desc()).limit(limit)
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


class LastRun(NamedTuple):
    """A job's newest tick scheduled at or before a time and not merely claimed, and its failures in a row."""

    scheduled_at_ms: int | None
    status: TickStatus | None
    failures_in_a_row: int
    missed_deadlines: tuple[str, ...] = ()  # the kinds of deadline that tick missed


_FAILED = (TickStatus.FAILED.value, TickStatus.ABANDONED.value)

# Each deadline kind and the column that records its miss (store/deadlines.py writes them).
MISSED_COLUMNS = tuple((kind.value, f"{kind.value}_missed_at_ms") for kind in KINDS)


def _last_runs_query() -> Select[Any]:
    """One statement for a page of jobs: per job, correlated subqueries on the primary key
    (job_id, scheduled_at_ms). Each ``ORDER BY scheduled_at_ms DESC LIMIT 1`` walks the job's
    index backwards from ``now`` and stops at its first row (the newest tick; the newest
    succeeded one), and the count reads only the rows after that success; the newest tick's status
    and each of its missed-deadline columns is one such walk. A GROUP BY with MAX(...) FILTER (status = 'succeeded') would read every row of every job on the page."""
    # A claimed row has not started: the coming slot's, claimed a lookahead early, or a jittered
    # slot waiting for its start. The last run is the newest row that started (or was settled).
    newest = (
        (ticks.c.job_id == jobs.c.id)
        & (ticks.c.scheduled_at_ms <= bindparam("now"))
        & (ticks.c.status != TickStatus.CLAIMED.value)
    )

    def of_newest(column: ColumnElement[Any]) -> ScalarSelect[Any]:
        return select(column).where(newest).order_by(ticks.c.scheduled_at_ms.desc()).limit(1).scalar_subquery()

    ok = ticks.alias("ok")
    last_ok = (
        select(ok.c.scheduled_at_ms)
        .where(ok.c.job_id == jobs.c.id, ok.c.status == TickStatus.SUCCEEDED.value)
        .order_by(ok.c.scheduled_at_ms.desc())
        .limit(1)
        .correlate(jobs)
    )  # two levels down: say so
    f = ticks.alias("f")
    failures = select(func.count()).where(
        f.c.job_id == jobs.c.id,
        f.c.status.in_(_FAILED),
        f.c.scheduled_at_ms <= bindparam("now"),
        f.c.scheduled_at_ms > func.coalesce(last_ok.scalar_subquery(), -(2**62)),
    )
    return select(
        jobs.c.id,
        of_newest(ticks.c.scheduled_at_ms).label("last_at"),
        of_newest(ticks.c.status).label("status"),
        failures.scalar_subquery().label("failures"),
        *(of_newest(ticks.c[column]).label(column) for _, column in MISSED_COLUMNS),
    ).where(jobs.c.id.in_(bindparam("ids", expanding=True)))


_LAST_RUNS = _last_runs_query()


def last_runs(engine: Engine, job_ids: Sequence[str], *, now_ms: int) -> dict[str, LastRun]:
    """job id -> its newest tick scheduled at or before ``now_ms`` that is not merely claimed (one
    that started or was settled; manual runs included) and its
    failures in a row (``rules.runs.failures_in_a_row``: failed or abandoned ticks after the
    newest succeeded one; skipped and unfinished ones pass over), and the deadlines that tick
    missed. One statement per 1,000 ids (a ListJobs page is one), never one per job. Jobs not in the store are left out."""
    out: dict[str, LastRun] = {}
    if not job_ids:
        return out
    with reading(engine) as conn:
        for part in chunks(list(job_ids), 1000):
            for r in conn.execute(_LAST_RUNS, {"ids": list(part), "now": now_ms}):
                out[r.id] = LastRun(
                    r.last_at, TickStatus(r.status) if r.status else None, int(r.failures or 0), missed_deadlines(r)
                )
    return out


def ticks_between(engine: Engine, from_ms: int, to_ms: int, job_id: str | None = None) -> list[Tick]:
    """Ticks with from_ms <= scheduled_at_ms < to_ms, oldest first (for the audit)."""
    q = select(ticks).where(ticks.c.scheduled_at_ms >= from_ms, ticks.c.scheduled_at_ms < to_ms)
    if job_id is not None:
        q = q.where(ticks.c.job_id == job_id)
    q = q.order_by(ticks.c.scheduled_at_ms, ticks.c.job_id)
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


def runs_busy_since(engine: Engine, job_id: str, *, scheduled_up_to_ms: int, busy_from_ms: int) -> list[Tick]:
    """The job's runs (rows not skipped) scheduled up to ``scheduled_up_to_ms`` that were still
    going at ``busy_from_ms``: unresolved, or finished then or later (for the audit's overlap rule)."""
    q = select(ticks).where(
        ticks.c.job_id == job_id,
        ticks.c.scheduled_at_ms <= scheduled_up_to_ms,
        ticks.c.status != TickStatus.SKIPPED.value,
        or_(ticks.c.finished_at_ms.is_(None), ticks.c.finished_at_ms >= busy_from_ms),
    )
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


def _tick(r: AnyRow) -> Tick:
    return Tick(
        job_id=r.job_id,
        scheduled_at_ms=r.scheduled_at_ms,
        shard=r.shard,
        fence=r.fence,
        node_id=r.node_id,
        status=TickStatus(r.status),
        attempt=r.attempt,
        manual=bool(r.manual),
        claimed_at_ms=r.claimed_at_ms,
        started_at_ms=r.started_at_ms,
        finished_at_ms=r.finished_at_ms,
        exit_code=r.exit_code,
        http_status=r.http_status,
        output=r.output,
        error=r.error,
        acked_at_ms=r.acked_at_ms,
        missed_deadlines=missed_deadlines(r),
    )


def missed_deadlines(r: AnyRow) -> tuple[str, ...]:
    """The kinds of deadline a row (a tick, or ``last_runs``' answer) says were missed."""
    return tuple(kind for kind, column in MISSED_COLUMNS if getattr(r, column) is not None)


__all__ = [
    "LastRun",
    "last_runs",
    "last_ticks",
    "list_ticks",
    "runs_busy_since",
    "ticks_between",
    "unresolved_ticks",
]
