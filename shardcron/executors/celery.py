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

Sharing: one ``_Broker`` per URL (a Celery app and its own kombu connection
pool), made on first use and kept in the node's ``Connections``. Each publish
takes one connection from the pool for itself, because kombu connections and
channels are not thread-safe; the pool is the app's own, not kombu's
process-wide one, so closing it closes exactly the connections it made. A
publish that fails closes its connection (kombu's ``PooledConnection`` does so
on an exception), so the next tick reconnects instead of reusing a broken one.

Bounded time, because a dead broker must fail its ticks fast:
- connect and socket timeouts (``CONNECT_TIMEOUT_S``, ``SOCKET_TIMEOUT_S``);
- no connect-retry loop (transport option ``max_retries=0``: kombu's default
  retries a refused connect forever, sleeping seconds between tries);
- one immediate reconnect and republish after a connection error, which is
  what a pooled connection the broker dropped while idle needs, and no more
  (``_RETRY_POLICY``; kombu also copies it into the connection's options, so
  a refused broker is tried at most twice, back to back);
- on RabbitMQ, publisher confirms waited for at most ``SOCKET_TIMEOUT_S``, so ok
  means the broker has the message (on Redis, LPUSH's reply means the same).
The publish runs on one of the broker's publish threads while the calling
thread waits, in one wait, for it, for ``cancel`` and for the deadline.
On cancel or timeout the caller returns at once; the abandoned publish ends by
itself within the socket timeouts and gives its connection back (closed, if it
failed). It may still have reached the broker: that is the at-least-once the
task id and ``shardcron.consumer`` are there for. A publish its caller gave up
on before a publish thread took it up is dropped unsent.

Cheap per publish, because a publish is mostly a Redis or RabbitMQ round trip:
- publish threads are long-lived daemon threads, at most ``POOL_LIMIT`` per
  broker (one per pooled connection; more would only wait for a connection),
  started as the load needs them, not a thread per publish;
- results are disabled (``result_backend`` ``disabled://``, marked thread-safe),
  so Celery resolves its result backend once per app, not once per thread
  (which scans the installed packages' entry points on every new thread);
- ``send_task`` builds no ``AsyncResult`` (``result_cls``): nothing reads it.
  The message is unchanged: it does not ask the worker to ignore the task's
  result, which the worker's own result backend may store.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

from celery import Celery
from kombu.exceptions import LimitExceeded, OperationalError

from shardcron.abc import Cancel
from shardcron.executors.base import now_ms, wait_done_or_cancelled
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import CelerySpec, ExecutionResult, ExecutorSpec, TickContext
from shardcron.runtime.latch import Latch
from shardcron.spec.headers import mask_url, scrub_password

CONNECT_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 5.0
# Connections per broker URL; a publish waits (within its deadline) for a free one.
POOL_LIMIT = 10
# kombu's ensure(): after a connection error, reconnect and publish once more, at once.
_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}
# Thread names make an abandoned publish easy to spot in a thread dump.
PUBLISH_THREAD_NAME = "shardcron-celery-publish"


class CeleryExecutor:
    def __init__(self, connections: Connections, loop=None) -> None:
        self._connections = connections  # ``loop`` is unused: Celery's client is synchronous

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        started = now_ms()

        def failed(error: str) -> ExecutionResult:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

        c = spec.celery
        if c is None or not c.url or not c.task:
            return failed("invalid job: a celery executor needs a broker url and a task name")
        if cancel.is_set():
            return failed("cancelled: before the task was sent")
        where = f"celery broker {mask_url(c.url)}"
        deadline = time.monotonic() + timeout_s
        try:
            broker = self._connections.get(("celery", c.url), lambda: _Broker(c.url, ctx.node_id), _Broker.close)
        except RuntimeError as e:  # the node is stopping
            return failed(f"{where}: {e}")
        except Exception as e:  # noqa: BLE001 - e.g. kombu's KeyError('No such transport: http')
            return failed(f"{where}: unusable broker URL: {scrub_password(_reason(e), c.url)}")

        publish = _Publish(broker, c, ctx, deadline)
        try:
            broker.submit(publish)
        except _Closed as e:
            return failed(f"{where}: {e}")
        except RuntimeError as e:  # out of threads
            return failed(f"could not start the publish thread: {e}")
        while not publish.done.is_set():
            remaining = deadline - time.monotonic()
            if cancel.is_set():
                publish.abandoned = True
                return failed(
                    f"cancelled: abandoned sending task {c.task} to {where} (this node lost the shard or is stopping)"
                )
            if remaining <= 0:
                publish.abandoned = True
                return failed(f"timed out after {timeout_s:g}s waiting for {where} to accept task {c.task}")
            wait_done_or_cancelled(publish.done, cancel, remaining)

        if publish.error is not None:
            return failed(f"{where}: could not enqueue task {c.task}: {scrub_password(_explain(publish.error), c.url)}")
        return ExecutionResult(
            ok=True,
            started_at_ms=started,
            finished_at_ms=now_ms(),
            output=f"enqueued celery task {publish.task_id} ({c.task}) to queue {publish.queue}",
        )


class _Broker:
    """One broker URL's Celery app, connection pool and publish threads."""

    def __init__(self, url: str, node_id: str) -> None:
        # set_as_current=False: never become the process's default app; fixups=[]:
        # a node is no Django project, whatever its environment says.
        self.app = Celery("shardcron", broker=url, set_as_current=False, fixups=[])
        self.app.conf.update(
            broker_connection_timeout=CONNECT_TIMEOUT_S,
            broker_transport_options=_transport_options(url, node_id),
            enable_utc=True,
            timezone="UTC",
            # A sender reads no results. Celery keeps its result backend per thread unless
            # told it is thread-safe (the disabled backend holds no state, so it is), and
            # resolving it scans the installed packages' entry points.
            result_backend="disabled://",
            result_backend_thread_safe=True,
        )
        self.default_queue = self.app.conf.task_default_queue
        self.pool = self.app.connection_for_write().Pool(limit=POOL_LIMIT)
        # Celery builds these lazily, without a lock (celery/celery#4480): build them
        # here, once, before many threads call send_task at the same time
        # (Connections runs this once per URL).
        amqp = self.app.amqp
        _ = (amqp.router, amqp.queues, amqp.create_task_message, amqp.send_task_message, self.app.backend)
        self._work: queue.SimpleQueue[_Publish | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads that are waiting for work, or about to, and that no publish has claimed
        self._backlog = 0  # publishes queued with no thread claimed for them (all POOL_LIMIT were busy)
        self._closed = False

    def submit(self, publish: _Publish) -> None:
        """Hands ``publish`` to an idle publish thread, or a new one (up to ``POOL_LIMIT``), or queues it."""
        with self._lock:
            if self._closed:
                raise _Closed("the node is stopping: no new publishes")
            if self._idle > 0:
                self._idle -= 1  # claimed: the next submit does not count on this thread too
            elif self._threads < POOL_LIMIT and self._start_thread():
                self._threads += 1
            else:  # a busy thread takes it when done
                self._backlog += 1
            self._work.put(publish)

    def _start_thread(self) -> bool:
        try:
            threading.Thread(target=self._serve, name=PUBLISH_THREAD_NAME, daemon=True).start()
        except RuntimeError:  # out of threads: the running ones take it, if there are any
            if self._threads == 0:
                raise
            return False
        return True

    def _serve(self) -> None:
        while True:
            publish = self._work.get()
            if publish is None:  # closed
                return
            try:
                publish.send()  # turns every failure into publish.error
            except Exception as e:  # noqa: BLE001 - a bug there must not cost the broker a publish thread
                publish.error = e
            with self._lock:  # before ``done``: a caller's next publish finds this thread idle
                if self._backlog > 0:
                    self._backlog -= 1  # this thread takes a queued publish next
                else:
                    self._idle += 1
            publish.done.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)  # a publish queued before this still goes first, and fails on the closed pool
        self.pool.force_close_all()


def _transport_options(url: str, node_id: str) -> dict:
    scheme = urlsplit(url).scheme.lower()
    options: dict = {"max_retries": 0}  # kombu: one connect attempt, no retry loop
    if scheme in ("redis", "rediss", "sentinel"):
        options.update(socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S)
    elif scheme in ("amqp", "amqps", "pyamqp"):
        options.update(
            confirm_publish=True,  # ok means the broker has the message
            read_timeout=SOCKET_TIMEOUT_S,
            write_timeout=SOCKET_TIMEOUT_S,
            # Shown in RabbitMQ's connection list: which node holds this connection.
            client_properties={"connection_name": f"shardcron node {node_id} (celery)"},
        )
    return options


class _Publish:
    """One send_task, run on a publish thread; the outcome is read once that thread sets ``done``."""

    def __init__(self, broker: _Broker, c: CelerySpec, ctx: TickContext, deadline: float) -> None:
        self.broker, self.c, self.ctx, self.deadline = broker, c, ctx, deadline
        self.task_id = slot_uuid(ctx)
        self.queue = c.queue or broker.default_queue
        self.error: BaseException | None = None
        self.done = Latch()
        self.abandoned = False  # set by the caller when it stops waiting (cancel or deadline)

    def send(self) -> None:
        if self.abandoned or time.monotonic() >= self.deadline:
            return  # nobody waits for it any more: not sent
        c = self.c
        try:
            options: dict = {}
            if c.queue:
                options["queue"] = c.queue
            if c.routing_key:
                options["routing_key"] = c.routing_key
            if c.priority is not None:
                options["priority"] = c.priority
            if c.expires_ms is not None:
                options["expires"] = datetime.fromtimestamp((self.ctx.scheduled_at_ms + c.expires_ms) / 1000, UTC)
            wait_s = max(self.deadline - time.monotonic(), 0.001)
            with self.broker.pool.acquire(block=True, timeout=wait_s) as connection:
                self.broker.app.send_task(
                    c.task,
                    args=list(c.args),
                    kwargs=dict(c.kwargs),
                    task_id=self.task_id,
                    headers=tick_fields(self.ctx),
                    connection=connection,
                    add_to_parent=False,
                    result_cls=_Sent,
                    retry=True,
                    retry_policy=_RETRY_POLICY,
                    # kombu's Producer.publish: the socket wait and the confirm wait.
                    timeout=SOCKET_TIMEOUT_S,
                    confirm_timeout=SOCKET_TIMEOUT_S,
                    **options,
                )
        except Exception as e:  # every failure is a result, never an exception
            self.error = e


class _Closed(RuntimeError):
    """The broker was closed: the node is stopping."""


class _Sent:
    """What ``send_task`` returns here instead of an ``AsyncResult``, which would fetch the app's backend."""

    __slots__ = ("id", "ignored")

    def __init__(self, task_id: str) -> None:
        self.id = task_id


def _explain(exc: BaseException) -> str:
    """A one-line reason for a failed publish."""
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
        return f"access refused: {_reason(exc)}"
    if isinstance(exc, (TypeError, ValueError)):
        return f"the task's arguments could not be sent: {type(exc).__name__}: {exc}"
    return f"{name}: {_reason(exc)}"


def _reason(exc: BaseException) -> str:
    first = exc.args[0] if len(exc.args) == 1 else None
    text = first if isinstance(first, str) else str(exc)  # str(KeyError) would add quotes
    return " ".join(text.split()) or type(exc).__name__
