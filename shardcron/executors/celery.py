"""Runs a tick as one Celery task message, sent by name to the job's broker (Redis or RabbitMQ).

What is sent: ``send_task(spec.task, args, kwargs)`` to the job's queue,
routing key and priority, with
- task id ``identity.slot_uuid(ctx)``: the same for every leader and attempt of a slot;
- headers ``identity.tick_fields(ctx)``: the task sees them as ``self.request.headers``,
  where ``shardcron.consumer`` reads them;
- ``expires`` = the slot's time + ``expires_ms``, as an absolute UTC datetime, so a
  slot sent late (a catch-up, a retry) does not get a fresh lease of life.

Celery brokers do not deduplicate by task id: a slot that the next leader
retries after a crash is enqueued twice under one id. Consumers guard with
``shardcron.consumer``.

Sharing and batches: one ``celery_broker.CeleryBroker`` per broker URL, in the
node's ``Connections``. ``run_async`` runs on the node's loop and hands its
task to it: the tasks of a burst go to one publish thread as one batch, sent
through one pooled kombu producer, and each slot gets its own outcome.

Bounded time: ``run_async`` waits at most the job's timeout and no longer than
``cancel`` stays unset. A task its tick gave up on before the publish thread
reached it is dropped unsent; one already on its way may still reach the broker.
"""

from __future__ import annotations

import asyncio
import socket
import time
from datetime import UTC, datetime

from kombu.exceptions import LimitExceeded, OperationalError

from shardcron.abc import Cancel
from shardcron.executors.aio import Cancelled, LoopThread, OnTheLoop
from shardcron.executors.base import now_ms
from shardcron.executors.celery_broker import (
    POOL_LIMIT,
    SOCKET_TIMEOUT_S,
    CeleryBroker,
    Closed,
    TaskSend,
    UnusableBroker,
    reason,
)
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import CelerySpec, ExecutionResult, ExecutorSpec, TickContext
from shardcron.spec.headers import mask_url, scrub_password

CLOSE_TIMEOUT_S = 5.0


class CeleryExecutor(OnTheLoop):
    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        super().__init__(connections, loop, "shardcron-celery")

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        started = now_ms()

        def failed(error: str) -> ExecutionResult:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

        c = spec.celery
        if c is None or not c.url or not c.task:
            return failed("invalid job: a celery executor needs a broker url and a task name")
        if cancel.is_set():
            return failed("cancelled: before the task was sent")
        where = f"celery broker {mask_url(c.url)}"
        try:
            broker = self._connections.get(("celery", c.url), lambda: CeleryBroker(c.url, ctx.node_id), self._close)
        except RuntimeError as e:  # the node is stopping
            return failed(f"{where}: {e}")

        task = task_send(c, ctx, deadline=time.monotonic() + timeout_s)
        deadline = asyncio.timeout(timeout_s)
        try:
            with self._loop.cancelled_by(cancel):
                async with deadline:
                    queue = await broker.send(task)
        except Cancelled:
            return failed(
                f"cancelled: abandoned sending task {c.task} to {where} (this node lost the shard or is stopping)"
            )
        except TimeoutError as e:
            if not deadline.expired():  # a socket's own timeout, in the send
                return failed(f"{where}: could not enqueue task {c.task}: {explain(e)}")
            return failed(f"timed out after {timeout_s:g}s waiting for {where} to accept task {c.task}")
        except Closed as e:
            return failed(f"{where}: {e}")
        except UnusableBroker as e:
            return failed(f"{where}: unusable broker URL: {scrub_password(str(e), c.url)}")
        except Exception as e:  # noqa: BLE001 - every failure is a result, never an exception
            return failed(f"{where}: could not enqueue task {c.task}: {scrub_password(explain(e), c.url)}")
        return ExecutionResult(
            ok=True,
            started_at_ms=started,
            finished_at_ms=now_ms(),
            output=f"enqueued celery task {task.task_id} ({c.task}) to queue {queue}",
        )

    def _close(self, broker: CeleryBroker) -> None:
        broker.close()
        self._loop.finish(broker.stop_sending, CLOSE_TIMEOUT_S)


def task_send(c: CelerySpec, ctx: TickContext, *, deadline: float) -> TaskSend:
    """The slot's ``send_task``: its id and headers from the slot, its routing from the job."""
    options: dict = {}
    if c.queue:
        options["queue"] = c.queue
    if c.routing_key:
        options["routing_key"] = c.routing_key
    if c.priority is not None:
        options["priority"] = c.priority
    if c.expires_ms is not None:
        options["expires"] = datetime.fromtimestamp((ctx.scheduled_at_ms + c.expires_ms) / 1000, UTC)
    return TaskSend(
        task=c.task,
        args=list(c.args),
        kwargs=dict(c.kwargs),
        task_id=slot_uuid(ctx),
        headers=tick_fields(ctx),
        options=options,
        deadline=deadline,
    )


def explain(exc: BaseException) -> str:
    """A one-line reason for a failed send."""
    if isinstance(exc, LimitExceeded):
        return f"all {POOL_LIMIT} connections to the broker stayed busy"
    if isinstance(exc, OperationalError) and exc.__cause__ is not None:
        exc = exc.__cause__  # kombu wraps the transport's own error
    if isinstance(exc, ConnectionRefusedError) or "Connection refused" in str(exc):
        return "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"no answer within {SOCKET_TIMEOUT_S:g}s"
    name = type(exc).__name__
    if name == "MessageNacked":
        return "the broker refused (nacked) the message"
    if name == "AccessRefused":
        return f"access refused: {reason(exc)}"
    if isinstance(exc, (TypeError, ValueError)):
        return f"the task's arguments could not be sent: {type(exc).__name__}: {exc}"
    return f"{name}: {reason(exc)}"
