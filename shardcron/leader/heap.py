"""The entries of the loop's two timer heaps, and taking the due ones off a heap.

The heap itself holds ``(due_ms, seq, entries)``: the entries of one push
that fall due at the same millisecond go in as one item, so a burst of
10,000 slots claimed together is one push and one pop, not 10,000 of each
(each a dozen tuple comparisons). ``seq`` is unique per heap, so two items
never compare their entries, and the comparisons stay tuple comparisons in C
(an ``order=True`` dataclass compares in Python, a function call per
comparison, which put milliseconds on a 1,000-slot burst). The entries name
their fields, so nothing reads a position that a reader could misnumber.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shardcron.rules.takeover import Dispatch

# The longest single wait for a heap's top. A push wakes the waiter anyway; the bound only keeps a
# slot far ahead (year 9999 is 2.5e11 s away) within what Condition.wait takes (threading.TIMEOUT_MAX).
MAX_WAIT_S = 3600.0


@dataclass(slots=True)
class ClaimDue:
    """A job's next slot, due in the claim heap ``lookahead`` before the slot itself."""

    due_ms: int
    shard: int
    fence: int
    job_id: str
    gen: int  # the JobEntry generation that pushed it
    slot_ms: int
    # A slot an old definition still owed when the job changed (rules/left_owed.py): claimed whatever the
    # job's gen is now, and followed by no next claim.
    left_owed: bool = False


@dataclass(slots=True)
class DispatchDue:
    """A claimed slot, due in the dispatch heap at the slot (or when it may be tried again)."""

    due_ms: int
    shard: int
    fence: int
    dispatch: Dispatch


class TimerHeap:
    """A heap of ``ClaimDue`` or ``DispatchDue`` under one condition: pushers notify, one loop pops.

    ``on_new_top``: called (outside the heap's lock) when a push brings a new top, for a loop that waits
    on something other than the heap's condition (the tick writer waits for the claim heap so).
    """

    def __init__(self, on_new_top: Callable[[], None] | None = None):
        self._heap: list = []
        self._seq = itertools.count()  # drawn with the condition held
        self.cond = threading.Condition()
        self._on_new_top = on_new_top

    def push_dispatch(self, due_ms: int, shard: int, fence: int, d: Dispatch) -> None:
        self.push_many([DispatchDue(due_ms, shard, fence, d)])

    def push_many(self, entries: Iterable[ClaimDue | DispatchDue]) -> None:
        """Push every entry under one lock; wake the loop once, and only if the top changed.

        The loop sleeps until the old top is due: only a new top changes that. (Waking it for
        every PutJob cost the leader a thread switch and a GIL hand-off per call; taking the
        lock per entry of a claimed burst cost a lock round and a notify per tick.)
        """
        at: dict[int, list] = {}
        for e in entries:
            same = at.get(e.due_ms)
            if same is None:
                at[e.due_ms] = [e]
            else:
                same.append(e)
        with self.cond:
            old_top = self._heap[0] if self._heap else None
            for due_ms, group in at.items():
                heapq.heappush(self._heap, (due_ms, next(self._seq), group))
            new_top = bool(self._heap) and self._heap[0] is not old_top
            if new_top:
                self.cond.notify()
        if new_top and self._on_new_top is not None:
            self._on_new_top()

    def push_again(self, entries: list, due_ms: int) -> None:
        """Entries taken off but not handled (the store was down): back in, due at ``due_ms``."""
        with self.cond:
            for e in entries:
                e.due_ms = due_ms
            if entries:
                heapq.heappush(self._heap, (due_ms, next(self._seq), list(entries)))
            self.cond.notify()
        if self._on_new_top is not None:
            self._on_new_top()

    def top(self):
        with self.cond:
            return self._heap[0][2][0] if self._heap else None

    def take_due(self, now_ms: float, slack_ms: int) -> list:
        """Every entry due by ``now_ms + slack_ms``, in order, without waiting."""
        with self.cond:
            return self._take(now_ms + slack_ms)

    def wait_due(self, now_ms: Callable[[], float], slack_ms: int, closing: Callable[[], bool]) -> list:
        """Wait until the top is due (within ``slack_ms``), then take everything due; [] when closing.

        One timed ``Condition.wait`` to the top's instant, cut short only by a push that brings an
        earlier top. ``now_ms`` may carry the fraction of a millisecond (``clock.wall_ms_exact``):
        the wait then ends at the due instant, not up to a millisecond after it.
        """
        with self.cond:
            while not closing():
                now = now_ms()
                heap = self._heap
                if heap and heap[0][0] <= now + slack_ms:
                    return self._take(now + slack_ms)
                # At most MAX_WAIT_S: a slot centuries ahead would overflow threading's TIMEOUT_MAX.
                self.cond.wait(None if not heap else min(MAX_WAIT_S, (heap[0][0] - now - slack_ms) / 1000.0))
        return []

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()
        if self._on_new_top is not None:
            self._on_new_top()

    def _take(self, until_ms: float) -> list:
        heap, due = self._heap, []
        while heap and heap[0][0] <= until_ms:
            due.extend(heapq.heappop(heap)[2])
        return due
