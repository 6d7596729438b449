"""Enqueues a tick as an RQ job: ``spec.rq.func`` onto ``spec.rq.queue``, exactly once per slot.

The job id is the slot's UUID (``identity.slot_uuid``) and ``job.meta["shardcron"]``
holds the tick (``identity.tick_fields``: slot, attempt, fence), so a worker can
tell which slot it runs and refuse a deposed leader's work.

Why not just ``Queue.enqueue(job_id=...)``: RQ overwrites a job with the same
id and pushes the id a second time (rq#1701), so two attempts of a slot would
run it twice. RQ 2.12's ``unique=True`` refuses an existing id atomically, but
only while the job hash exists: ``result_ttl`` after the job finished (500 s by
default), far shorter than a catch-up window. So the job is written through
RQ's own pipeline API (``enqueue_call(..., pipeline=pipe)``) inside
``redis_clients.enqueue_once``'s MULTI/EXEC, beside a marker that outlives the
catch-up window (``redis_clients.DEDUPE_TTL_MS``, 25 h). A second attempt of
the slot, from any leader, is then a success that says "duplicate".
"""

from __future__ import annotations

import redis
from rq import Queue
from rq.job import Job

from shardcron.abc import Cancel
from shardcron.executors import redis_clients
from shardcron.executors.aio import LoopThread
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import ExecutionResult, ExecutorSpec, RqSpec, TickContext


class RqExecutor:
    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        self._connections = connections  # RQ is synchronous: the asyncio loop is not used

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        rq_spec = spec.rq
        if rq_spec is None:
            now = now_ms()
            return ExecutionResult(
                ok=False,
                started_at_ms=now,
                finished_at_ms=now,
                error="invalid job: an rq executor needs its settings (url, func)",
            )
        return redis_clients.call(
            self._connections,
            rq_spec.url,
            timeout_s,
            cancel,
            f"rq enqueue of {rq_spec.func} to queue {rq_spec.queue}",
            lambda client: enqueue(client, rq_spec, ctx),
        )


def enqueue(client: redis.Redis, spec: RqSpec, ctx: TickContext) -> str:
    job_id = slot_uuid(ctx)
    queue = Queue(spec.queue, connection=client)
    where = f"rq job {job_id} ({spec.func}) to queue {spec.queue}"

    def write(pipe) -> None:
        queue.enqueue_call(
            spec.func,
            args=tuple(spec.args),
            kwargs=dict(spec.kwargs),
            job_id=job_id,
            meta={"shardcron": tick_fields(ctx)},
            pipeline=pipe,
        )

    found = redis_clients.enqueue_once(
        client, redis_clients.marker_key(ctx), f"rq job {job_id} on queue {spec.queue}", [Job.key_for(job_id)], write
    )
    if found is not None:
        return f"duplicate: already enqueued {found}"
    return f"enqueued {where}"
