"""Weighted fair queuing of the starts that wait for an executor, across namespaces.

When every executor of a node is busy, due starts wait here, and each executor
that frees takes the next one with ``pop``. First-come would let one namespace's
burst of 10,000 slots delay everyone; here each backlogged namespace gets a share
of the starts in proportion to its weight (default 1), whatever the others
enqueue, and in its own order (FIFO within a namespace). Nothing is dropped:
every item waits until it is popped or handed back by ``remove_where``.

Self-clocked fair queuing (why not deficit round robin: docs/explanation/fairness.md).

Tags. ``V``, the virtual time, is the finish tag of the last item popped. A
namespace's head item carries a finish tag ``F``; ``pop`` serves the smallest
(ties: the tag set earliest), sets ``V = F``, and the next item of that
namespace gets ``F + 1/weight``. A namespace with weight w thus gets w starts
for every 1 of a weight-1 namespace while both wait.

State machine, per namespace:

    IDLE        no item waits; not in the heap; nothing remembered but its weight.
    BACKLOGGED  items wait in a deque; its head is in the heap with finish tag F.

State transitions:

    IDLE -> BACKLOGGED        enqueue: F = V + 1/weight, pushed on the heap. An idle
                              namespace banks no credit: V is already past every tag
                              it had, so it starts level with the others, not ahead.
    BACKLOGGED -> BACKLOGGED  enqueue: appended behind its deque (tags unchanged).
                              pop of its head, more waiting: V = F; F += 1/weight.
    BACKLOGGED -> IDLE        pop of its last item: V = F, the namespace is forgotten.
                              remove_where taking its last item.
    (queue empty)             V resets to 0: no namespace holds a tag, so nothing
                              compares with the old V, and tags stay small numbers.

No starvation: a namespace with weight w whose head has tag F is served once
every other namespace's head passes F, that is after at most
``sum over others of (w_i / w + 1)`` other starts, however many they enqueue.

``pop(now, eligible)`` skips namespaces the caller rules out for now (one at its
``max_running`` quota): they keep their tags and their place, and go first when
they may run again. Each popped item reports its wait (``Served.waited_s``), for
``shardcron_namespace_wait_seconds``. Times are the caller's monotonic seconds:
the queue reads no clock, so it is pure and deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_WEIGHT = 1.0


@dataclass(frozen=True)
class Served(Generic[T]):
    """An item that leaves the queue, and how long it waited in it."""

    namespace: str
    item: T
    enqueued_at_s: float
    waited_s: float


@dataclass
class _Backlog(Generic[T]):
    items: deque[tuple[T, float]]  # (item, enqueued at), oldest first
    finish: float  # the head's virtual finish tag


class FairQueue(Generic[T]):
    """Waiting starts of many namespaces, served by weighted fair queuing (see the module docstring)."""

    def __init__(self, weights: Mapping[str, float] | None = None, default_weight: float = DEFAULT_WEIGHT):
        self._default = _check_weight(default_weight, "the default weight")
        self._weights: dict[str, float] = {}
        for namespace, weight in (weights or {}).items():
            self.set_weight(namespace, weight)
        self._virtual = 0.0
        self._backlogs: dict[str, _Backlog[T]] = {}
        self._heap: list[tuple[float, int, str]] = []  # (head's finish tag, tie-breaker, namespace)
        self._ties = itertools.count()
        self._size = 0

    # -- weights ------------------------------------------------------------------------

    def set_weight(self, namespace: str, weight: float) -> None:
        """A namespace's share; applies from its next tag (the head waiting now keeps its own)."""
        self._weights[namespace] = _check_weight(weight, f"the weight of namespace {namespace!r}")

    def weight(self, namespace: str) -> float:
        return self._weights.get(namespace, self._default)

    # -- the queue ----------------------------------------------------------------------

    def enqueue(self, namespace: str, item: T, now_s: float) -> None:
        backlog = self._backlogs.get(namespace)
        if backlog is None:  # IDLE -> BACKLOGGED
            backlog = self._backlogs[namespace] = _Backlog(deque(), self._virtual + 1 / self.weight(namespace))
            self._push(namespace, backlog.finish)
        backlog.items.append((item, now_s))
        self._size += 1

    def pop(self, now_s: float, eligible: Callable[[str], bool] | None = None) -> Served[T] | None:
        """The next item by fair share among namespaces ``eligible`` allows (all when None); None if none waits."""
        skipped: list[tuple[float, int, str]] = []
        try:
            while self._heap:
                entry = heapq.heappop(self._heap)
                if eligible is None or eligible(entry[2]):
                    return self._serve(entry[2], now_s)
                skipped.append(entry)
            return None
        finally:
            for entry in skipped:  # their tags and their order stay as they were
                heapq.heappush(self._heap, entry)

    def remove_where(self, predicate: Callable[[str, T], bool]) -> list[tuple[str, T]]:
        """Take out the waiting items ``predicate(namespace, item)`` picks (a shard this node no longer
        leads), oldest first per namespace, and hand them back: the caller decides their fate, none vanish.
        O(n): for rare events only."""
        removed: list[tuple[str, T]] = []
        for namespace, backlog in list(self._backlogs.items()):
            kept: deque[tuple[T, float]] = deque()
            for it, at in backlog.items:
                if predicate(namespace, it):
                    removed.append((namespace, it))
                else:
                    kept.append((it, at))
            if len(kept) == len(backlog.items):
                continue
            self._size -= len(backlog.items) - len(kept)
            backlog.items = kept  # a new head keeps the old head's tag: its place was earned
            if not kept:  # BACKLOGGED -> IDLE
                del self._backlogs[namespace]
                self._heap = [e for e in self._heap if e[2] != namespace]
                heapq.heapify(self._heap)
        self._reset_if_empty()
        return removed

    def __len__(self) -> int:
        return self._size

    def waiting(self, namespace: str) -> int:
        backlog = self._backlogs.get(namespace)
        return len(backlog.items) if backlog else 0

    def namespaces(self) -> Iterator[str]:
        """The namespaces with items waiting (BACKLOGGED)."""
        return iter(self._backlogs)

    # -- inside -------------------------------------------------------------------------

    def _push(self, namespace: str, finish: float) -> None:
        heapq.heappush(self._heap, (finish, next(self._ties), namespace))

    def _serve(self, namespace: str, now_s: float) -> Served[T]:
        backlog = self._backlogs[namespace]
        item, enqueued_at = backlog.items.popleft()
        self._size -= 1
        self._virtual = backlog.finish
        if backlog.items:  # BACKLOGGED -> BACKLOGGED
            backlog.finish += 1 / self.weight(namespace)
            self._push(namespace, backlog.finish)
        else:  # BACKLOGGED -> IDLE
            del self._backlogs[namespace]
            self._reset_if_empty()
        return Served(namespace, item, enqueued_at, max(0.0, now_s - enqueued_at))

    def _reset_if_empty(self) -> None:
        if not self._backlogs:
            self._virtual = 0.0


def _check_weight(weight: float, what: str) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"{what} must be a number above 0, got {weight!r}")
    return float(weight)


__all__ = ["DEFAULT_WEIGHT", "FairQueue", "Served"]
