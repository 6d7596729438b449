"""The one writer of tick rows: a thread that serves the leader's streams of tick writes by priority.

Streams, highest priority first (``Scheduler`` builds them in this order): the running marks
(``marks.py``: a tick must not wait to start), the claims (``claimer.py``), the results
(``recorder.py``), the prunes (``pruner.py``). Each stream keeps its own queue, batches by size and
by time (its linger), carries every request's shard and fence into its fenced statement (a batch
groups them per (shard, fence)) and hands each requester its own outcome: written, refused by the
fence, or the store unavailable. A stream says when it next has a batch ready (``Stream.ready_at``);
what to write next is the pure ``next_step`` over those instants.

States of the writer, and every transition:

* WAITING -> WRITING: a stream is ready now (``next_step`` gives ``Write``: the first ready one);
* WAITING -> WAITING: woken by a put, a flush or a new claim-heap top, or at the earliest
  ``ready_at`` (``Wait.until``), it asks ``next_step`` again;
* WRITING -> WAITING: the stream's batch is written and each requester answered;
* WAITING -> CLOSED: ``close()`` asked, and no stream has anything left it will write while closing
  (marks, claims and prunes stop at once; results are written out, or given up after back-offs);
  each stream's ``closed()`` then drops what is left (queued marks are cancelled).

A stream's batch that raises ends the writer (the lifeline stops the node, exit 70): a stream
handles the errors it expects (the store unavailable, the fence) in its own ``write_next``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

log = logging.getLogger(__name__)

# The longest single wait: a wake-up re-asks every stream anyway; the bound keeps a far ready_at
# within what Condition.wait takes.
MAX_WAIT_S = 3600.0


class Stream(Protocol):
    """One kind of tick write, as the writer serves it (times are ``time.monotonic()`` seconds)."""

    wake: Callable[[], None]  # set by the writer: called by the stream when what it waits for changed

    def ready_at(self, now: float, closing: bool) -> float | None:
        """When a batch is ready to write (<= now: at once); None: nothing to write (while ``closing``: ever)."""
        ...

    def write_next(self) -> None:
        """Write one batch and answer its requesters (on the writer's thread)."""
        ...

    def closed(self) -> None:
        """The writer ended: drop what is left, answering whoever waits for it."""
        ...


@dataclass(frozen=True)
class Write:
    stream: int  # its index in the priority order


@dataclass(frozen=True)
class Wait:
    until: float | None  # None: until woken


def next_step(ready: Sequence[float | None], now: float) -> Write | Wait:
    """The first stream (by priority) that is ready at ``now``, or the wait until the earliest one is."""
    for i, at in enumerate(ready):
        if at is not None and at <= now:
            return Write(i)
    pending = [at for at in ready if at is not None]
    return Wait(min(pending) if pending else None)


def batch_ready_at(
    *,
    queued: int,
    first_at: float,
    linger_s: float,
    max_batch: int,
    retry_at: float = 0.0,
    cut_short: bool = False,
) -> float | None:
    """When a queue of ``queued`` items, the first of which came at ``first_at``, has its batch ready.

    None when empty; at the end of the linger, or at once when the batch is full or the linger is
    ``cut_short`` (a flush, a close); never before ``retry_at`` (a back-off after a failed write).
    """
    if queued <= 0:
        return None
    lingered = first_at if cut_short or queued >= max_batch else first_at + linger_s
    return max(lingered, retry_at)


class TickWriter:
    """Serves ``streams`` (in priority order) on one thread named ``name``; a thread that dies stops the node."""

    def __init__(self, streams: Sequence[Stream], *, name: str = "tick-writer", lifeline: Lifeline = UNWATCHED):
        self._streams = list(streams)
        self._serving = self._streams
        self._cond = threading.Condition()
        self._woken = False  # something changed since the streams were last asked
        self._closing = False
        for stream in self._streams:
            stream.wake = self.wake
        self._thread = lifeline.thread(self._run, name)

    def start(self, serving: Sequence[Stream] | None = None) -> None:
        """Start the thread; ``serving``: only these streams (a test that steps the others itself)."""
        if serving is not None:
            self._serving = [s for s in self._streams if s in serving]
        self._thread.start()

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def close(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        streams = self._serving
        try:
            while True:
                crashpoints.fail_worker()
                with self._cond:
                    self._woken = False  # a change from here on is seen by the next ask, or wakes the wait
                    closing = self._closing
                now = time.monotonic()
                step = next_step([s.ready_at(now, closing) for s in streams], now)
                if isinstance(step, Write):
                    streams[step.stream].write_next()
                    continue
                if closing and step.until is None:
                    return
                with self._cond:
                    if not self._woken and self._closing == closing:
                        wait = None if step.until is None else min(MAX_WAIT_S, max(0.0, step.until - now))
                        self._cond.wait(wait)
        finally:
            for stream in streams:
                stream.closed()


__all__ = ["MAX_WAIT_S", "Stream", "TickWriter", "Wait", "Write", "batch_ready_at", "next_step"]
