"""The entries of the loop's two timer heaps, and taking the due ones off a heap.

Entries order by (due_ms, seq) alone: ``seq`` is unique per heap, so two
entries never compare further, and the other fields are named, not positions
in a tuple that a reader could misnumber.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from shardcron.scheduling.takeover import Dispatch


@dataclass(order=True, slots=True)
class ClaimDue:
    """A job's next slot, due in the claim heap ``lookahead`` before the slot itself."""

    due_ms: int
    seq: int
    shard: int = field(compare=False)
    fence: int = field(compare=False)
    job_id: str = field(compare=False)
    gen: int = field(compare=False)  # the JobEntry generation that pushed it
    slot_ms: int = field(compare=False)


@dataclass(order=True, slots=True)
class DispatchDue:
    """A claimed slot, due in the dispatch heap at the slot (or when it may be tried again)."""

    due_ms: int
    seq: int
    shard: int = field(compare=False)
    fence: int = field(compare=False)
    dispatch: Dispatch = field(compare=False)


class TimerHeap:
    """A heap of ``ClaimDue`` or ``DispatchDue`` under one condition: pushers notify, one loop pops."""

    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()  # drawn with the condition held
        self.cond = threading.Condition()

    def push_claim(self, due_ms: int, shard: int, fence: int, job_id: str, gen: int, slot_ms: int) -> None:
        with self.cond:
            heapq.heappush(self._heap, ClaimDue(due_ms, next(self._seq), shard, fence, job_id, gen, slot_ms))
            self.cond.notify()

    def push_dispatch(self, due_ms: int, shard: int, fence: int, d: Dispatch) -> None:
        with self.cond:
            heapq.heappush(self._heap, DispatchDue(due_ms, next(self._seq), shard, fence, d))
            self.cond.notify()

    def push_again(self, entries: list, due_ms: int) -> None:
        """Entries taken off but not handled (the store was down): back in, due at ``due_ms``."""
        with self.cond:
            for e in entries:
                e.due_ms, e.seq = due_ms, next(self._seq)
                heapq.heappush(self._heap, e)
            self.cond.notify()

    def top(self):
        with self.cond:
            return self._heap[0] if self._heap else None

    def take_due(self, now_ms: int, slack_ms: int) -> list:
        """Every entry due by ``now_ms + slack_ms``, in order, without waiting."""
        with self.cond:
            return self._take(now_ms + slack_ms)

    def wait_due(self, now_ms: Callable[[], int], slack_ms: int, closing: Callable[[], bool]) -> list:
        """Wait until the top is due (within ``slack_ms``), then take everything due; [] when closing."""
        with self.cond:
            while not closing():
                now = now_ms()
                heap = self._heap
                if heap and heap[0].due_ms <= now + slack_ms:
                    return self._take(now + slack_ms)
                self.cond.wait(None if not heap else max(0.0, (heap[0].due_ms - now - slack_ms) / 1000.0))
        return []

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def _take(self, until_ms: int) -> list:
        heap, due = self._heap, []
        while heap and heap[0].due_ms <= until_ms:
            due.append(heapq.heappop(heap))
        return due
