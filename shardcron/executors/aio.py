"""One asyncio event loop per node, in its own thread, for the broker clients that are asyncio-only.

nats-py, aio-pika and arq speak asyncio; the scheduling loop runs ticks on
worker threads. ``LoopThread.run(make_coro, timeout_s, cancel)`` runs one
coroutine on the shared loop and waits for it from the calling worker thread,
at most ``timeout_s`` and no longer than ``cancel`` stays unset. Clients that
live on this loop (``Connections`` entries made through ``run``) are shared by
every tick of the node. This is the only place that crosses between threads
and the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shardcron.executors.base import CANCEL_POLL_S

T = TypeVar("T")


class Cancelled(Exception):
    """``cancel`` was set while the coroutine ran: it was cancelled on the loop."""


class LoopThread:
    def __init__(self, name: str = "shardcron-broker-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=self._name, daemon=True)
                self._thread.start()
            return self._loop

    def run(self, make_coro: Callable[[], Awaitable[T]], timeout_s: float,
            cancel: threading.Event | None = None) -> T:
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


async def _call(make_coro: Callable[[], Awaitable[T]], cancel: threading.Event | None) -> T:
    # Checked again on the loop: a busy loop may take this up long after ``run`` was called, and
    # by then the shard (or the lease, see scheduling.runner.StopOrLeaseLost) may be gone.
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled before it started on the loop")
    return await make_coro()

