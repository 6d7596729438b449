"""Enqueues a tick as an arq job: ``spec.arq.function`` onto ``spec.arq.queue``, exactly once per slot.

The job id is the slot's UUID (``identity.slot_uuid``); with ``spec.arq.tick_kwarg``
set, the tick (``identity.tick_fields``: slot, attempt, fence) is passed as that
keyword argument.

How long arq's own dedupe lasts: ``ArqRedis.enqueue_job(_job_id=...)`` returns
None while ``arq:job:<id>`` (queued or running, at most 24 h) or
``arq:result:<id>`` exists, and the result is kept for the worker's
``keep_result`` (1 h by default; 0 keeps none). After that the same id is
enqueued again, so a slot retried by a successor after its job ran would run
twice. That is shorter than the catch-up window allows, so the job is written
inside ``redis_clients.enqueue_once``'s MULTI/EXEC beside a 25 h marker, the
guard RQ uses too.

Why not ``enqueue_job`` on the asyncio loop: it runs its own WATCH/MULTI and
takes no pipeline, so the marker could not be written in the same transaction
(a crash between the two would lose the slot or leave it unguarded). The job
is written here exactly as arq 0.28's ``enqueue_job`` writes it (``PSETEX
arq:job:<id>`` with ``arq.jobs.serialize_job``'s pickle, ``ZADD <queue>``),
with arq's own key names and serializer, through the synchronous client the
other Redis kinds share. The node's asyncio loop is therefore not needed.
"""

from __future__ import annotations

import time

import redis
from arq.constants import expires_extra_ms, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job

from shardcron.abc import Cancel
from shardcron.executors import redis_clients
from shardcron.executors.aio import LoopThread
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import ArqSpec, ExecutionResult, ExecutorSpec, TickContext


class ArqExecutor:
    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        self._connections = connections  # see the module docstring: the asyncio loop is not used

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        arq_spec = spec.arq
        if arq_spec is None:
            now = now_ms()
            return ExecutionResult(
                ok=False,
                started_at_ms=now,
                finished_at_ms=now,
                error="invalid job: an arq executor needs its settings (url, function)",
            )
        return redis_clients.call(
            self._connections,
            arq_spec.url,
            timeout_s,
            cancel,
            f"arq enqueue of {arq_spec.function} to queue {arq_spec.queue}",
            lambda client: enqueue(client, arq_spec, ctx),
        )


def enqueue(client: redis.Redis, spec: ArqSpec, ctx: TickContext) -> str:
    job_id = slot_uuid(ctx)
    kwargs = dict(spec.kwargs)
    if spec.tick_kwarg:
        kwargs[spec.tick_kwarg] = tick_fields(ctx)
    job_key = job_key_prefix + job_id
    where = f"arq job {job_id} ({spec.function}) to queue {spec.queue}"

    def write(pipe) -> None:
        enqueued_ms = int(time.time() * 1000)
        job = serialize_job(spec.function, tuple(spec.args), kwargs, None, enqueued_ms)
        pipe.psetex(job_key, expires_extra_ms, job)  # arq's expiry for a job never started
        pipe.zadd(spec.queue, {job_id: enqueued_ms})  # score = when to run: now

    found = redis_clients.enqueue_once(
        client,
        redis_clients.marker_key(ctx),
        f"arq job {job_id} on queue {spec.queue}",
        [job_key, result_key_prefix + job_id],
        write,
    )
    if found is not None:
        return f"duplicate: already enqueued {found}"
    return f"enqueued {where}"
