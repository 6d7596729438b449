"""A long-lived part of a node that mostly waits, as one task on the node's event loop, its blocking passes on a pool.

Some parts of a node (the settings' watches, the notifier) do a short pass of
blocking work (store reads, a fenced claim) now and then, and wait in between:
on a bump or a result that lands, or on a timer. A thread of their own would
spend its life idle. A ``PassTask`` does the waiting on the node's loop, where
a wait costs no thread, and hands each pass to a pool, where a blocking call
cannot stall the loop: a node's is its background lane over the API's workers
(``runtime.one_at_a_time``), so at rest it runs no thread for them.

One pass at a time, the first at once: then the task waits until ``wake()``
(from any thread), which always brings a pass, or until the delay the last
pass returned (None: until woken), when it asks ``owed()`` on the loop (cheap
and non-blocking: an in-memory look) whether one is owed, and waits that delay
again if not. Each pass runs on the pool, awaited by the task. A pass or an
``owed()`` that raises kills the task, which the lifeline reports as the
node's death (exit 70), as it would a thread's; ``stop()`` cancels the task,
which is not a death, and waits for a pass under way, so that what its caller
stops next is not used again by it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import NodeLoop

START_WITHIN_S = 10.0  # making the task on the loop: far longer than it takes, never forever
STOP_WITHIN_S = 5.0  # a pass stuck in the store must not hold up the node's stop: its pool thread is left to it


def always() -> bool:
    return True


class PassTask:
    """``run_pass()`` on ``pool``, again and again, from one task named ``name`` on ``loop``. ``run_pass``
    returns how long to wait for the next pass unless woken (None: until woken)."""

    def __init__(
        self,
        name: str,
        loop: NodeLoop,
        run_pass: Callable[[], float | None],
        *,
        owed: Callable[[], bool] = always,
        lifeline: Lifeline = UNWATCHED,
    ) -> None:
        self.name = name
        self._loop = loop
        self._run_pass = run_pass
        self._owed = owed
        self._lifeline = lifeline
        self._wake = asyncio.Event()  # set on the loop only
        self._pool: Executor | None = None
        self._task: asyncio.Task[None] | None = None  # made and cancelled on the loop
        self._pass: asyncio.Future[float | None] | None = None  # the pass under way on the pool, if any
        self._lock = threading.Lock()
        self._started = False

    def start(self, pool: Executor | None = None) -> PassTask:
        """Start the task, which runs a first pass at once; its passes run on ``pool`` (None: the loop's default
        executor)."""
        self._pool = pool
        self._loop.run(self._spawn(), START_WITHIN_S)
        with self._lock:
            self._started = True
        return self

    def wake(self) -> None:
        """From any thread: a pass soon (if ``owed()``), without waiting out the delay."""
        try:
            self._loop.call_soon(self._wake.set)
        except RuntimeError:  # the loop is closed: the node is stopping, and no pass is owed any more
            pass

    def stop(self) -> None:
        """End the task, waiting up to ``STOP_WITHIN_S`` for a pass under way; a second call does nothing."""
        with self._lock:
            started, self._started = self._started, False
        if not started:
            return
        try:
            self._loop.run(self._end(), STOP_WITHIN_S + 1)
        except (RuntimeError, TimeoutError):  # the loop is gone or wedged: what ran on it ended with it
            pass

    async def _spawn(self) -> None:
        self._task = self._lifeline.task(asyncio.get_running_loop(), self._run(), self.name)

    async def _end(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        under_way: list[asyncio.Future[Any]] = [task] if self._pass is None else [task, self._pass]
        await asyncio.wait(under_way, timeout=STOP_WITHIN_S)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            crashpoints.fail_worker(self.name)
            # Cleared before the pass reads what is owed: a wake during it ends the next wait at once.
            self._wake.clear()
            self._pass = loop.run_in_executor(self._pool, self._run_pass)
            # Shielded: a stop cancels this wait, not the pass, which it then waits for (_end).
            delay = await asyncio.shield(self._pass)
            self._pass = None
            # A wake always brings a pass; the delay's end only one that ``owed()`` asks for.
            while not await self._woken_within(delay):
                crashpoints.fail_worker(self.name)
                if self._owed():
                    break

    async def _woken_within(self, delay: float | None) -> bool:
        try:
            await asyncio.wait_for(self._wake.wait(), None if delay is None else max(0.0, delay))
        except TimeoutError:
            return False
        return True


__all__ = ["START_WITHIN_S", "STOP_WITHIN_S", "PassTask", "always"]
