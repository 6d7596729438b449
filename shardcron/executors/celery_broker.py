"""Sends the Celery kind's tasks in batches: a burst's send_task calls through one pooled kombu producer.

A ``CeleryBroker`` belongs to one broker URL, in the node's ``Connections``.
``send(task)`` queues one slot's ``TaskSend`` for this loop turn's batch
(``turn_batch``) and returns a future for its own outcome (the queue it went
to). Celery's client (kombu) blocks, so a flush hands the whole batch to one
of the broker's publish threads, which takes one producer from the broker's
``ProducerPool`` and calls ``send_task`` through it for each slot in turn;
the outcomes come back to the loop together and each resolves its own slot.

Per-slot outcomes: a slot's own error (a refused write such as Redis's
WRONGTYPE, a RabbitMQ channel error, a nack) fails that slot, and the next
slot goes on through the same producer (kombu reopens a closed channel). A
broken connection is retried once at once (kombu's ``ensure``, ``_RETRY_POLICY``:
what a pooled connection the broker dropped while idle needs); if that fails
too, the burst's remaining slots fail with the same error unsent, rather than
each trying a dead broker again.

Threads: at most ``POOL_LIMIT`` long-lived daemon threads per broker (one per
pooled connection; more would only wait for a connection), started as the load
needs them, each sending one batch at a time: bursts of different loop turns
go out side by side, never a thread per tick. A batch is sent in turn on one
connection, so it is at most ``MAX_BATCH`` slots; a larger burst is split and
its parts go out on several threads at once.

The pools are the broker's own (a kombu ``ConnectionPool`` and a
``ProducerPool`` over it), not Celery's ``app.pool`` and ``app.producer_pool``:
those are kombu's process-wide pools keyed by the broker's address, so two
brokers for one URL in one process (a test's, a tool's) would share them and
closing one would close the other's. Closing a broker closes exactly the
connections it made.

The Celery app is made on the first batch's thread, not on the loop (the
process's first one takes a while to build): results are disabled
(``result_backend`` ``disabled://``, marked thread-safe), so Celery resolves
its result backend once per app, not once per thread, and ``send_task`` builds
no ``AsyncResult`` (``result_cls``). The message is unchanged: it does not ask
the worker to ignore the task's result, which the worker's own backend may store.

Bounded time, because a dead broker must fail its ticks fast:
- connect and socket timeouts (``CONNECT_TIMEOUT_S``, ``SOCKET_TIMEOUT_S``);
- no connect-retry loop (transport option ``max_retries=0``: kombu's default
  retries a refused connect forever, sleeping seconds between tries);
- on RabbitMQ, publisher confirms waited for at most ``SOCKET_TIMEOUT_S``, so ok
  means the broker has the message (on Redis, LPUSH's reply means the same).
A slot whose tick stopped waiting (cancel, deadline) before its turn on the
thread is dropped unsent; one already sent may have reached the broker: that
is the at-least-once the task id and ``shardcron.consumer`` are there for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from celery import Celery
from kombu.pools import ProducerPool

from shardcron.executors.turn_batch import TurnBatcher, Waiting

T = TypeVar("T")

CONNECT_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 5.0
# Connections per broker URL, and publish threads: one each.
POOL_LIMIT = 10
# A batch is sent in turn on one connection, one round trip per slot: this bounds how many round trips a slot
# waits behind. A larger burst is split, and its parts go out on several threads at once.
MAX_BATCH = 32
# kombu's ensure(): after a connection error, reconnect and publish once more, at once.
_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}
# Thread names make a publish easy to spot in a thread dump.
PUBLISH_THREAD_NAME = "shardcron-celery-publish"


@dataclass
class TaskSend:
    """One slot's ``send_task``: its arguments, and until when its tick waits for it."""

    task: str
    args: list
    kwargs: dict
    task_id: str
    headers: dict[str, str]
    options: dict  # queue, routing_key, priority, expires: only those the job sets
    deadline: float  # time.monotonic()
    abandoned: bool = field(default=False)  # its tick stopped waiting: not sent if not sent yet

    def give_up_if_cancelled(self, future: asyncio.Future) -> None:
        if future.cancelled():
            self.abandoned = True


class NotSent(Exception):
    """The slot's tick stopped waiting before its turn: it was not sent."""


class UnusableBroker(Exception):
    """Celery could not make an app for the URL (e.g. kombu knows no such transport)."""


class Closed(RuntimeError):
    """The broker was closed: the node is stopping."""


class CeleryBroker(TurnBatcher[TaskSend]):
    def __init__(self, url: str, node_id: str) -> None:
        super().__init__(MAX_BATCH)
        self.url = url
        self.node_id = node_id
        self.threads = PublishThreads(POOL_LIMIT, PUBLISH_THREAD_NAME)
        self._lock = threading.Lock()
        self._app: CeleryApp | None = None
        self._closed = False

    def send(self, task: TaskSend) -> asyncio.Future:
        """On the loop: queue ``task``; the future gets the queue it went to, or the error for it alone."""
        future = self.submit(task)
        future.add_done_callback(task.give_up_if_cancelled)
        return future

    async def send_batch(self, batch: list[Waiting[TaskSend]]) -> None:
        tasks = [task for task, _ in batch]
        outcomes = await asyncio.wrap_future(self.threads.submit(lambda: self.send_in_turn(tasks)))
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def send_in_turn(self, tasks: list[TaskSend]) -> list[str | BaseException]:
        """On a publish thread: each task through one producer; its queue, or its error."""
        app = self.app()
        live = [t for t in tasks if not t.abandoned]
        if not live:
            return [NotSent("its tick stopped waiting")] * len(tasks)
        wait_s = max(max(t.deadline for t in live) - time.monotonic(), 0.001)
        outcomes: list[str | BaseException] = []
        broken: BaseException | None = None
        with app.producers.acquire(block=True, timeout=wait_s) as producer:
            for task in tasks:
                if broken is not None:
                    outcomes.append(broken)
                elif task.abandoned or time.monotonic() >= task.deadline:
                    outcomes.append(NotSent("its tick stopped waiting"))
                else:
                    try:
                        outcomes.append(app.send(task, producer))
                    except Exception as e:  # noqa: BLE001 - this slot's failure, unless the connection broke
                        outcomes.append(e)
                        if isinstance(e.__cause__ or e, producer.connection.connection_errors):
                            broken = e
        return outcomes

    def app(self) -> CeleryApp:
        """The broker's Celery app, made on first use (on a publish thread)."""
        with self._lock:
            if self._closed:
                raise Closed("the node is stopping: no new publishes")
            if self._app is None:
                try:
                    self._app = CeleryApp(self.url, self.node_id)
                except Exception as e:  # noqa: BLE001 - e.g. kombu's KeyError('No such transport: http')
                    raise UnusableBroker(reason(e)) from e
            return self._app

    def close(self) -> None:
        """New sends fail, and the pools' connections close (from a thread: a close may wait on its broker).
        A send in flight ends by itself, within its socket timeouts; ``stop_sending`` (on the loop) stops
        its batch from waiting for it."""
        with self._lock:
            self._closed = True
            app = self._app
        self.threads.close()
        if app is not None:
            app.close()


class CeleryApp:
    """One broker URL's Celery app and its own connection and producer pools, shared by its publish threads."""

    def __init__(self, url: str, node_id: str) -> None:
        # set_as_current=False: never become the process's default app; fixups=[]:
        # a node is no Django project, whatever its environment says.
        self.celery = Celery("shardcron", broker=url, set_as_current=False, fixups=[])
        self.celery.conf.update(
            broker_connection_timeout=CONNECT_TIMEOUT_S,
            broker_transport_options=transport_options(url, node_id),
            enable_utc=True,
            timezone="UTC",
            # A sender reads no results. Celery keeps its result backend per thread unless
            # told it is thread-safe (the disabled backend holds no state, so it is), and
            # resolving it scans the installed packages' entry points.
            result_backend="disabled://",
            result_backend_thread_safe=True,
        )
        self.default_queue: str = self.celery.conf.task_default_queue
        self.connections = self.celery.connection_for_write().Pool(limit=POOL_LIMIT)
        self.producers = ProducerPool(self.connections, limit=POOL_LIMIT)
        # Celery builds these lazily, without a lock (celery/celery#4480): build them
        # here, once, before several threads call send_task at the same time.
        amqp = self.celery.amqp
        _ = (amqp.router, amqp.queues, amqp.create_task_message, amqp.send_task_message, self.celery.backend)

    def send(self, task: TaskSend, producer: Any) -> str:
        """``send_task`` through ``producer``; the queue the task went to."""
        self.celery.send_task(
            task.task,
            args=task.args,
            kwargs=task.kwargs,
            task_id=task.task_id,
            headers=task.headers,
            producer=producer,
            add_to_parent=False,
            result_cls=Sent,
            retry=True,
            retry_policy=_RETRY_POLICY,
            # kombu's Producer.publish: the socket wait and the confirm wait.
            timeout=SOCKET_TIMEOUT_S,
            confirm_timeout=SOCKET_TIMEOUT_S,
            **task.options,
        )
        return task.options.get("queue") or self.default_queue

    def close(self) -> None:
        self.producers.force_close_all()
        self.connections.force_close_all()


def transport_options(url: str, node_id: str) -> dict:
    """kombu's transport options for ``url``: one connect attempt, and every wait bounded."""
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


class PublishThreads:
    """At most ``limit`` long-lived daemon threads named ``name``, started as the load needs them; each
    runs one piece of work at a time. A thread dies with its process, so a send stuck on a silent broker
    never holds up the node's exit."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        self.name = name
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads that are waiting for work, or about to, and that no submit has claimed
        self._backlog = 0  # work queued with no thread claimed for it (all ``limit`` were busy)
        self._closed = False

    def submit(self, work: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Hands ``work`` to an idle thread, or a new one (up to ``limit``), or queues it."""
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise Closed("the node is stopping: no new publishes")
            if self._idle > 0:
                self._idle -= 1  # claimed: the next submit does not count on this thread too
            elif self._threads < self.limit and self._start_thread():
                self._threads += 1
            else:  # a busy thread takes it when done
                self._backlog += 1
            self._work.put((work, done))
        return done

    def close(self) -> None:
        with self._lock:
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)  # work queued before this still goes first

    def _start_thread(self) -> bool:
        try:
            threading.Thread(target=self._serve, name=self.name, daemon=True).start()
        except RuntimeError:  # out of threads: the running ones take it, if there are any
            if self._threads == 0:
                raise
            return False
        return True

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:  # closed
                return
            work, done = item
            outcome: Any = None
            error: BaseException | None = None
            if done.set_running_or_notify_cancel():  # not cancelled by its waiter meanwhile
                try:
                    outcome = work()
                except BaseException as e:  # noqa: BLE001 - handed to the waiter; a thread is not lost to it
                    error = e
            with self._lock:  # before ``done``: a caller's next submit finds this thread idle
                if self._backlog > 0:
                    self._backlog -= 1  # this thread takes queued work next
                else:
                    self._idle += 1
            if done.running():
                if error is None:
                    done.set_result(outcome)
                else:
                    done.set_exception(error)


class Sent:
    """What ``send_task`` returns here instead of an ``AsyncResult``, which would fetch the app's backend."""

    __slots__ = ("id", "ignored")

    def __init__(self, task_id: str) -> None:
        self.id = task_id


def reason(exc: BaseException) -> str:
    """An error's own words, on one line."""
    first = exc.args[0] if len(exc.args) == 1 else None
    text = first if isinstance(first, str) else str(exc)  # str(KeyError) would add quotes
    return " ".join(text.split()) or type(exc).__name__
