"""The batched Redis kinds' one call, on the node's loop: a slot's guarded command through its URL's batcher.

``call_async`` gets the ``redis_batch.RedisBatcher`` for ``(url, socket
timeout)`` from the node's ``Connections`` (one redis.asyncio client each,
with the timeouts and the one retry of ``redis_clients``), sends the slot's
command and waits for its reply, at most ``timeout_s`` and no longer than
``cancel`` stays unset. Any failure is ``ok=False`` naming ``what`` and the
masked URL (``redis_clients.explain``). A tick given up (cancel,
timeout) leaves its command to the batch, which may still run it: its
slot's marker makes a later attempt a duplicate.

"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError, RedisError

from shardcron.abc import Cancel
from shardcron.executors.aio import Cancelled, LoopThread
from shardcron.executors.base import now_ms, truncate_output
from shardcron.executors.connections import Connections
from shardcron.executors.redis_batch import RedisBatcher
from shardcron.executors.redis_clients import explain, socket_timeout_s
from shardcron.model import ExecutionResult
from shardcron.spec.headers import mask_url

_CLOSE_TIMEOUT_S = 5.0


async def call_async(
    connections: Connections,
    loop: LoopThread,
    url: str,
    timeout_s: float,
    cancel: Cancel,
    what: str,
    command: tuple[Any, ...],
    output: Callable[[Any], str],
) -> ExecutionResult:
    """Send ``command`` through the batcher for ``url``; ``output(reply)`` is the tick's output."""
    started = now_ms()

    def failed(error: str) -> ExecutionResult:
        return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

    where = f"{what} on {mask_url(url)}"
    if cancel.is_set():
        return failed(f"cancelled: {where} not sent (this node lost the shard or is stopping)")
    timeout = socket_timeout_s(timeout_s)
    try:
        batcher = connections.get(
            batcher_key(url, timeout_s), lambda: _make_batcher(url, timeout), close=lambda b: _close(loop, b)
        )
    except (ValueError, RedisError) as e:  # an unparsable URL; redis-py raises ValueError for most
        return failed(f"invalid redis URL {mask_url(url)}: {e}")
    except RuntimeError as e:  # the node is stopping
        return failed(f"{where} failed: {e}")
    try:
        with loop.cancelled_by(cancel):
            async with asyncio.timeout(timeout_s):
                reply = await batcher.send(*command)
    except Cancelled:
        return failed(f"cancelled: abandoned {where} (this node lost the shard or is stopping)")
    except TimeoutError:  # the job's deadline (redis-py's socket timeout is a RedisError)
        return failed(f"timed out after {timeout_s:g}s waiting for {where}")
    except Exception as e:  # noqa: BLE001 - every failure is a result, never an exception
        return failed(f"{where} failed: {explain(e)}")
    return ExecutionResult(
        ok=True, started_at_ms=started, finished_at_ms=now_ms(), output=truncate_output(output(reply).encode("utf-8"))
    )


def batcher_key(url: str, timeout_s: float) -> tuple[str, str, float]:
    """The batcher's key in ``Connections``: one per URL and socket timeout."""
    return ("redis-batch", url, socket_timeout_s(timeout_s))


def _make_batcher(url: str, timeout: float) -> RedisBatcher:
    client = Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        decode_responses=False,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[ConnectionError],
    )
    return RedisBatcher(client)


def _close(loop: LoopThread, batcher: RedisBatcher) -> None:
    loop.finish(batcher.aclose, _CLOSE_TIMEOUT_S)
