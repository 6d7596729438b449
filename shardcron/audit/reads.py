"""The audit's reads from the store: the jobs, a job's first row after the window, the fence log, the calendars."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import Engine, select

from shardcron.errors import JobNotFound
from shardcron.model import Job
from shardcron.rules.audit import FenceRaise
from shardcron.rules.calendar_history import History, Version
from shardcron.store.calendars import calendar_history as stored_calendar_history
from shardcron.store.engine import reading
from shardcron.store.job_reads import get_job, list_jobs
from shardcron.store.schema import fence_log, ticks

JOB_PAGE = 1000


def audited_jobs(engine: Engine, job_id: str | None) -> list[Job]:
    """The job keyed ``job_id`` (none if it is deleted), or every job, read in pages of ``JOB_PAGE``."""
    if job_id is not None:
        try:
            return [get_job(engine, job_id)]
        except JobNotFound:
            return []  # deleted: its ticks are still audited
    out: list[Job] = []
    while True:
        page = list_jobs(engine, limit=JOB_PAGE, after_id=out[-1].id if out else None)
        out += page
        if len(page) < JOB_PAGE:
            return out


def first_row_after(engine: Engine, job_id: str, after_ms: int) -> tuple[int, int | None] | None:
    """The slot and claim time of the job's first scheduled row after ``after_ms``, if any."""
    q = (
        select(ticks.c.scheduled_at_ms, ticks.c.claimed_at_ms)
        .where(ticks.c.job_id == job_id, ticks.c.scheduled_at_ms > after_ms, ticks.c.manual == False)  # noqa: E712
        .order_by(ticks.c.scheduled_at_ms)
        .limit(1)
    )
    with reading(engine) as conn:
        row = conn.execute(q).first()
    return (row.scheduled_at_ms, row.claimed_at_ms) if row else None


def fence_raises(engine: Engine, shards: Iterable[int]) -> list[FenceRaise]:
    """Every raise the fence log holds for these shards."""
    wanted = sorted(set(shards))
    if not wanted:
        return []
    q = select(fence_log).where(fence_log.c.shard.in_(wanted))
    with reading(engine) as conn:
        return [FenceRaise(r.shard, r.fence, r.node_id, r.raised_at_ms) for r in conn.execute(q)]


def calendar_history(engine: Engine, jobs: list[Job]) -> History:
    """Every version of the calendars these jobs name (one query; none when no job names one)."""
    names = {n for j in jobs for n in j.calendars}
    if not names:
        return History({})
    versions: dict[str, list[Version]] = defaultdict(list)
    for v in stored_calendar_history(engine, names):
        versions[v.name].append(Version(v.effective_at_ms, v.calendar))
    return History(versions)


__all__ = ["JOB_PAGE", "audited_jobs", "calendar_history", "fence_raises", "first_row_after"]
