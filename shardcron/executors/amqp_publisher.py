"""Publishes the AMQP kind's messages in batches: a burst's messages written together, their confirms awaited together.

An ``AmqpPublisher`` belongs to one broker URL, in the node's ``Connections``,
and lives on the node's loop. ``publish(outgoing)`` queues one slot's message
for this loop turn's batch (``turn_batch``) and returns a future for its own
outcome. A flush opens (or reuses) one connection, and on it one confirming
channel per exchange; on each channel it publishes every message of the batch
for that exchange at once (aiormq writes them in turn under its channel lock
and matches each confirm to its delivery tag), so their confirms are awaited
together, each resolving its own slot.

Per-slot outcomes:
- the broker returns an unroutable message (``mandatory``, and the channel
  raises on a return) or nacks one: that slot fails, the channel goes on;
- a channel error (no such exchange, access refused to it) closes its channel,
  which carries that exchange's slots only: the others' channels go on. The
  next batch for that exchange opens a new channel;
- a refused or lost connection fails the whole batch. A connection an earlier
  batch opened may have died while idle (a broker restart) before the client
  noticed: then the slots it lost are published once more, at once, on a fresh
  connection. A message sent on the dead one may still have reached a queue:
  AMQP is at-least-once, and the slot's ``message_id`` lets ``shardcron.consumer``
  admit one copy.

A plain connection checked before each batch, rather than aio-pika's robust
one, because a robust connection reconnects in the background on its own
timer: a tick would wait for it (or time out) instead of failing at once with
the broker's real answer (connection refused, access refused). Channels are
kept while in use, at most ``MAX_CHANNELS`` per connection: beyond that the
least recently used idle ones are closed.

Bounded time: the connect has its own timeout (``CONNECT_TIMEOUT_S``) and each
message's confirm is awaited at most its tick's timeout; the tick itself
stops waiting at its deadline or its cancel and leaves its message to the
batch.
"""

from __future__ import annotations

import asyncio
import errno
from collections import Counter, OrderedDict
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import aio_pika
import aiormq.exceptions

from shardcron.executors.turn_batch import TurnBatcher, Waiting

CONNECT_TIMEOUT_S = 5.0
# A burst larger than this goes out in several batches: each waits for its confirms in memory.
MAX_BATCH = 512
# Confirming channels kept per connection, one per exchange in use; far below RabbitMQ's channel_max (2047).
MAX_CHANNELS = 64


@dataclass(frozen=True)
class Outgoing:
    """One slot's message: where it goes, and how long its tick waits for the confirm."""

    exchange: str
    routing_key: str
    message: aio_pika.Message
    timeout_s: float


class PublishFailed(Exception):
    """The message was not published; the text is the one-line reason. Kept apart from ``TimeoutError``
    so that only the tick's own deadline reads as the tick's timeout."""


class ChannelLost(PublishFailed):
    """The channel (or its connection) closed under the publish; the next batch opens a new one."""


class ConnectionLost(ChannelLost):
    """The connection failed under the publish; the next batch connects afresh."""


class AmqpPublisher(TurnBatcher[Outgoing]):
    def __init__(self, url: str, node_id: str) -> None:
        super().__init__(MAX_BATCH)
        self.url = url
        self.virtual_host = unquote(urlsplit(url).path[1:]) or "/"
        # Shown in RabbitMQ's connection list: which node holds this connection.
        self.connection_name = f"shardcron node {node_id}"
        self._lock = asyncio.Lock()  # one opener at a time (3.10+: binds to the loop on first use)
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._channels: OrderedDict[str, aio_pika.abc.AbstractChannel] = OrderedDict()  # by exchange, LRU first
        self._publishing: Counter[str] = Counter()  # exchanges with messages in flight: their channels stay open
        self._closed = False

    def publish(self, outgoing: Outgoing) -> asyncio.Future:
        """On the loop: queue ``outgoing``; the future is done once the broker confirmed it, or fails alone."""
        return self.submit(outgoing)

    async def aclose(self) -> None:
        """Close the connection: a batch in flight fails at once, and none connects again."""
        self._closed = True
        await self._drop(self._connection)
        await self.wait_sent()

    async def send_batch(self, batch: list[Waiting[Outgoing]]) -> None:
        reused = _alive(self._connection)
        lost = await self._publish(batch, keep_lost=reused)
        if lost:
            await self._publish(lost, keep_lost=False)

    async def _publish(self, batch: list[Waiting[Outgoing]], *, keep_lost: bool) -> list[Waiting[Outgoing]]:
        """Publish ``batch`` and resolve its futures; with ``keep_lost``, the slots a lost channel or
        connection failed are returned unresolved instead, for one more try."""
        connection = await self._open()
        by_exchange: dict[str, list[Waiting[Outgoing]]] = {}
        for waiting in batch:
            by_exchange.setdefault(waiting[0].exchange, []).append(waiting)
        groups = await asyncio.gather(
            *(self._publish_to(connection, exchange, group) for exchange, group in by_exchange.items())
        )
        lost: list[Waiting[Outgoing]] = []
        for group, outcomes in zip(by_exchange.values(), groups, strict=True):
            for waiting, outcome in zip(group, outcomes, strict=True):
                future = waiting[1]
                if isinstance(outcome, ConnectionLost):
                    await self._drop(connection)
                if future.done():  # its tick stopped waiting: nothing to tell, nothing to try again
                    continue
                if isinstance(outcome, ChannelLost) and keep_lost:
                    lost.append(waiting)
                elif outcome is None:
                    future.set_result(None)
                else:
                    future.set_exception(outcome)
        return lost

    async def _publish_to(
        self, connection: aio_pika.abc.AbstractConnection, exchange: str, group: list[Waiting[Outgoing]]
    ) -> list[PublishFailed | None]:
        """One exchange's messages on its channel, all handed to aiormq at once (it writes them in turn), their
        confirms awaited together."""
        self._publishing[exchange] += 1
        try:
            try:
                channel = await self._channel(connection, exchange)
                underlay = await channel.get_underlay_channel()
            except Exception as e:  # noqa: BLE001 - the channel would not open: its slots fail, the others go on
                return [_failure(e)] * len(group)
            replies = await asyncio.gather(
                *(
                    underlay.basic_publish(
                        o.message.body,
                        exchange=exchange,
                        routing_key=o.routing_key,
                        properties=o.message.properties,
                        mandatory=True,
                        timeout=o.timeout_s,
                    )
                    for o, _ in group
                ),
                return_exceptions=True,
            )
        finally:
            self._publishing[exchange] -= 1
            if not self._publishing[exchange]:
                del self._publishing[exchange]
        return [_failure(r) if isinstance(r, BaseException) else None for r in replies]

    async def _open(self) -> aio_pika.abc.AbstractConnection:
        async with self._lock:
            if self._closed:
                raise PublishFailed("the node is stopping: no new connections")
            connection = self._connection
            if connection is not None and _alive(connection):
                return connection
            await self._drop(connection)
            try:
                connection = await aio_pika.connect(
                    self.url,
                    timeout=CONNECT_TIMEOUT_S,
                    client_properties={"connection_name": self.connection_name},
                )
            except TimeoutError:  # the connect's own timeout (the tick's deadline cancels instead)
                raise PublishFailed(f"no answer within {CONNECT_TIMEOUT_S:g}s while connecting") from None
            except aiormq.exceptions.InvalidFrameError as e:
                if "Connection.Close" in str(e):  # aiormq words a refused Connection.Open this way
                    raise PublishFailed(
                        f"the broker closed the connection while it opened: is there a virtual host "
                        f"{self.virtual_host!r}, and may this user use it?"
                    ) from None
                raise PublishFailed(reason(e)) from None
            except Exception as e:  # noqa: BLE001 - refused, access refused, a bad URL: the batch hears why
                raise _failure(e) from None
            self._connection = connection
            return connection

    async def _channel(
        self, connection: aio_pika.abc.AbstractConnection, exchange: str
    ) -> aio_pika.abc.AbstractChannel:
        async with self._lock:
            if connection is not self._connection:  # dropped by another batch meanwhile
                raise ChannelLost("the connection closed during the publish")
            channel = self._channels.get(exchange)
            if channel is None or channel.is_closed:
                channel = self._channels[exchange] = await connection.channel(
                    publisher_confirms=True, on_return_raises=True
                )
            self._channels.move_to_end(exchange)
            idle = [name for name in self._channels if name not in self._publishing]
            surplus = [self._channels.pop(name) for name in idle[: max(len(self._channels) - MAX_CHANNELS, 0)]]
        for old in surplus:
            await _close_quietly(old)
        return channel

    async def _drop(self, connection: aio_pika.abc.AbstractConnection | None) -> None:
        """Forget and close ``connection`` and its channels, if it is still the current one."""
        if connection is None or connection is not self._connection:
            return
        self._connection = None
        self._channels.clear()
        if not connection.is_closed:
            await _close_quietly(connection)  # also one the broker closed: it releases the client's side of it


def _failure(exc: BaseException) -> PublishFailed:
    """What a failed publish (or connect) tells its slot, in one line."""
    if isinstance(exc, PublishFailed):
        return exc
    if isinstance(exc, aiormq.exceptions.PublishError):
        delivery = getattr(exc.message, "delivery", None)
        code = getattr(delivery, "reply_code", None)
        text = getattr(delivery, "reply_text", None) or "returned"
        return PublishFailed(f"the broker returned the message as unroutable ({code} {text}): no queue is bound for it")
    if isinstance(exc, aiormq.exceptions.DeliveryError):
        return PublishFailed("the broker refused (nacked) the message")
    if isinstance(exc, aiormq.exceptions.ProbableAuthenticationError):
        return PublishFailed(f"access refused: {reason(exc)}")
    if isinstance(exc, (ConnectionError, OSError)):  # AMQPConnectionError is a ConnectionError
        return ConnectionLost(connection_reason(exc))
    if isinstance(exc, aiormq.exceptions.ChannelInvalidStateError):
        # The channel (or its connection) closed under the publish; the next batch replaces whichever did.
        return ChannelLost("the channel closed during the publish")
    if isinstance(exc, aiormq.exceptions.AMQPError):  # a channel error: that channel is closed, reopened next time
        return PublishFailed(reason(exc))
    if isinstance(exc, TimeoutError):  # its tick has stopped waiting by now
        return PublishFailed("no confirm within the tick's timeout")
    return PublishFailed(f"{type(exc).__name__}: {reason(exc)}")  # e.g. a routing key too long for AMQP


async def _close_quietly(closable: aio_pika.abc.AbstractConnection | aio_pika.abc.AbstractChannel) -> None:
    try:
        await closable.close()
    except Exception:  # noqa: BLE001 - it is being dropped because it is broken or unused
        pass


def _alive(connection: aio_pika.abc.AbstractConnection | None) -> bool:
    # A plain aio-pika connection that the broker closed clears ``connected``
    # but never reports ``is_closed`` (only a close() of ours does): check both.
    return connection is not None and not connection.is_closed and connection.connected.is_set()


def connection_reason(exc: BaseException) -> str:
    """A refused or broken connection, in one line. aiormq re-raises a socket error as AMQPConnectionError(errno, text)."""
    code = exc.errno if isinstance(exc, OSError) and exc.errno else (exc.args[0] if exc.args else None)
    if code == errno.ECONNREFUSED:
        return "connection refused"
    text = str(exc) if isinstance(code, int) else reason(exc)
    return f"connection failed: {' '.join(text.split())}"


def reason(exc: BaseException) -> str:
    """aiormq's errors keep the broker's own words in args[0]; str() wraps them in a template."""
    first = exc.args[0] if exc.args else None
    text = first if isinstance(first, str) else str(exc)
    return " ".join(text.split()) or type(exc).__name__
