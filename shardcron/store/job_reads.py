"""Job definitions' plain reads: one job, a shard's jobs, a page of jobs, counts per shard.

A Job read back is the ``spec`` column's JSON with the ``version``,
``paused`` and ``active_since_ms`` columns applied (``job_from_row``); the
fenced writes are in ``jobs``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from sqlalchemy import Engine, and_, false, func, or_, select

from shardcron.errors import JobNotFound
from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, namespace_of
from shardcron.model import Job
from shardcron.spec.job import job_from_json
from shardcron.store.engine import reading
from shardcron.store.schema import job_labels, jobs
from shardcron.store.schema import namespaces as namespace_rows
from shardcron.store.sql import AnyRow

# What a Job is read from: the definition and the columns that override it.
READ_COLUMNS = (jobs.c.id, jobs.c.shard, jobs.c.spec, jobs.c.version, jobs.c.paused, jobs.c.active_since_ms)


def get_job(engine: Engine, job_id: str) -> Job:
    """The job with this id; ``JobNotFound`` if there is none."""
    with reading(engine) as conn:
        row = conn.execute(select(*READ_COLUMNS).where(jobs.c.id == job_id)).first()
    if row is None:
        raise JobNotFound(job_id)
    return job_from_row(row)


def load_shard_jobs(engine: Engine, shard: int) -> list[Job]:
    """Every job of the shard, by id: what a new leader schedules."""
    with reading(engine) as conn:
        rows = conn.execute(select(*READ_COLUMNS).where(jobs.c.shard == shard).order_by(jobs.c.id)).all()
    return [job_from_row(r) for r in rows]


def list_jobs(
    engine: Engine,
    *,
    shard: int | None = None,
    labels: dict[str, str] | None = None,
    limit: int = 100,
    after_id: str | None = None,
    namespaces: Collection[str] | None = None,
    id_prefix: str = "",
    paused: bool | None = None,
) -> list[Job]:
    """A page of jobs ordered by namespace, then id; pass the last key seen as ``after_id`` for the next page.

    ``labels``: every given key must be present with exactly the given value.
    ``namespaces``: only jobs of these (None: every namespace).
    ``id_prefix``: only ids that start with it (in each namespace: a range of the primary key).
    ``paused``: only paused (True) or only active (False) jobs.
    """
    q = select(*READ_COLUMNS).order_by(jobs.c.namespace, jobs.c.id).limit(limit)
    if shard is not None:
        q = q.where(jobs.c.shard == shard)
    if namespaces is not None:
        q = q.where(jobs.c.namespace.in_(sorted(namespaces)))
    if paused is not None:
        q = q.where(jobs.c.paused == paused)
    if id_prefix:
        if namespaces is not None:
            searched = sorted(namespaces)
        else:  # every job's namespace has a row (jobs are admitted against it), and default always exists
            with reading(engine) as conn:
                searched = sorted({DEFAULT_NAMESPACE, *conn.execute(select(namespace_rows.c.name)).scalars()})
        # The namespace too: a key of namespace "pay" starts with "pa" as well.
        q = q.where(
            or_(
                false(),
                *(
                    and_(jobs.c.namespace == ns, jobs.c.id.startswith(join_key(ns, id_prefix), autoescape=True))
                    for ns in searched
                ),
            )
        )
    if after_id is not None:  # the key orders like the id within its namespace (jobkey)
        after_ns = namespace_of(after_id)
        q = q.where(or_(jobs.c.namespace > after_ns, and_(jobs.c.namespace == after_ns, jobs.c.id > after_id)))
    for key, value in (labels or {}).items():
        has = select(job_labels.c.job_id).where(
            job_labels.c.job_id == jobs.c.id, job_labels.c.key == key, job_labels.c.value == value
        )
        q = q.where(has.exists())
    with reading(engine) as conn:
        rows = conn.execute(q).all()
    return [job_from_row(r) for r in rows]


def count_jobs_by_shard(engine: Engine) -> dict[int, int]:
    with reading(engine) as conn:
        rows = conn.execute(select(jobs.c.shard, func.count()).group_by(jobs.c.shard)).all()
    return {shard: n for shard, n in rows}


def job_from_row(row: AnyRow) -> Job:
    """The Job a row of ``READ_COLUMNS`` holds."""
    job = job_from_json(row.spec)
    return replace(job, version=row.version, paused=bool(row.paused), active_since_ms=row.active_since_ms)


__all__ = ["READ_COLUMNS", "count_jobs_by_shard", "get_job", "job_from_row", "list_jobs", "load_shard_jobs"]
