"""The executors' way onto the node's event loop: every tick's coroutine and the asyncio clients.

Every tick with a side effect runs as a coroutine on the node's one loop
(``runtime.node_loop``, shared with the API and the dashboard;
``leader.runner.run_tick``); the HTTP executor and the asyncio broker clients
(nats-py, aio-pika, arq) live on it, shared by every tick of the node. A
``LoopThread`` made without the node's loop (a test, a tool) starts a loop of
its own on first use and closes it in ``close()``; the node's loop is the
node's to close.

An executor whose work is a coroutine on the loop (``OnTheLoop``: the broker
kinds) has ``run_async``; its ``run`` is the same from a thread (tests, tools).

Two ways in:
- from a thread, ``LoopThread.run(make_coro, timeout_s, cancel)`` runs one
  coroutine on the loop and waits for it, at most ``timeout_s`` and no longer
  than ``cancel`` stays unset: a callback on ``cancel`` cancels the future,
  which wakes the one wait;
- on the loop, ``with loop_thread.cancelled_by(cancel):`` cancels the
  coroutine inside it once ``cancel`` is set (the shard lost, the lease lost,
  the node stopping) and turns that into ``Cancelled``.

``cancel`` is an ``abc.Cancel``: an event that calls back when it is set
(``leader.shard_cancel.StopOrLeaseLost`` for a tick, set at the lease's own
deadline by the session). Its callback runs on the thread that sets it and
hands the cancellation to the loop with ``call_soon_threadsafe``; nothing here
looks at ``cancel`` on a timer. One callback per distinct ``cancel`` with a
scope open (the ticks of one shard share one), taken back when its last
scope closes, so a leadership collects no callbacks tick after tick.
``is_set()`` is still asked on entry: a start right after a pause, when the
lease's deadline has passed before its session has said so, is refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from shardcron.abc import Cancel
from shardcron.executors.connections import Connections
from shardcron.model import ExecutionResult, ExecutorSpec, TickContext
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import CLOSE_WITHIN_S, NodeLoop

T = TypeVar("T")

# How much longer than a tick's timeout ``OnTheLoop.run`` waits: ``run_async`` bounds itself, this is a backstop.
_BACKSTOP_S = 10.0


class Cancelled(Exception):
    """``cancel`` was set while the coroutine ran: it was cancelled on the loop."""


class LoopThread:
    """``shared``: the node's loop, used and left running by ``close()``; without it, a loop of its own
    named ``name`` (its thread ends only when ``close()`` stops it)."""

    def __init__(
        self, name: str = "shardcron-loop", lifeline: Lifeline = UNWATCHED, shared: NodeLoop | None = None
    ) -> None:
        self._owns_loop = shared is None
        self._node_loop = NodeLoop(name, lifeline) if shared is None else shared
        self._watch = _CancelWatch()

    def cancelled_by(self, cancel: Cancel) -> _CancelScope:
        """On the loop: ``with cancelled_by(cancel): ...`` raises ``Cancelled`` once ``cancel`` is set
        (already set on entry, or set while inside: its callback cancels the task on the loop)."""
        return _CancelScope(self._watch, cancel)

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """From any thread: ``callback(*args)`` on the loop, soon."""
        self.loop.call_soon_threadsafe(callback, *args)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._node_loop.loop

    def run(self, make_coro: Callable[[], Awaitable[T]], timeout_s: float, cancel: Cancel | None = None) -> T:
        """``await make_coro()`` on the loop. ``TimeoutError`` past ``timeout_s``; ``Cancelled`` on ``cancel``.

        Either way the coroutine is cancelled on the loop, so nothing is left running for a tick
        that has already been reported.
        """
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled before it was handed to the loop")
        future = asyncio.run_coroutine_threadsafe(_call(make_coro, cancel), self.loop)
        # Cancelling the future (thread-safe) cancels the task on the loop and wakes the wait below.
        take_back = cancel.on_set(future.cancel) if cancel is not None else _nothing
        try:
            return future.result(timeout=max(timeout_s, 0.001))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None
        except concurrent.futures.CancelledError:
            raise Cancelled(
                "cancelled" if cancel is not None and cancel.is_set() else "cancelled on the loop"
            ) from None
        finally:
            take_back()

    def finish(self, make_coro: Callable[[], Awaitable[object]], timeout_s: float) -> None:
        """``await make_coro()`` (a client's close): waited for from a thread, as ``run``; from the loop
        itself, left to run as a task, since a wait there would wait on itself."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is None or running is not self.loop:
            self.run(make_coro, timeout_s)
            return
        task: asyncio.Task = asyncio.ensure_future(make_coro(), loop=running)
        _finishing.add(task)
        task.add_done_callback(_finishing.discard)

    def close(self, timeout_s: float = CLOSE_WITHIN_S) -> None:
        """Stops and closes a loop of its own; the node's loop goes on (the node closes it last)."""
        if self._owns_loop:
            self._node_loop.close(timeout_s)


class OnTheLoop:
    """An executor whose work is ``run_async`` on the node's loop (``loop``). Made without it (a test, a
    tool), it runs a loop of its own named ``loop_name``, which ``close()`` ends."""

    def __init__(self, connections: Connections, loop: LoopThread | None, loop_name: str) -> None:
        self._connections = connections
        self._owns_loop = loop is None
        self._loop = LoopThread(loop_name) if loop is None else loop

    async def run_async(
        self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel
    ) -> ExecutionResult:
        raise NotImplementedError

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        """``run_async`` from a thread, waited for."""
        return self._loop.run(lambda: self.run_async(spec, ctx, timeout_s, cancel), timeout_s + _BACKSTOP_S)

    def close(self) -> None:
        if self._owns_loop:
            self._loop.close()


class _CancelScope:
    """Cancels the task it runs in when ``cancel`` is set; ``Cancelled`` out of it then.

    Only a cancellation this scope asked for becomes ``Cancelled``: any other (the loop stopping,
    an enclosing timeout) passes through unchanged, as with ``asyncio.timeout``."""

    __slots__ = ("_watch", "_cancel", "_task", "fired")

    def __init__(self, watch: _CancelWatch, cancel: Cancel):
        self._watch = watch
        self._cancel = cancel
        self._task: asyncio.Task | None = None
        self.fired = False

    def __enter__(self) -> _CancelScope:
        if self._cancel.is_set():
            raise Cancelled("cancelled before it started")
        self._task = asyncio.current_task()
        self._watch.add(self._cancel, self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._watch.discard(self._cancel, self)
        if self.fired and exc_type is asyncio.CancelledError and self._task is not None and self._task.uncancel() == 0:
            raise Cancelled("cancelled") from None

    def fire(self) -> None:
        if not self.fired:
            self.fired = True
            if self._task is not None:
                self._task.cancel()


class _CancelWatch:
    """The open scopes by their ``cancel``, with one callback registered on each distinct ``cancel``.

    Used on the loop only, but for the callback itself: it runs on whichever thread sets ``cancel``
    and only schedules ``_fire`` on the loop."""

    def __init__(self) -> None:
        self._scopes: dict[Cancel, set[_CancelScope]] = {}
        self._take_back: dict[Cancel, Callable[[], None]] = {}

    def add(self, cancel: Cancel, scope: _CancelScope) -> None:
        scopes = self._scopes.get(cancel)
        if scopes is None:
            scopes = self._scopes[cancel] = set()
            loop = asyncio.get_running_loop()
            self._take_back[cancel] = cancel.on_set(lambda: _schedule(loop, self._fire, cancel))
        scopes.add(scope)

    def discard(self, cancel: Cancel, scope: _CancelScope) -> None:
        scopes = self._scopes.get(cancel)
        if scopes is not None:
            scopes.discard(scope)
            if not scopes:
                del self._scopes[cancel]
                self._take_back.pop(cancel)()

    def _fire(self, cancel: Cancel) -> None:
        for scope in list(self._scopes.get(cancel, ())):
            scope.fire()


def _schedule(loop: asyncio.AbstractEventLoop, callback: Callable[[Cancel], None], cancel: Cancel) -> None:
    try:
        loop.call_soon_threadsafe(callback, cancel)
    except RuntimeError:  # the loop is closed: the node is stopping, and nothing on it is left to cancel
        pass


# Closes handed to the loop by ``finish``, held until done (the loop keeps only weak references to tasks).
_finishing: set[asyncio.Task] = set()


def _nothing() -> None:
    pass


async def _call(make_coro: Callable[[], Awaitable[T]], cancel: Cancel | None) -> T:
    # Checked again on the loop: a busy loop may take this up long after ``run`` was called, and
    # by then the shard (or the lease, see leader.shard_cancel.StopOrLeaseLost) may be gone.
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled before it started on the loop")
    return await make_coro()
