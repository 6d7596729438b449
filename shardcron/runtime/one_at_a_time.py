"""An executor that runs what it is given one at a time, in turn, on a pool it borrows.

A node's background passes (the settings' reloads, the notifier's passes, the
dashboard's metrics readings) block, but they are short, rare and never
urgent. Given the API's pool directly, each would take a worker of its own
whenever they coincide (at start-up they all do), and a ``ThreadPoolExecutor``
keeps every thread it ever started: a node would carry one idle thread per
background part for its whole life. ``OneAtATime`` lets them take turns
instead: at most one of them holds a worker of the pool at a time, so at rest
they share the worker the API uses anyway, and however many are owed at once,
they never crowd the API's calls out of more than one worker.

What is submitted runs in submission order; a worker drains the queue and
hands itself back once it is empty. A function that submits to the same
``OneAtATime`` and waits for it would wait for itself: none does. Shutting
the borrowed pool down (its owner's call) cancels what still waits here.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class OneAtATime(Executor):
    """Runs submitted calls one at a time on ``pool``."""

    def __init__(self, pool: Executor) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = deque()
        self._draining = False  # a worker of the pool is draining the queue

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            self._queue.append((future, fn, args, kwargs))
            if self._draining:
                return future
            self._draining = True
        try:
            self._pool.submit(self._drain).add_done_callback(self._drain_ended)
        except BaseException as e:  # the pool is shut down: nothing queued here will run
            for other in self._drop_queued():
                if other is not future:
                    other.set_exception(e)
            raise
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                future, fn, args, kwargs = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(e)
            else:
                future.set_result(result)

    def _drain_ended(self, drain: Future[None]) -> None:
        """The pool dropped the drain before it ran (it was shut down with what it had queued): so is what
        waits here, or its callers would wait forever."""
        if drain.cancelled():
            for future in self._drop_queued():
                future.cancel()

    def _drop_queued(self) -> list[Future[Any]]:
        with self._lock:
            self._draining = False
            dropped = [future for future, *_ in self._queue]
            self._queue.clear()
        return dropped


__all__ = ["OneAtATime"]
