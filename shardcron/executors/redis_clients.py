"""What the Redis kinds (rq, arq, redis-stream) share: timeouts, the once-per-slot marker, errors in one line.

Clients. One redis.asyncio client per ``(url, socket timeout)``, with its
batcher, in the node's ``Connections`` (``redis_async``, ``redis_batch``).
Connect and socket timeouts are ``min(timeout_s, 5s)``, so a dead or
black-holed Redis fails a tick in seconds, never after a job's whole timeout.
A refused or broken connection is retried once on a fresh one (a pooled
connection may have died with a Redis restart); a timeout is not retried, so
it costs one timeout. Every write is guarded by the slot's marker (below), so
that retry can never enqueue twice.

The guard. Each kind writes its job with one Lua script that first looks for
a marker ``shardcron:enqueued:<slot uuid>`` (and for the queue's own keys for
the job id), and sets the marker beside the job, atomically; an existing
marker or job means the slot is already enqueued. (Why a marker and not RQ's
or arq's job id: ``docs/explanation/guarantees.md``.) The marker lives
``DEDUPE_TTL_MS`` (25 h; redis-stream: the job's ``dedupe_ttl`` when set):
longer than the default catch-up window (1 h) plus an hour, and than arq's
24 h job expiry. A retry of a slot older than that is not deduplicated at the
queue (a job with a catch-up window over 24 h should consume idempotently,
see ``shardcron.consumer``).
"""

from __future__ import annotations

from redis.exceptions import AuthenticationError, ConnectionError, RedisError, ResponseError, TimeoutError

from shardcron.executors.identity import slot_uuid
from shardcron.model import TickContext

# The longest a single connect or socket read/write may take, whatever the job's timeout.
MAX_SOCKET_TIMEOUT_S = 5.0

# Marks a slot as enqueued (rq, arq) or added (redis-stream); its value says where to.
ENQUEUED_PREFIX = "shardcron:enqueued:"

# How long a marker lives: above the default catch-up window plus an hour, and above arq's
# 24 h job expiry (``arq.constants.expires_extra_ms``). See the module docstring.
DEDUPE_TTL_MS = 25 * 3600 * 1000


def socket_timeout_s(timeout_s: float) -> float:
    return max(0.1, min(timeout_s, MAX_SOCKET_TIMEOUT_S))


def marker_key(ctx: TickContext) -> str:
    return ENQUEUED_PREFIX + slot_uuid(ctx)


def guard_script_output(reply: list, enqueued: str) -> str:
    """What a guard script's ``{written, found}`` reply says: ``enqueued`` when it wrote the job, else which
    earlier copy made it a duplicate (0: the slot's marker; 2: the queue's own job key)."""
    written, found = reply
    found = found.decode("utf-8", "replace")
    if written == 0:
        return f"duplicate: already enqueued as {found}"
    if written == 2:
        return f"duplicate: already enqueued ({found} exists)"
    return enqueued


def explain(exc: BaseException) -> str:
    """A one-line reason. redis-py's messages name host and port, never the password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, AuthenticationError):
        return f"authentication failed: {text}"
    if isinstance(exc, TimeoutError):
        return f"timed out: {text}"
    if isinstance(exc, ConnectionError):
        if isinstance(exc.__context__, ConnectionRefusedError) and "refused" not in text.lower():
            text += " (Connection refused)"  # redis.asyncio words it as asyncio does: "Connect call failed"
        return f"cannot reach redis: {text}"
    if isinstance(exc, ResponseError):
        return f"redis refused the command: {text}"
    if isinstance(exc, RedisError):
        return f"{type(exc).__name__}: {text}"
    if isinstance(exc, (ValueError, TypeError)):
        return f"invalid job: {text}"
    return f"{type(exc).__name__}: {text}"
