"""A node's one asyncio event loop, in one thread: everything of the node that awaits runs on it.

The API's ``grpc.aio`` server, every tick's coroutine with the executors'
asyncio clients (the pooled HTTP client, nats-py, aio-pika, arq), and the
dashboard's aiohttp app with its metrics sampler share this loop. One loop
means one thread handing the GIL around for all of that I/O, and calls
between the parts (the API's streams fed by the ticks' results, the
dashboard's pages) cost no hand-over between loops. No part of a node has a
loop or an I/O thread of its own.

Nothing may block this loop: whatever blocks (a store read or write, the
synchronous ``Client``, a shell command, a registry walk) runs on a worker
thread and is awaited (``run_in_executor``, ``asyncio.to_thread``).

The loop's thread is spawned through the lifeline it is given: a loop that
stops while the node is not stopping is the node's death. ``close()`` stops it;
the node calls it last, once nothing uses the loop any more (``node.py``). A
part made outside a node (a test, a tool) makes a ``NodeLoop`` of its own and
closes it itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from shardcron.runtime.lifeline import UNWATCHED, Lifeline

T = TypeVar("T")

CLOSE_WITHIN_S = 5.0  # a loop stuck in a callback must not hold up the node's stop: its thread is a daemon


class NodeLoop:
    """The loop (``loop``), started on first use or by ``start()``, in a thread named ``name``."""

    def __init__(self, name: str = "node-loop", lifeline: Lifeline = UNWATCHED) -> None:
        self.name = name
        self._lifeline = lifeline
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> NodeLoop:
        _ = self.loop
        return self

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                if self._closed:
                    raise RuntimeError(f"the event loop {self.name!r} is closed")
                self._loop = asyncio.new_event_loop()
                self._thread = self._lifeline.loop_thread(self._loop, self.name)
                self._thread.start()
            return self._loop

    @property
    def running(self) -> bool:
        """Whether the loop takes work: started, not closed, and its thread alive (it dies with its loop)."""
        with self._lock:
            loop, thread = self._loop, self._thread
        return loop is not None and not loop.is_closed() and thread is not None and thread.is_alive()

    def in_loop_thread(self) -> bool:
        with self._lock:
            return self._thread is not None and threading.current_thread() is self._thread

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """From any thread: ``callback(*args)`` on the loop, soon. RuntimeError once the loop is closed."""
        self.loop.call_soon_threadsafe(callback, *args)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """From another thread: ``await coro`` on the loop and wait for it, at most ``timeout_s`` (then it is
        cancelled on the loop and ``TimeoutError`` raised). RuntimeError when the loop does not run: a wait on
        a loop that will never take the coroutine would never end."""
        try:
            if self.in_loop_thread():
                raise RuntimeError(f"NodeLoop.run called on the loop {self.name!r} itself: it would wait for itself")
            if self._loop is not None and not self.running:
                raise RuntimeError(f"the event loop {self.name!r} does not run")
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:
            coro.close()  # never to be awaited: no "was never awaited" warning for it
            raise
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer from the event loop {self.name!r} within {timeout_s:g}s") from None

    def close(self, timeout_s: float = CLOSE_WITHIN_S) -> None:
        """Stop the loop and close it; a second call does nothing. Whatever still waits on it is dropped:
        call it once every part that used the loop has stopped."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._closed = True
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # closed meanwhile by a concurrent close
            return
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        if not loop.is_running():
            loop.close()


__all__ = ["CLOSE_WITHIN_S", "NodeLoop"]
