"""The running mark every tick writes before its executor starts, group-committed.

A tick with a side effect is marked ``running`` in a fenced transaction before
its executor starts (``runner.py``): a stale leader's mark is rejected and its
work never starts. One transaction per tick made that the ceiling of a node's
dispatch rate (a few hundred a second: 64 worker threads took turns on
SQLite's write lock, or on PostgreSQL's commit flush). Here the marks of every
tick starting at the same moment, on every led shard, share one fenced
transaction (``store.tick_results.mark_running_many``), written by the tick
writer (``tick_writer.py``) before anything else it has to write, so that a mark
waits for at most the batch in progress, never behind queued claims, results or
prunes; marks queued while a batch is written go together in the next.

A lone mark is written at once. Once marks are seen to come together (the last
batch, or the queue, held more than one), a batch waits up to ``LINGER_S`` for
more, as ``api/job_puts.py`` does: a transaction costs about eight marks' worth
of CPU, so slots spread over the second, which start a few at a time, were
marked one or two per transaction, and the marks were the largest share of a
node's CPU per dispatched tick. Each tick still learns its own fate: its shard's fence held (the mark
is written; it may start), or moved (``FencedOut`` for that shard's ticks
alone), or the store failed (``StoreUnavailable`` for the whole batch: none of
them started). Marks are kept, not failed, when another stream's write finds
the store unavailable: their own batch follows at once and answers them.

States of a queued mark: queued -> in the batch being written -> answered (or
cancelled by its caller: the write still happens, its answer is dropped; or
cancelled when the writer has ended: nobody writes it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from shardcron.errors import FencedOut, StoreUnavailable
from shardcron.leader.tick_writer import batch_ready_at
from shardcron.model import SlotRef
from shardcron.runtime import crashpoints
from shardcron.store import tick_results

# How long a batch waits for more marks once marks come together: a start is at most this late for
# it. On SQLite a mark's transaction costs about 240 us of CPU and each mark in it about 30 us more.
LINGER_S = 0.005


@dataclass(frozen=True)
class RunningMark:
    shard: int
    fence: int
    slot: SlotRef
    attempt: int
    started_at_ms: int


_Waiter = tuple[RunningMark, asyncio.AbstractEventLoop, asyncio.Future]


class RunningMarks:
    """``mark`` is awaited by the ticks' coroutines; the tick writer writes them (``tick_writer.Stream``)."""

    def __init__(self, engine: Engine, *, max_batch: int = 2048, linger_s: float = LINGER_S):
        self._engine = engine
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._first_at = 0.0  # time.monotonic() when the queue last became non-empty: its linger starts
        self._together = False  # the last batch held more than one mark
        self.wake: Callable[[], None] = lambda: None  # the writer's (tick_writer.py)

    @property
    def queued(self) -> int:
        """Marks waiting for a batch that will carry them (not the one being written)."""
        with self._lock:
            return len(self._queue)

    async def mark(self, mark: RunningMark) -> None:
        """Write the mark, with whatever others are waiting. ``FencedOut``: the shard's fence moved."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        with self._lock:
            first = not self._queue
            if first:
                self._first_at = time.monotonic()
            self._queue.append((mark, loop, answer))
            full = len(self._queue) == self._max_batch
        if first or full:  # the writer is woken once per batch (its linger starts), not once per mark
            self.wake()
        await answer

    # -- the writer's side (tick_writer.Stream) ----------------------------------------------

    def ready_at(self, now: float, closing: bool) -> float | None:
        if closing:
            return None  # the ticks are cancelled: a mark written now would start nothing
        with self._lock:
            together = self._together or len(self._queue) > 1
            return batch_ready_at(
                queued=len(self._queue),
                first_at=self._first_at,
                linger_s=self._linger_s if together else 0.0,
                max_batch=self._max_batch,
            )

    def write_next(self) -> StoreUnavailable | None:
        crashpoints.fail_worker("marks-commit")  # SHARDCRON_TEST_FAIL_THREAD=marks-commit fails the writer at this step
        with self._lock:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            self._together = len(batch) > 1  # what is left came before this batch was taken: it is due now
        store_down = None
        try:
            answers: Sequence[BaseException | None] = self._write([m for m, _, _ in batch])
        except Exception as e:  # noqa: BLE001 - the transaction failed: every mark in it gets the error
            answers = [e] * len(batch)
            store_down = e if isinstance(e, StoreUnavailable) else None
        _answer(batch, answers)
        return store_down

    def closed(self) -> None:
        with self._lock:
            left, self._queue = self._queue, []
        _answer(left, [None] * len(left), cancel=True)

    def _write(self, marks: list[RunningMark]) -> list[FencedOut | None]:
        groups: dict[tuple[int, int], list] = {}
        for m in marks:
            groups.setdefault((m.shard, m.fence), []).append((m.slot, m.attempt, m.started_at_ms))
        out = tick_results.mark_running_many(self._engine, groups)
        return [
            FencedOut(m.shard, m.fence, out.fenced_out[m.shard]) if out.is_fenced(m.shard, m.fence) else None
            for m in marks
        ]


def _answer(batch: list[_Waiter], answers: Sequence[BaseException | None], *, cancel: bool = False) -> None:
    """Each mark's answer, set on its own loop: one hand-over per loop, not one per mark."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, BaseException | None]]] = {}
    for (_, loop, future), answer in zip(batch, answers, strict=True):
        by_loop.setdefault(loop, []).append((future, answer))
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, items, cancel)
        except RuntimeError:  # the loop is closed: nobody waits for these any more
            pass


def _settle(items: list[tuple[asyncio.Future, BaseException | None]], cancel: bool) -> None:
    for future, answer in items:
        if future.done():  # its caller went away
            continue
        if cancel:
            future.cancel()
        elif answer is not None:
            future.set_exception(answer)
        else:
            future.set_result(None)
