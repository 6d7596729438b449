"""Enqueues a tick as an RQ job: ``spec.rq.func`` onto ``spec.rq.queue``, exactly once per slot.

The job id is the slot's UUID (``identity.slot_uuid``) and ``job.meta["shardcron"]``
holds the tick (``identity.tick_fields``: slot, attempt, fence), so a worker can
tell which slot it runs and refuse a deposed leader's work.

Why not just ``Queue.enqueue(job_id=...)``: RQ overwrites a job with the same
id and pushes the id a second time (rq#1701), so two attempts of a slot would
run it twice. RQ 2.12's ``unique=True`` refuses an existing id atomically, but
only while the job hash exists: ``result_ttl`` after the job finished (500 s by
default), far shorter than a catch-up window. So the job's writes are made by
RQ's own pipeline API (``enqueue_call(..., pipeline=pipe)``) into a pipeline
that is never executed, only read (``recorded_writes``), and one Lua script
(``ENQUEUE_ONCE``) runs them unless the slot's marker or RQ's job hash
exists, then sets the marker (``redis_clients.DEDUPE_TTL_MS``, 25 h), all
atomically. A second attempt of the slot, from any leader, is then a success
that says "duplicate". One script per slot, so a burst of slots goes out as
one pipelined round trip (``redis_batch``) on the node's loop.
"""

from __future__ import annotations

import redis
from rq import Queue
from rq.job import Job

from shardcron.abc import Cancel
from shardcron.executors import redis_async, redis_clients
from shardcron.executors.aio import LoopThread, OnTheLoop
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import ExecutionResult, ExecutorSpec, RqSpec, TickContext

# KEYS[1] the slot's marker, KEYS[2] RQ's job hash.
# ARGV[1] the marker's TTL in ms, ARGV[2] the marker's value, then RQ's writes, each as
# <number of words>, <command>, <argument>...
# Returns {1, ''} when written, {0, the marker's value} or {2, the job hash's key}.
ENQUEUE_ONCE = """
local found = redis.call('GET', KEYS[1])
if found then
  return {0, found}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {2, KEYS[2]}
end
local i = 3
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return {1, ''}
"""

# RQ asks the server for its version (an INFO) only to note it on the in-memory Job: none of the
# enqueue's writes depend on it, so the recording queue is told a version instead of asking.
_NOTED_SERVER_VERSION = (7, 0, 0)

# A client that is never connected: RQ's Queue needs one to make the pipeline it writes into.
_RECORDER = redis.Redis()


class RqExecutor(OnTheLoop):
    """``run_async`` on the node's loop: the burst's scripts go out in one pipelined round trip (``redis_batch``)."""

    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        super().__init__(connections, loop, "shardcron-rq")

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        rq_spec = spec.rq
        if rq_spec is None:
            now = now_ms()
            return ExecutionResult(
                ok=False,
                started_at_ms=now,
                finished_at_ms=now,
                error="invalid job: an rq executor needs its settings (url, func)",
            )
        what = f"rq enqueue of {rq_spec.func} to queue {rq_spec.queue}"
        try:
            command = enqueue_command(rq_spec, ctx)
        except (ValueError, TypeError) as e:  # RQ refused the job's arguments
            now = now_ms()
            return ExecutionResult(
                ok=False, started_at_ms=now, finished_at_ms=now_ms(), error=f"{what} failed: invalid job: {e}"
            )
        return await redis_async.call_async(
            self._connections,
            self._loop,
            rq_spec.url,
            timeout_s,
            cancel,
            what,
            command,
            lambda reply: enqueue_output(rq_spec, ctx, reply),
        )


def recorded_writes(spec: RqSpec, ctx: TickContext) -> list[tuple]:
    """The commands RQ's ``enqueue_call`` writes for the slot's job, recorded, not sent."""
    queue = Queue(spec.queue, connection=_RECORDER)
    queue.redis_server_version = _NOTED_SERVER_VERSION
    with _RECORDER.pipeline(transaction=False) as pipe:
        queue.enqueue_call(
            spec.func,
            args=tuple(spec.args),
            kwargs=dict(spec.kwargs),
            job_id=slot_uuid(ctx),
            meta={"shardcron": tick_fields(ctx)},
            pipeline=pipe,
        )
        return [args for args, _ in pipe.command_stack]


def enqueue_command(spec: RqSpec, ctx: TickContext) -> tuple:
    """The slot's EVAL of ``ENQUEUE_ONCE`` (EVAL, not EVALSHA: see ``redis_stream.add_command``)."""
    job_id = slot_uuid(ctx)
    words: list = []
    for write in recorded_writes(spec, ctx):
        words += [len(write), *write]
    return (
        "EVAL",
        ENQUEUE_ONCE,
        2,
        redis_clients.marker_key(ctx),
        Job.key_for(job_id),
        redis_clients.DEDUPE_TTL_MS,
        f"rq job {job_id} on queue {spec.queue}",
        *words,
    )


def enqueue_output(spec: RqSpec, ctx: TickContext, reply: list) -> str:
    return redis_clients.guard_script_output(
        reply, f"enqueued rq job {slot_uuid(ctx)} ({spec.func}) to queue {spec.queue}"
    )
