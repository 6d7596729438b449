"""A node's lifeline: every long-lived thread and task of the node reports its own death, once.

A worker that dies quietly leaves a node that looks alive: it keeps its lease
and leads its shards, and nothing else takes them over, while the dead worker's
part (claiming, starting, writing results) no longer happens. So every
long-lived thread is spawned with ``Lifeline.thread`` and every long-lived task
with ``Lifeline.task``. An exception out of one, or a return while the node is
not stopping (unless the worker ``may_end``, as a session's keep-alive does
when its lease is lost), calls ``on_death(name, error)``; the error is None for
a return. A worker stuck in one step is reported by the thread that watches it,
with a ``runtime.steps.WorkerStalled``. Only the first death is reported: what dies after it dies of the
first, and is logged as a warning. The node then stops at once and exits non-zero
(``EXIT_WORKER_DIED``; see ``node.py``).

A task that is cancelled has been stopped by someone on purpose and is not a
death. Per-call threads (a tick's, a release's) are not spawned here: they end
by design and report their own failures.

``UNWATCHED`` is for components made outside a node (tests, tools): a death is
logged, with its traceback, and nobody is told.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

from shardcron import metrics
from shardcron.runtime import crashpoints

log = logging.getLogger(__name__)

# What a node's process exits with when one of its workers died (sysexits' EX_SOFTWARE, "internal software
# error"): not 1, which is a configuration or start-up error that a restart would only repeat.
EXIT_WORKER_DIED = 70

OnDeath = Callable[[str, BaseException | None], None]


class Lifeline:
    """``stopping``: set once the node stops on purpose; a worker that returns after that has not died."""

    def __init__(self, on_death: OnDeath | None = None, stopping: threading.Event | None = None):
        self._on_death = on_death
        self.stopping = stopping if stopping is not None else threading.Event()
        self._lock = threading.Lock()
        self.died: str | None = None  # the first worker that died

    def thread(
        self, target: Callable[..., object], name: str, *, args: tuple = (), may_end: bool = False
    ) -> threading.Thread:
        """A daemon thread running ``target(*args)`` that reports its death (not started)."""
        return threading.Thread(target=self._guard, args=(target, args, name, may_end), name=name, daemon=True)

    def loop_thread(self, loop: asyncio.AbstractEventLoop, name: str) -> threading.Thread:
        """A daemon thread running ``loop`` until it is stopped (not started). Nothing raised in a callback
        reaches the thread, so a loop stopped while the node is not stopping is its death."""
        return self.thread(run_forever, name, args=(loop,))

    def task(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, object], name: str, *, may_end: bool = False
    ) -> asyncio.Task:
        """``loop.create_task(coro)``, reporting the task's death from its done-callback."""
        task = loop.create_task(coro, name=name)
        task.add_done_callback(lambda t: self._task_done(t, name, may_end))
        return task

    def report(self, name: str, error: BaseException | None) -> None:
        """Worker ``name`` ended with ``error`` (None: it returned while it should not have)."""
        on_death = self._on_death
        with self._lock:
            first = self.died is None and on_death is not None
            if first:
                self.died = name
        if first and on_death is not None:
            on_death(name, error)
        elif error is not None:
            what = "died" if self._on_death is None else "died too, after the first death"
            log.warning("worker %r %s: %r", name, what, error, exc_info=error)

    def _guard(self, target: Callable[..., object], args: tuple, name: str, may_end: bool) -> None:
        try:
            target(*args)
        except BaseException as e:  # noqa: BLE001 - reported, not left to threading.excepthook's bare print
            self.report(name, e)
            return
        if not may_end and not self.stopping.is_set():
            self.report(name, None)

    def _task_done(self, task: asyncio.Task, name: str, may_end: bool) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.report(name, error)
        elif not may_end and not self.stopping.is_set():
            self.report(name, None)


def stack_of(thread: threading.Thread | None) -> str:
    """Where ``thread`` is now, as a traceback's lines (for a log line about a thread that hangs)."""
    frame = sys._current_frames().get(thread.ident) if thread is not None and thread.ident is not None else None
    if frame is None:
        return "  (not running)"
    return "".join(traceback.format_stack(frame)).rstrip()


def run_forever(loop: asyncio.AbstractEventLoop) -> None:
    """``loop.run_forever()``, counted in ``shardcron_event_loops`` while it runs (the benches report it)."""
    crashpoints.fail_loop(loop)
    metrics.event_loops.inc()
    try:
        loop.run_forever()
    finally:
        metrics.event_loops.dec()


UNWATCHED = Lifeline()

__all__ = ["EXIT_WORKER_DIED", "Lifeline", "OnDeath", "UNWATCHED", "run_forever", "stack_of"]
