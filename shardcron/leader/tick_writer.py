"""The one writer of tick rows: a thread that serves the leader's streams of tick writes by priority.

Streams, highest priority first (``Scheduler`` builds them in this order): the running marks
(``marks.py``: a tick must not wait to start), the claims (``claimer.py``), the results
(``recorder.py``), the prunes (``pruner.py``). Each stream keeps its own queue, batches by size and
by time (its linger), carries every request's shard and fence into its fenced statement (a batch
groups them per (shard, fence)) and hands each requester its own outcome: written, refused by the
fence, or the store unavailable. A stream says when it next has a batch ready (``Stream.ready_at``);
what to write next is the pure ``next_step`` over those instants.

A write that finds the store unavailable says so (``write_next`` returns the error), and what the
streams' queues get then is the pure ``on_store_down``: the streams given as ``fail_when_store_down``
(the claims) fail every request queued at that moment, unattempted; the others keep theirs for their
own next batch (results are never dropped). So a claim waits for at most the one write in progress
when the store stops answering, never for that write's timeout and then its own
(``docs/adr/0007-one-writer-of-tick-rows.md``).

States of the writer, and every transition:

* WAITING -> WRITING: a stream is ready now (``next_step`` gives ``Write``: the first ready one);
* WAITING -> WAITING: woken by a put, a flush or a new claim-heap top, or at the earliest
  ``ready_at`` (``Wait.until``), it asks ``next_step`` again;
* WRITING -> WAITING: the stream's batch is written and each requester answered;
* WRITING -> WAITING, failing fast: the batch found the store unavailable (its own requesters are
  answered as its stream decides), and each stream that fails fast fails what it has ready
  (``on_store_down``);
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
from enum import Enum
from typing import Protocol

from shardcron.errors import StoreUnavailable
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

    def write_next(self) -> StoreUnavailable | None:
        """Write one batch and answer its requesters (on the writer's thread); the error when the store
        was unavailable to it, else None."""
        ...

    def closed(self) -> None:
        """The writer ended: drop what is left, answering whoever waits for it."""
        ...


class FailsFast(Stream, Protocol):
    """A stream whose requests fail at once when the store is found unavailable (``on_store_down``)."""

    def fail_queued(self, error: StoreUnavailable) -> None:
        """Fail every request queued now, unattempted: another write has just met ``error``."""
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


class WhenStoreDown(Enum):
    """What a stream's queued requests get when a write, of any stream, finds the store unavailable."""

    KEEP = "keep"  # they stay queued for the stream's own next batch (results: never dropped)
    FAIL = "fail"  # each one fails at once, unattempted (a claim: its slot is claimed on a retry)


def on_store_down(policies: Sequence[WhenStoreDown], ready: Sequence[float | None], now: float) -> tuple[int, ...]:
    """After a write found the store unavailable: the streams (by index) whose queued requests fail now.

    Those whose policy is ``FAIL`` and that have a batch ready at ``now`` (``ready``: each stream's
    ``ready_at``); a request that comes due later gets an attempt of its own.
    """
    return tuple(
        i
        for i, (policy, at) in enumerate(zip(policies, ready, strict=True))
        if policy is WhenStoreDown.FAIL and at is not None and at <= now
    )


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
    """Serves ``streams`` (in priority order) on one thread named ``name``; a thread that dies stops the node.

    ``fail_when_store_down``: those of ``streams`` whose queued requests fail when a write finds the
    store unavailable (``WhenStoreDown.FAIL``); the others keep theirs (``WhenStoreDown.KEEP``).
    """

    def __init__(
        self,
        streams: Sequence[Stream],
        *,
        fail_when_store_down: Sequence[FailsFast] = (),
        name: str = "tick-writer",
        lifeline: Lifeline = UNWATCHED,
    ):
        self._streams = list(streams)
        self._serving = self._streams
        self._fail_fast: list[FailsFast] = list(fail_when_store_down)
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
        fail_fast = {i: f for f in self._fail_fast for i, s in enumerate(streams) if s is f}
        policies = [WhenStoreDown.FAIL if i in fail_fast else WhenStoreDown.KEEP for i in range(len(streams))]
        try:
            while True:
                crashpoints.fail_worker()
                with self._cond:
                    self._woken = False  # a change from here on is seen by the next ask, or wakes the wait
                    closing = self._closing
                now = time.monotonic()
                step = next_step([s.ready_at(now, closing) for s in streams], now)
                if isinstance(step, Write):
                    store_down = streams[step.stream].write_next()
                    if store_down is not None:
                        now = time.monotonic()
                        for i in on_store_down(policies, [s.ready_at(now, closing) for s in streams], now):
                            fail_fast[i].fail_queued(store_down)
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


__all__ = [
    "MAX_WAIT_S",
    "FailsFast",
    "Stream",
    "TickWriter",
    "Wait",
    "WhenStoreDown",
    "Write",
    "batch_ready_at",
    "next_step",
    "on_store_down",
]
