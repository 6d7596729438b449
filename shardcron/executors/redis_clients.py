"""What the Redis kinds (rq, arq, redis-stream) share: one client per URL, bounded calls, the once-per-slot guard.

Clients. One redis-py client (with its connection pool) per ``(url, socket
timeout)`` in the node's ``Connections``. Connect and socket timeouts are
``min(timeout_s, 5s)``, so a dead or black-holed Redis fails a tick in seconds
and never holds a worker thread for a job's whole timeout. A refused or broken
connection is retried once on a fresh one (a pooled connection may have died
with a Redis restart); a timeout is not retried, so it costs one timeout.
Every write is guarded by the slot's marker (below), so that retry can never
enqueue twice.

Calls. ``call`` runs one Redis action on a shared call thread while the worker
thread waits, in one wait, for it, ``cancel`` and the job's deadline: a
cancelled tick returns at once. The abandoned action ends by itself within
one socket timeout; if it did enqueue, the next attempt finds the marker and
reports a duplicate.

The guard. Neither RQ's job id nor arq's ``_job_id`` deduplicates for long
enough: RQ 2.12's ``unique=True`` and arq's ``enqueue_job`` refuse a job id
only while the job's hash (or arq's result) still exists, i.e. until the job
finished plus ``result_ttl`` (RQ: 500 s by default) or ``keep_result`` (arq:
1 h by default, 0 on some workers). A leader that enqueued a slot and died
before recording it is retried by its successor, possibly after the job ran
and its result expired. ``enqueue_once`` therefore writes a marker
``shardcron:enqueued:<slot uuid>`` in the SAME MULTI/EXEC as the job, WATCHing
the marker and the queue's own keys for the job id; an existing marker or job,
or a concurrent writer, means the slot is already enqueued. The marker lives
``DEDUPE_TTL_MS`` (25 h): longer than the default catch-up window (1 h) plus an
hour, and than arq's 24 h job expiry. A retry of a slot older than that is not
deduplicated at the queue (a job with a catch-up window over 24 h should
consume idempotently, see ``shardcron.consumer``). Redis Streams use the same
marker, set by one Lua script beside the XADD (``redis_stream.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, ConnectionError, RedisError, ResponseError, TimeoutError, WatchError
from redis.retry import Retry

from shardcron.abc import Cancel
from shardcron.executors.base import now_ms, truncate_output, wait_done_or_cancelled
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid
from shardcron.model import ExecutionResult, TickContext
from shardcron.runtime.latch import Latch
from shardcron.spec.headers import mask_url

# The longest a single connect or socket read/write may take, whatever the job's timeout.
MAX_SOCKET_TIMEOUT_S = 5.0

# Marks a slot as enqueued (rq, arq) or added (redis-stream); its value says where to.
ENQUEUED_PREFIX = "shardcron:enqueued:"

# How long a marker lives: above the default catch-up window plus an hour, and above arq's
# 24 h job expiry (``arq.constants.expires_extra_ms``). See the module docstring.
DEDUPE_TTL_MS = 25 * 3600 * 1000

# A WATCH can also break because the connection died mid-transaction (redis-py raises
# WatchError then too), so a broken transaction is looked at again, a few times, before failing.
_GUARD_TRIES = 3

CALL_THREAD_NAME = "shardcron-redis-call"


def socket_timeout_s(timeout_s: float) -> float:
    return max(0.1, min(timeout_s, MAX_SOCKET_TIMEOUT_S))


def marker_key(ctx: TickContext) -> str:
    return ENQUEUED_PREFIX + slot_uuid(ctx)


def call(
    connections: Connections,
    url: str,
    timeout_s: float,
    cancel: Cancel,
    what: str,
    action: Callable[[redis.Redis], str],
) -> ExecutionResult:
    """Run ``action(client)`` on the Redis at ``url``; what it returns is the tick's output.

    Any failure is ``ok=False`` naming ``what`` and the (masked) URL. A duplicate is a success whose output says so.
    """
    started = now_ms()

    def failed(error: str) -> ExecutionResult:
        return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

    where = f"{what} on {mask_url(url)}"
    if cancel.is_set():
        return failed(f"cancelled: {where} not sent (this node lost the shard or is stopping)")
    timeout = socket_timeout_s(timeout_s)
    key = ("redis", url, timeout)
    try:
        client = connections.get(key, lambda: _make_client(url, timeout), close=lambda c: c.close())
    except (ValueError, RedisError) as e:  # an unparsable URL; redis-py raises ValueError for most
        return failed(f"invalid redis URL {mask_url(url)}: {e}")
    except RuntimeError as e:  # the node is stopping
        return failed(f"{where} failed: {e}")

    pending = _Pending()

    def perform() -> None:
        try:
            pending.output = action(client)
        except BaseException as e:  # noqa: BLE001 - every failure is a result, never an exception
            pending.error = e
            if isinstance(e, (ConnectionError, TimeoutError)):
                connections.discard(key, client)  # broken: the next tick gets a fresh client
        finally:
            pending.done.set()

    deadline = time.monotonic() + timeout_s
    try:
        _calls().submit(perform)
    except RuntimeError as e:  # the interpreter is shutting down
        return failed(f"{where} failed: {e}")
    while not pending.done.is_set():
        remaining = deadline - time.monotonic()
        if cancel.is_set():
            return failed(f"cancelled: abandoned {where} (this node lost the shard or is stopping)")
        if remaining <= 0:
            return failed(f"timed out after {timeout_s:g}s waiting for {where}")
        wait_done_or_cancelled(pending.done, cancel, remaining)
    if pending.error is not None:
        return failed(f"{where} failed: {explain(pending.error)}")
    return ExecutionResult(
        ok=True, started_at_ms=started, finished_at_ms=now_ms(), output=truncate_output(pending.output.encode("utf-8"))
    )


# The calls run on a few long-lived threads while the tick's worker waits for them, for its
# deadline and for cancel: a new thread per call cost more CPU than the Redis round trip. A call
# stuck on a silent Redis holds its thread for at most the socket timeout (5 s).
_CALL_THREADS = 64
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _calls() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_CALL_THREADS, thread_name_prefix=CALL_THREAD_NAME)
        return _pool


class _Pending:
    def __init__(self) -> None:
        self.done = Latch()
        self.output = ""
        self.error: BaseException | None = None


def _make_client(url: str, timeout: float) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        # bytes, not str: RQ reads its job hashes with decode_responses=False.
        decode_responses=False,
        retry=Retry(NoBackoff(), 1, supported_errors=(ConnectionError,)),
    )


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


def enqueue_once(
    client: redis.Redis,
    marker: str,
    value: str,
    guard_keys: Sequence[str],
    write: Callable[[Any], None],
    ttl_ms: int = DEDUPE_TTL_MS,
) -> str | None:
    """Queue ``write(pipe)`` and SET ``marker`` to ``value`` in one MULTI/EXEC, unless the slot is already there.

    Returns None when this call wrote it, else what says it was already there:
    ``"as <the marker's value>"`` or ``"(<guard key> exists)"``. ``guard_keys`` are the queue's
    own keys for the job id (RQ's job hash; arq's job and result keys): a job that
    exists without a marker (enqueued by hand, or from before the marker) is a
    duplicate too. A transaction broken by a concurrent writer is looked at again:
    then the marker or the job is there, and that is the answer. (An EXEC that was
    applied but whose reply was lost looks the same: this call then reports the
    slot it wrote itself as a duplicate, which is still exactly one enqueue.)
    """
    watched = (marker, *guard_keys)
    for _ in range(_GUARD_TRIES):
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(*watched)
                # redis-py types one Pipeline for sync and async clients; this one is sync.
                found = cast("bytes | None", pipe.get(marker))
                if found is not None:
                    return f"as {found.decode('utf-8', 'replace')}"
                for key in guard_keys:
                    if pipe.exists(key):
                        return f"({key} exists)"
                pipe.multi()
                write(pipe)
                pipe.set(marker, value, px=ttl_ms)
                pipe.execute()
                return None
            except WatchError:
                continue
    raise WatchError(f"the transaction for {marker} kept breaking ({_GUARD_TRIES} tries)")
