"""Runs a tick as one AMQP 0-9-1 message published to RabbitMQ (or any 0-9-1 broker), with aio-pika.

What is published: ``spec.body`` to ``spec.exchange`` ("" is the default
exchange, where the routing key names the queue) with ``spec.routing_key``,
persistent unless the job says otherwise, with
- headers: the job's headers plus ``identity.tick_headers(ctx)``; a job's own
  ``X-Shardcron-*`` or ``Idempotency-Key`` header is dropped, so a job cannot forge them;
- ``message_id`` = the slot's idempotency key, ``app_id`` = "shardcron".
AMQP does not deduplicate by message id: a slot that the next leader retries
after a crash is delivered twice. Consumers guard with ``shardcron.consumer``.

When is a tick ok: only once the broker confirmed the message (publisher
confirms) and routed it to at least one queue. The publish is ``mandatory``
and the channel raises on a return, so an unroutable message (no such queue,
no binding) is a failed tick, not a message silently dropped.

Sharing and batches: one ``amqp_publisher.AmqpPublisher`` per broker URL, in
the node's ``Connections``, on the node's loop. ``run_async`` runs on the loop
itself and hands its message to it: the messages of a burst go out as one
batch, their confirms awaited together, and each slot gets its own outcome
(an unroutable message or a missing exchange fails its slots only).

Bounded time: ``run_async`` waits at most the job's timeout and no longer than
``cancel`` stays unset; either way its message is left to the batch, which
may still publish it (the ``message_id`` lets a consumer admit one copy).
"""

from __future__ import annotations

import asyncio

import aio_pika

from shardcron.abc import Cancel
from shardcron.executors.aio import Cancelled, LoopThread, OnTheLoop
from shardcron.executors.amqp_publisher import AmqpPublisher, Outgoing, PublishFailed, reason
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import with_tick_headers
from shardcron.model import AmqpSpec, ExecutionResult, ExecutorSpec, TickContext
from shardcron.spec.headers import mask_url

CLOSE_TIMEOUT_S = 5.0
APP_ID = "shardcron"


def message_headers(spec: AmqpSpec, ctx: TickContext) -> dict[str, aio_pika.abc.FieldValue]:
    """The job's headers, minus any that would shadow shardcron's, plus shardcron's."""
    return dict(with_tick_headers(spec.headers, ctx))


class AmqpExecutor(OnTheLoop):
    def __init__(self, connections: Connections, loop: LoopThread | None = None) -> None:
        super().__init__(connections, loop, "shardcron-amqp")

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        started = now_ms()

        def failed(error: str) -> ExecutionResult:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

        a = spec.amqp
        if a is None or not a.url:
            return failed("invalid job: an amqp executor needs a broker url")
        if cancel.is_set():
            return failed("cancelled: before the message was published")
        where = f"amqp broker {mask_url(a.url)}"
        route = f"exchange {a.exchange!r} with routing key {a.routing_key!r}"
        try:
            publisher = self._connections.get(("amqp", a.url), lambda: AmqpPublisher(a.url, ctx.node_id), self._close)
        except Exception as e:  # noqa: BLE001 - a stopping node is this tick's failure
            return failed(f"{where}: {e}")

        message = aio_pika.Message(
            a.body.encode("utf-8"),
            headers=message_headers(a, ctx),
            content_type=a.content_type or None,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT if a.persistent else aio_pika.DeliveryMode.NOT_PERSISTENT,
            message_id=ctx.idempotency_key,
            app_id=APP_ID,
        )
        try:
            with self._loop.cancelled_by(cancel):
                async with asyncio.timeout(timeout_s):
                    await publisher.publish(Outgoing(a.exchange, a.routing_key, message, timeout_s))
        except Cancelled:
            return failed(f"cancelled: abandoned publishing to {where} (this node lost the shard or is stopping)")
        except TimeoutError:
            return failed(f"timed out after {timeout_s:g}s waiting for {where} to confirm the message to {route}")
        except PublishFailed as e:
            return failed(f"{where}: could not publish to {route}: {e}")
        except Exception as e:  # noqa: BLE001 - e.g. a malformed URL: a result, never a raise
            return failed(f"{where}: could not publish to {route}: {type(e).__name__}: {reason(e)}")
        return ExecutionResult(
            ok=True,
            started_at_ms=started,
            finished_at_ms=now_ms(),
            output=f"published message {ctx.idempotency_key} to {route} (confirmed by the broker)",
        )

    def _close(self, publisher: AmqpPublisher) -> None:
        self._loop.finish(publisher.aclose, CLOSE_TIMEOUT_S)
