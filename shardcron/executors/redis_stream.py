"""Adds a tick to a Redis stream (XADD), exactly once per slot.

The entry's fields are the job's ``fields`` plus the tick (``identity.tick_fields``:
slot, attempt, fence, idempotency key); a user field named ``shardcron_*`` is
dropped so a job cannot forge them.

Streams do not deduplicate, so one Lua script does, atomically: if the slot's
marker (``redis_clients.marker_key``) exists it returns the entry id stored in
it; otherwise it XADDs (``MAXLEN ~ n`` when ``maxlen`` is set) and sets the
marker to the new entry id for ``dedupe_ttl_ms`` (default
``redis_clients.DEDUPE_TTL_MS``, 25 h: past any default catch-up window). The
marker is set after the XADD, not with SET NX before it, because a script is
not rolled back: an XADD refused (say, WRONGTYPE) after a SET NX would leave a
marker for an entry that does not exist, and every retry would call it a
duplicate. Both keys are named in KEYS; on Redis Cluster they would need one
hash slot, which they do not have (a single Redis or a replicated primary).
"""

from __future__ import annotations

from shardcron.abc import Cancel
from shardcron.executors import redis_async, redis_clients
from shardcron.executors.aio import LoopThread, OnTheLoop
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import with_tick_fields
from shardcron.model import ExecutionResult, ExecutorSpec, RedisStreamSpec, TickContext

# KEYS[1] the slot's marker, KEYS[2] the stream.
# ARGV[1] the marker's TTL in ms, ARGV[2] MAXLEN ("" for none), ARGV[3..] field, value, ...
# Returns {1, new entry id} or {0, the entry id already added for this slot}.
ADD_ONCE = """
local found = redis.call('GET', KEYS[1])
if found then
  return {0, found}
end
local id
if ARGV[2] == '' then
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
else
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[1], id, 'PX', ARGV[1])
return {1, id}
"""


def entry_fields(spec: RedisStreamSpec, ctx: TickContext) -> dict[str, str]:
    return with_tick_fields(spec.fields, ctx)


class RedisStreamExecutor(OnTheLoop):
    """``run_async`` on the node's loop: the burst's XADDs go out in one pipelined round trip (``redis_batch``)."""

    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        super().__init__(connections, loop, "shardcron-redis-stream")

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        stream_spec = spec.redis_stream
        if stream_spec is None:
            now = now_ms()
            return ExecutionResult(
                ok=False,
                started_at_ms=now,
                finished_at_ms=now,
                error="invalid job: a redis-stream executor needs its settings (url, stream)",
            )
        return await redis_async.call_async(
            self._connections,
            self._loop,
            stream_spec.url,
            timeout_s,
            cancel,
            f"XADD to stream {stream_spec.stream}",
            add_command(stream_spec, ctx),
            lambda reply: add_output(stream_spec, reply),
        )


def add_command(spec: RedisStreamSpec, ctx: TickContext) -> tuple[str | int, ...]:
    """The slot's EVAL of ``ADD_ONCE``. EVAL, not EVALSHA: Redis caches the script by its SHA1 either way,
    and a batch never has to be resent after a restart emptied the cache (NOSCRIPT)."""
    args: list[str | int] = [
        spec.dedupe_ttl_ms or redis_clients.DEDUPE_TTL_MS,
        "" if spec.maxlen is None else spec.maxlen,
    ]
    for name, value in entry_fields(spec, ctx).items():
        args += [name, value]
    return ("EVAL", ADD_ONCE, 2, redis_clients.marker_key(ctx), spec.stream, *args)


def add_output(spec: RedisStreamSpec, reply: list) -> str:
    added, entry_id = reply
    entry_id = entry_id.decode("utf-8", "replace")
    if not added:
        return f"duplicate: already in {spec.stream} as {entry_id}"
    return f"added {entry_id} to stream {spec.stream}"
