"""One asyncio event loop per node, in its own thread: every tick's coroutine and the asyncio clients.

Every tick with a side effect runs as a coroutine on this loop
(``leader.runner.run_tick``); the HTTP executor and the asyncio broker
clients (nats-py, aio-pika, arq) live on it, shared by every tick of the node.

Two ways in:
- from a thread, ``LoopThread.run(make_coro, timeout_s, cancel)`` runs one
  coroutine on the loop and waits for it, at most ``timeout_s`` and no longer
  than ``cancel`` stays unset;
- on the loop, ``with loop_thread.cancelled_by(cancel):`` cancels the
  coroutine inside it once ``cancel.is_set()`` (the shard lost, the lease no
  longer provable, the node stopping) and turns that into ``Cancelled``.
  ``cancel`` is anything with ``is_set()``: a ``threading.Event``, or
  ``leader.runner.StopOrLeaseLost``, whose answer changes without anyone
  setting it (a lease runs out). So it is polled: one timer for every scope
  open on the loop, every ``CANCEL_POLL_S``, asking each distinct ``cancel``
  once (the ticks of one shard share one), not a timer per tick.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol, TypeVar

from shardcron.executors.base import CANCEL_POLL_S
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

T = TypeVar("T")


class Cancelled(Exception):
    """``cancel`` was set while the coroutine ran: it was cancelled on the loop."""


class CancelSignal(Protocol):
    def is_set(self) -> bool: ...


class LoopThread:
    def __init__(self, name: str = "shardcron-loop", lifeline: Lifeline = UNWATCHED) -> None:
        self._name = name
        self._lifeline = lifeline  # its thread ends only when close() stops the loop, as the node stops
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watch = _CancelWatch()

    def cancelled_by(self, cancel: CancelSignal) -> _CancelScope:
        """On the loop: ``with cancelled_by(cancel): ...`` raises ``Cancelled`` once ``cancel`` is set
        (already set on entry, or seen set within ``CANCEL_POLL_S`` while inside)."""
        return _CancelScope(self._watch, cancel)

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """From any thread: ``callback(*args)`` on the loop, soon."""
        self.loop.call_soon_threadsafe(callback, *args)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = self._lifeline.loop_thread(self._loop, self._name)
                self._thread.start()
            return self._loop

    def run(self, make_coro: Callable[[], Awaitable[T]], timeout_s: float, cancel: threading.Event | None = None) -> T:
        """``await make_coro()`` on the loop. ``TimeoutError`` past ``timeout_s``; ``Cancelled`` on ``cancel``.

        Either way the coroutine is cancelled on the loop, so nothing is left running for a tick
        that has already been reported.
        """
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled before it was handed to the loop")
        future = asyncio.run_coroutine_threadsafe(_call(make_coro, cancel), self.loop)
        deadline = time.monotonic() + max(timeout_s, 0.001)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                future.cancel()
                raise TimeoutError(f"no answer within {timeout_s:g}s")
            if cancel is not None and cancel.is_set():
                future.cancel()
                raise Cancelled("cancelled")
            try:
                return future.result(timeout=min(remaining, CANCEL_POLL_S))
            except concurrent.futures.TimeoutError:
                continue
            except concurrent.futures.CancelledError:
                raise Cancelled("cancelled on the loop") from None

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout_s)
        if not loop.is_running():
            loop.close()


class _CancelScope:
    """Cancels the task it runs in when ``cancel`` is seen set; ``Cancelled`` out of it then.

    Only a cancellation this scope asked for becomes ``Cancelled``: any other (the loop stopping,
    an enclosing timeout) passes through unchanged, as with ``asyncio.timeout``."""

    __slots__ = ("_watch", "_cancel", "_task", "fired")

    def __init__(self, watch: _CancelWatch, cancel: CancelSignal):
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
    """The open scopes by their ``cancel``, and the one timer that polls them (used on the loop only)."""

    def __init__(self) -> None:
        self._scopes: dict[CancelSignal, set[_CancelScope]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, cancel: CancelSignal, scope: _CancelScope) -> None:
        self._scopes.setdefault(cancel, set()).add(scope)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(CANCEL_POLL_S, self._poll)

    def discard(self, cancel: CancelSignal, scope: _CancelScope) -> None:
        scopes = self._scopes.get(cancel)
        if scopes is not None:
            scopes.discard(scope)
            if not scopes:
                del self._scopes[cancel]

    def _poll(self) -> None:
        for cancel, scopes in list(self._scopes.items()):
            if cancel.is_set():
                for scope in list(scopes):
                    scope.fire()
        self._timer = asyncio.get_running_loop().call_later(CANCEL_POLL_S, self._poll) if self._scopes else None


async def _call(make_coro: Callable[[], Awaitable[T]], cancel: threading.Event | None) -> T:
    # Checked again on the loop: a busy loop may take this up long after ``run`` was called, and
    # by then the shard (or the lease, see leader.runner.StopOrLeaseLost) may be gone.
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled before it started on the loop")
    return await make_coro()
