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

Sharing: one ``_Publisher`` per broker URL, in the node's ``Connections``,
living on the node's asyncio loop (``aio.LoopThread``): one connection and one
confirming channel, opened on first use. aiormq serialises the frames of
concurrent publishes on a channel (its channel lock) and matches each confirm
to its delivery tag, so ticks publish concurrently on one channel. After an
error the dead part is replaced on the next publish: a channel the broker
closed (e.g. no such exchange) is reopened, a lost connection reconnected. A
plain connection checked before each publish, rather than aio-pika's robust
one, because a robust connection reconnects in the background on its own
timer: a tick would wait for it (or time out) instead of failing at once with
the broker's real answer (connection refused, access refused).

Bounded time: the connect has its own timeout (``CONNECT_TIMEOUT_S``), and
``LoopThread.run`` waits at most the job's timeout and no longer than
``cancel`` stays unset; either way the publish is cancelled on the loop.
"""

from __future__ import annotations

import asyncio
import errno
from urllib.parse import unquote, urlsplit

import aio_pika
import aiormq.exceptions

from shardcron.abc import Cancel
from shardcron.executors.aio import Cancelled, LoopThread
from shardcron.executors.base import now_ms
from shardcron.executors.connections import Connections
from shardcron.executors.identity import with_tick_headers
from shardcron.model import AmqpSpec, ExecutionResult, ExecutorSpec, TickContext
from shardcron.spec.headers import mask_url

CONNECT_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 5.0
APP_ID = "shardcron"


def message_headers(spec: AmqpSpec, ctx: TickContext) -> dict[str, aio_pika.abc.FieldValue]:
    """The job's headers, minus any that would shadow shardcron's, plus shardcron's."""
    return dict(with_tick_headers(spec.headers, ctx))


class AmqpExecutor:
    def __init__(self, connections: Connections, loop: LoopThread) -> None:
        self._connections = connections
        self._loop = loop

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
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
            publisher = self._connections.get(("amqp", a.url), lambda: _Publisher(a.url, ctx.node_id), self._close)
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
            self._loop.run(lambda: publisher.publish(a.exchange, a.routing_key, message), timeout_s, cancel)
        except Cancelled:
            return failed(f"cancelled: abandoned publishing to {where} (this node lost the shard or is stopping)")
        except TimeoutError:
            return failed(f"timed out after {timeout_s:g}s waiting for {where} to confirm the message to {route}")
        except _Failed as e:
            return failed(f"{where}: could not publish to {route}: {e}")
        except Exception as e:  # noqa: BLE001 - e.g. a malformed URL or routing key: a result, never a raise
            return failed(f"{where}: could not publish to {route}: {type(e).__name__}: {_reason(e)}")
        return ExecutionResult(
            ok=True,
            started_at_ms=started,
            finished_at_ms=now_ms(),
            output=f"published message {ctx.idempotency_key} to {route} (confirmed by the broker)",
        )

    def _close(self, publisher: _Publisher) -> None:
        self._loop.run(publisher.close, CLOSE_TIMEOUT_S)


class _Failed(Exception):
    """The publish failed; the message is the one-line reason. Kept apart from
    ``TimeoutError`` so that only ``LoopThread.run``'s own deadline reads as the tick's timeout."""


class _ConnectionLost(_Failed):
    """The connection or channel failed under the publish; the next one opens a new one."""


class _Publisher:
    """One broker URL's connection and confirming channel, used only on the node's loop."""

    def __init__(self, url: str, node_id: str) -> None:
        self.url = url
        self.virtual_host = unquote(urlsplit(url).path[1:]) or "/"
        # Shown in RabbitMQ's connection list: which node holds this connection.
        self.connection_name = f"shardcron node {node_id}"
        self._lock = asyncio.Lock()  # one opener at a time (3.10+: binds to the loop on first use)
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._channel: aio_pika.abc.AbstractChannel | None = None

    async def publish(self, exchange_name: str, routing_key: str, message: aio_pika.Message) -> None:
        # A connection an earlier tick opened may have died while idle (a broker
        # restart, an idle timeout in between) before the client noticed: then
        # one fresh connection and one more try, at once. A failure on a
        # connection this publish opened is the broker's answer, reported as is.
        reused = _alive(self._connection)
        try:
            await self._publish_once(exchange_name, routing_key, message)
        except _ConnectionLost:
            if not reused:
                raise
            await self._publish_once(exchange_name, routing_key, message)

    async def _publish_once(self, exchange_name: str, routing_key: str, message: aio_pika.Message) -> None:
        # The connection this attempt used: only that one is dropped after an error,
        # never a newer one a concurrent publish opened meanwhile.
        connection = None
        try:
            connection, channel = await self._open()
            exchange = (
                channel.default_exchange
                if not exchange_name
                else await channel.get_exchange(exchange_name, ensure=False)
            )
            await exchange.publish(message, routing_key, mandatory=True)
        except aiormq.exceptions.PublishError as e:
            delivery = getattr(e.message, "delivery", None)
            code = getattr(delivery, "reply_code", None)
            text = getattr(delivery, "reply_text", None) or "returned"
            raise _Failed(
                f"the broker returned the message as unroutable ({code} {text}): no queue is bound for it"
            ) from None
        except aiormq.exceptions.DeliveryError:
            raise _Failed("the broker refused (nacked) the message") from None
        except aiormq.exceptions.ProbableAuthenticationError as e:
            raise _Failed(f"access refused: {_reason(e)}") from None
        except TimeoutError:  # the connect's own timeout (the tick's deadline cancels instead)
            await self._drop(connection)
            raise _Failed(f"no answer within {CONNECT_TIMEOUT_S:g}s while connecting") from None
        except (ConnectionError, OSError) as e:  # AMQPConnectionError is a ConnectionError
            await self._drop(connection)
            raise _ConnectionLost(_connection_reason(e)) from None
        except aiormq.exceptions.InvalidFrameError as e:
            await self._drop(connection)
            if "Connection.Close" in str(e):  # aiormq words a refused Connection.Open this way
                raise _Failed(
                    f"the broker closed the connection while it opened: is there a virtual host "
                    f"{self.virtual_host!r}, and may this user use it?"
                ) from None
            raise _Failed(_reason(e)) from None
        except aiormq.exceptions.ChannelInvalidStateError:
            # The channel (or its connection) closed under the publish; _open replaces whichever did.
            raise _ConnectionLost("the channel closed during the publish") from None
        except aiormq.exceptions.AMQPError as e:  # a channel error: the channel is closed, reopened next time
            raise _Failed(_reason(e)) from None

    async def _open(self) -> tuple[aio_pika.abc.AbstractConnection, aio_pika.abc.AbstractChannel]:
        async with self._lock:
            connection = self._connection
            if connection is None or not _alive(connection):
                await self._drop(connection)
                connection = self._connection = await aio_pika.connect(
                    self.url,
                    timeout=CONNECT_TIMEOUT_S,
                    client_properties={"connection_name": self.connection_name},
                )
            if self._channel is None or self._channel.is_closed:
                self._channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            return connection, self._channel

    async def _drop(self, connection: aio_pika.abc.AbstractConnection | None) -> None:
        """Forget and close ``connection``, if it is still the current one."""
        if connection is None or connection is not self._connection:
            return
        self._connection = self._channel = None
        if not connection.is_closed:
            try:  # also for one the broker closed: it releases the client's side of it
                await connection.close()
            except Exception:  # noqa: BLE001 - it is being dropped because it is broken
                pass

    async def close(self) -> None:
        await self._drop(self._connection)


def _alive(connection: aio_pika.abc.AbstractConnection | None) -> bool:
    # A plain aio-pika connection that the broker closed clears ``connected``
    # but never reports ``is_closed`` (only a close() of ours does): check both.
    return connection is not None and not connection.is_closed and connection.connected.is_set()


def _connection_reason(exc: BaseException) -> str:
    # aiormq re-raises a socket error as AMQPConnectionError(errno, text).
    code = exc.errno if isinstance(exc, OSError) and exc.errno else (exc.args[0] if exc.args else None)
    if code == errno.ECONNREFUSED:
        return "connection refused"
    text = str(exc) if isinstance(code, int) else _reason(exc)
    return f"connection failed: {' '.join(text.split())}"


def _reason(exc: BaseException) -> str:
    # aiormq's errors keep the broker's own words in args[0]; str() wraps them in a template.
    first = exc.args[0] if exc.args else None
    text = first if isinstance(first, str) else str(exc)
    return " ".join(text.split()) or type(exc).__name__
