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
beside a 25 h marker (``redis_clients``), the guard RQ uses too.

Why not ``enqueue_job``: it runs its own WATCH/MULTI and takes no pipeline,
so the marker could not be written in the same transaction (a crash between
the two would lose the slot or leave it unguarded). The job is written here
exactly as arq 0.28's ``enqueue_job`` writes it (``PSETEX arq:job:<id>`` with
``arq.jobs.serialize_job``'s pickle, ``ZADD <queue>``), with arq's own key
names and serializer, by one Lua script (``ENQUEUE_ONCE``) that first looks
for the slot's marker and arq's job and result keys, then writes the job and
the marker, atomically. One script per slot, so a burst of slots goes out as
one pipelined round trip of scripts (``redis_batch``) on the node's loop.
ZADD runs first: it is the one write Redis can refuse (WRONGTYPE), and a
script is not rolled back, so a refused slot leaves nothing behind.
"""

from __future__ import annotations

import time

from arq.constants import expires_extra_ms, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job

from shardcron.abc import Cancel
from shardcron.executors import redis_async, redis_clients
from shardcron.executors.aio import LoopThread, OnTheLoop
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import ArqSpec, ExecutionResult, ExecutorSpec, TickContext

# KEYS[1] the slot's marker, KEYS[2] arq's job key, KEYS[3] arq's result key, KEYS[4] the queue.
# ARGV[1] the marker's TTL in ms, ARGV[2] the marker's value, ARGV[3] the job key's TTL in ms,
# ARGV[4] the serialized job, ARGV[5] the job id, ARGV[6] its score (when to run, epoch ms).
# Returns {1, ''} when written, {0, the marker's value} or {2, the existing job or result key}.
ENQUEUE_ONCE = """
local found = redis.call('GET', KEYS[1])
if found then
  return {0, found}
end
for i = 2, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {2, KEYS[i]}
  end
end
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[5])
redis.call('PSETEX', KEYS[2], ARGV[3], ARGV[4])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return {1, ''}
"""


class ArqExecutor(OnTheLoop):
    """``run_async`` on the node's loop: the burst's scripts go out in one pipelined round trip (``redis_batch``)."""

    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        super().__init__(connections, loop, "shardcron-arq")

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        arq_spec = spec.arq
        if arq_spec is None:
            now = now_ms()
            return ExecutionResult(
                ok=False,
                started_at_ms=now,
                finished_at_ms=now,
                error="invalid job: an arq executor needs its settings (url, function)",
            )
        return await redis_async.call_async(
            self._connections,
            self._loop,
            arq_spec.url,
            timeout_s,
            cancel,
            f"arq enqueue of {arq_spec.function} to queue {arq_spec.queue}",
            enqueue_command(arq_spec, ctx),
            lambda reply: enqueue_output(arq_spec, ctx, reply),
        )


def enqueue_command(spec: ArqSpec, ctx: TickContext) -> tuple[str | int | bytes, ...]:
    """The slot's EVAL of ``ENQUEUE_ONCE`` (EVAL, not EVALSHA: see ``redis_stream.add_command``)."""
    job_id = slot_uuid(ctx)
    kwargs = dict(spec.kwargs)
    if spec.tick_kwarg:
        kwargs[spec.tick_kwarg] = tick_fields(ctx)
    enqueued_ms = int(time.time() * 1000)
    job = serialize_job(spec.function, tuple(spec.args), kwargs, None, enqueued_ms)
    return (
        "EVAL",
        ENQUEUE_ONCE,
        4,
        redis_clients.marker_key(ctx),
        job_key_prefix + job_id,
        result_key_prefix + job_id,
        spec.queue,
        redis_clients.DEDUPE_TTL_MS,
        f"arq job {job_id} on queue {spec.queue}",
        expires_extra_ms,  # arq's expiry for a job never started
        job,
        job_id,
        enqueued_ms,  # score = when to run: now
    )


def enqueue_output(spec: ArqSpec, ctx: TickContext, reply: list) -> str:
    return redis_clients.guard_script_output(
        reply, f"enqueued arq job {slot_uuid(ctx)} ({spec.function}) to queue {spec.queue}"
    )
