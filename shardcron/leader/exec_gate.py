"""The node's executor slots, and the starts that wait for one (fair execution under overload).

A node runs at most ``slots`` executions at once (``--executor-slots``). A due
start that finds every slot busy waits here, keyed by its job's namespace, and
each execution that ends hands its slot to the next waiting start. Which one is
the queue's decision: ``fair_queue.FairQueue`` (weighted fair queuing across
namespaces, ``--fair-queuing on``) or ``FifoQueue`` (first come, first served,
the baseline, ``off``). Both keep FIFO order within a namespace.

Rules (``Scheduler`` calls these; the gate itself reads no clock and does no I/O):

- ``open()`` is the hot path's one check, without the lock: nothing waits, a
  slot is free and no namespace has a ``max_running`` quota. A noop start that
  finds the gate open completes at once and takes no slot (it ends as it starts).
- ``enter(ns, item, now, holds)``, under the lock: the start may go now (True;
  it takes a slot when ``holds``, i.e. it will run on an executor) or it is
  queued (False). While anything waits, every start queues, noop included,
  so nothing overtakes what waits and the queue's order decides.
- ``next(now)``: a free slot for the next waiting start the quotas allow
  (``quotas.check_start`` with its namespace's running count here): it is
  returned holding the slot. The caller starts it, or gives the slot back with
  ``leave`` when it did not become an execution (a noop, a skip, a lost shard).
- ``leave(ns)``: an execution ended; its slot is free.
- ``remove_where(pred)``: the waiting starts of a shard this node stops leading,
  handed back to the caller (never dropped).

Headroom (fair queuing only; why queue order alone is not enough:
``docs/explanation/fairness.md``). The gate keeps a few slots
(``headroom``: 5% of them, at least one) free for namespaces below their share:
a namespace that already holds its share of the slots (``slots * weight / sum of
the active namespaces' weights``) may not take one of the last ``headroom`` free
slots while another namespace is active (running, waiting, or seen starting in the
last ``ACTIVE_S``). Alone, a namespace takes every slot; first-come has no headroom.

Counts: ``busy`` (slots held) and ``waiting`` are plain ints the hot path reads
without the lock; they change only under it.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from shardcron.rules.fair_queue import DEFAULT_WEIGHT, FairQueue, Served
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.rules.quotas import Quota, check_start

T = TypeVar("T")

DEFAULT_SLOTS = 1000
HEADROOM_FRACTION = 0.05  # of the slots, kept for namespaces below their share while one is above it
ACTIVE_S = 2.0  # a namespace seen starting this recently is active: it counts in the shares


class FifoQueue(Generic[T]):
    """First come, first served across namespaces: the baseline ``--fair-queuing off`` runs with.

    The same interface as ``FairQueue``. One deque per namespace, each item numbered
    on arrival; ``pop`` serves the oldest head among the namespaces ``eligible``
    allows, so a namespace at its ``max_running`` keeps its items' places. O(number
    of waiting namespaces) per pop: a handful.
    """

    def __init__(self) -> None:
        self._queues: dict[str, deque[tuple[int, T, float]]] = {}
        self._seq = itertools.count()
        self._size = 0

    def set_weight(self, namespace: str, weight: float) -> None:
        """Weights mean nothing first-come; accepted so the gate need not know which queue it has."""

    def enqueue(self, namespace: str, item: T, now_s: float) -> None:
        self._queues.setdefault(namespace, deque()).append((next(self._seq), item, now_s))
        self._size += 1

    def pop(self, now_s: float, eligible: Callable[[str], bool] | None = None) -> Served[T] | None:
        best = None
        for namespace, q in self._queues.items():
            if (best is None or q[0][0] < self._queues[best][0][0]) and (eligible is None or eligible(namespace)):
                best = namespace
        if best is None:
            return None
        q = self._queues[best]
        _, item, at = q.popleft()
        if not q:
            del self._queues[best]
        self._size -= 1
        return Served(best, item, at, max(0.0, now_s - at))

    def remove_where(self, predicate: Callable[[str, T], bool]) -> list[tuple[str, T]]:
        removed = []
        for namespace, q in list(self._queues.items()):
            kept = deque(e for e in q if not predicate(namespace, e[1]))
            removed += [(namespace, e[1]) for e in q if predicate(namespace, e[1])]
            self._size -= len(q) - len(kept)
            if kept:
                self._queues[namespace] = kept
            else:
                del self._queues[namespace]
        return removed

    def __len__(self) -> int:
        return self._size

    def waiting(self, namespace: str) -> int:
        q = self._queues.get(namespace)
        return len(q) if q else 0

    def namespaces(self) -> Iterator[str]:
        return iter(self._queues)


class ExecGate(Generic[T]):
    """``slots`` executions at once; the rest wait, fairly (``fair``) or first-come. See the module doc."""

    def __init__(self, slots: int = DEFAULT_SLOTS, *, fair: bool = True):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"executor slots must be a whole number of at least 1, got {slots!r}")
        self.slots = slots
        self.fair = fair
        self.busy = 0  # slots held by executions (read without the lock on the hot path)
        self.waiting = 0  # starts queued (likewise)
        self.limited = False  # some namespace has a max_running quota: every start asks ``enter``
        self._queue: FairQueue[T] | FifoQueue[T] = FairQueue() if fair else FifoQueue()
        self._running: dict[str, int] = {}  # namespace -> slots its executions hold
        self._quotas: dict[str, Quota] = {}  # namespaces with a max_running quota
        self._weighted: set[str] = set()  # namespaces given a weight (to reset when they lose it)
        self.headroom = max(1, int(slots * HEADROOM_FRACTION)) if fair else 0
        self._seen: dict[str, float] = {}  # namespace -> when it last asked to start (fair only)
        self._lock = threading.Lock()

    # -- the hot path ---------------------------------------------------------------------

    def open(self) -> bool:
        """Nothing waits, a slot is free, no quota to check: a noop may complete at once. No lock."""
        return not self.waiting and self.busy < self.slots and not self.limited

    # -- under the lock -------------------------------------------------------------------

    def enter(self, namespace: str, item: T, now_s: float, *, holds: bool) -> bool:
        """True: go now (a slot taken when ``holds``); False: ``item`` waits in the queue."""
        with self._lock:
            if self.fair:
                self._seen[namespace] = now_s
            if (
                self.waiting
                or self.busy >= self.slots
                or not self._may_start(namespace)
                or (holds and not self._within_share(namespace, now_s))
            ):
                self._queue.enqueue(namespace, item, now_s)
                self.waiting += 1
                return False
            if holds:
                self._take(namespace)
            return True

    def next(self, now_s: float) -> Served[T] | None:
        """The next waiting start the quotas allow, holding a free slot; None when no slot is free or none may go."""
        with self._lock:
            if not self.waiting or self.busy >= self.slots:
                return None
            eligible = None
            if self.fair and self.slots - self.busy <= self.headroom:
                eligible = lambda ns: self._may_start(ns) and self._within_share(ns, now_s)  # noqa: E731
            elif self._quotas:
                eligible = self._may_start
            served = self._queue.pop(now_s, eligible)
            if served is not None:
                self.waiting -= 1
                self._take(served.namespace)
            return served

    def leave(self, namespace: str) -> None:
        """A slot ``namespace`` held is free again (its execution ended, or a served start did not run)."""
        with self._lock:
            self.busy -= 1
            left = self._running.get(namespace, 0) - 1
            if left > 0:
                self._running[namespace] = left
            else:
                self._running.pop(namespace, None)

    def remove_where(self, predicate: Callable[[str, T], bool]) -> list[tuple[str, T]]:
        """Take the waiting starts ``predicate(namespace, item)`` picks out of the queue, and hand them back."""
        with self._lock:
            removed = self._queue.remove_where(predicate)
            self.waiting -= len(removed)
            return removed

    def set_settings(self, settings: Mapping[str, NamespaceSettings]) -> None:
        """Every namespace's weight and quota; one not in ``settings`` runs with the defaults (weight 1, no limit).
        A waiting start keeps its place; a changed weight applies from its namespace's next tag."""
        with self._lock:
            for namespace in self._weighted - set(settings):
                self._queue.set_weight(namespace, DEFAULT_WEIGHT)
            for namespace, s in settings.items():
                self._queue.set_weight(namespace, s.weight)
            self._weighted = set(settings)
            self._quotas = {ns: s.quota for ns, s in settings.items() if s.quota.max_running is not None}
            self.limited = bool(self._quotas)

    # -- reading --------------------------------------------------------------------------

    def running(self, namespace: str) -> int:
        with self._lock:
            return self._running.get(namespace, 0)

    def waiting_by_namespace(self) -> dict[str, float]:  # a gauge's values: the starts waiting, by namespace
        with self._lock:
            return {ns: self._queue.waiting(ns) for ns in self._queue.namespaces()}

    # -- inside (lock held) ---------------------------------------------------------------

    def _take(self, namespace: str) -> None:
        self.busy += 1
        self._running[namespace] = self._running.get(namespace, 0) + 1

    def _within_share(self, namespace: str, now_s: float) -> bool:
        """May ``namespace`` take a slot now, as far as the headroom goes (see the module doc)?"""
        if self.slots - self.busy - 1 >= self.headroom:
            return True  # the common case: plenty free, no share to compute
        active = self._active(now_s)
        active.add(namespace)
        if len(active) == 1:
            return True
        queue = self._queue
        assert isinstance(queue, FairQueue)  # the headroom exists only with fair queuing
        weight = queue.weight
        share = self.slots * weight(namespace) / sum(weight(ns) for ns in active)
        return self._running.get(namespace, 0) < share

    def _active(self, now_s: float) -> set[str]:
        for namespace in [ns for ns, at in self._seen.items() if now_s - at > ACTIVE_S]:
            del self._seen[namespace]
        return set(self._running) | set(self._queue.namespaces()) | set(self._seen)

    def _may_start(self, namespace: str) -> bool:
        quota = self._quotas.get(namespace)
        return quota is None or check_start(namespace, quota, self._running.get(namespace, 0)) is None


__all__ = ["DEFAULT_SLOTS", "ExecGate", "FifoQueue"]
