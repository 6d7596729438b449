"""The led shards' deadlines: each slot's judged when it comes due, by the one writer of tick rows.

A slot of a job with deadlines gets its judgements (``rules/deadlines.py``) when it is claimed, and a
new leader gets those of its shard's slots left unjudged (``take_over``): the slots its predecessor
claimed and did not judge, and the ones caught up or skipped on the takeover. They wait in one heap,
by the wall time they are due. This is a stream of the tick writer (``tick_writer.py``), after the
results: a judgement due now is written after every result queued before it, so a tick that ended
just before its deadline is seen ended. A judgement is a fenced conditional update
(``store/deadlines.py``): a miss is recorded on the row once, and only the update that records it
raises it: counted (``shardcron_deadline_missed_total``), logged, and told to the listeners (the
notifier, which sends ``on_deadline``).

When the store is unavailable the due judgements stay queued and are tried again after a rest;
when the shard's fence moved they are dropped: the shard's new leader judges them.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from sqlalchemy.engine import Engine

from shardcron import metrics
from shardcron.errors import StoreUnavailable
from shardcron.jobkey import split_key
from shardcron.model import Job
from shardcron.rules.deadlines import Judgement, has_deadlines, judgements_for, lookback_since_ms, missed
from shardcron.store import deadlines as deadline_store

log = logging.getLogger(__name__)

MAX_BATCH = 500  # judgements per transaction
RETRY_S = 1.0  # after the store was found unavailable

Listener = Callable[[list[tuple[int, int, Judgement]]], None]  # (shard, fence, judgement) of new misses


class DeadlineWatch:
    """The deadlines' stream of the tick writer. ``is_led(shard, fence)``: whether that leadership is
    still this node's (a judgement of one that ended is dropped: its successor judges it)."""

    def __init__(self, engine: Engine, now_ms: Callable[[], int], is_led: Callable[[int, int], bool]):
        self._engine = engine
        self._now_ms = now_ms
        self._is_led = is_led
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, int, int, Judgement]] = []  # (judge at, seq, shard, fence, judgement)
        self._seq = itertools.count()
        self._retry_at = 0.0
        self.listeners: list[Listener] = []
        self.wake: Callable[[], None] = lambda: None  # set by the writer

    # -- what to judge ---------------------------------------------------------------------

    def watch(self, shard: int, fence: int, judgements: Iterable[Judgement]) -> None:
        with self._lock:
            old_top = self._heap[0] if self._heap else None
            for j in judgements:
                heapq.heappush(self._heap, (j.judge_at_ms, next(self._seq), shard, fence, j))
            new_top = bool(self._heap) and self._heap[0] is not old_top
        if new_top:
            self.wake()

    def slots_claimed(self, shard: int, fence: int, job: Job, slots: Iterable[int]) -> None:
        self.watch(shard, fence, (j for slot in slots for j in judgements_for(job, slot)))

    def take_over(self, shard: int, fence: int, jobs: Iterable[Job]) -> int:
        """Watch the shard's slots left unjudged (claimed by a predecessor, caught up, skipped); returns how
        many judgements that queued. Reads the store: called on taking the shard, before it ticks."""
        with_deadlines = {j.id: j for j in jobs if has_deadlines(j)}
        if not with_deadlines:
            return 0
        now = self._now_ms()
        since = {job_id: lookback_since_ms(job, now) for job_id, job in with_deadlines.items()}
        queued: list[Judgement] = []
        for row in deadline_store.unjudged(self._engine, shard, since):
            for j in judgements_for(with_deadlines[row.job_id], row.scheduled_at_ms):
                # Judged already as met, it would be met again: only the open ones that may be missed.
                if j.kind in row.open_kinds and (j.judge_at_ms > now or missed(j, row.state)):
                    queued.append(j)
        self.watch(shard, fence, queued)
        return len(queued)

    # -- the writer's stream ------------------------------------------------------------------

    def ready_at(self, now: float, closing: bool) -> float | None:
        if closing:
            return None
        with self._lock:
            if not self._heap:
                return None
            top = self._heap[0][0]
        return max(now + (top - self._now_ms()) / 1000, self._retry_at)

    def write_next(self) -> StoreUnavailable | None:
        now = self._now_ms()
        due: list[tuple[int, int, int, int, Judgement]] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now and len(due) < MAX_BATCH:
                due.append(heapq.heappop(self._heap))
        batches: dict[tuple[int, int], list[Judgement]] = defaultdict(list)
        for _, _, shard, fence, j in due:
            if self._is_led(shard, fence):
                batches[(shard, fence)].append(j)
        if not batches:
            return None
        try:
            out = deadline_store.record_misses(self._engine, batches, now_ms=now)
        except StoreUnavailable as e:
            with self._lock:
                for entry in due:
                    heapq.heappush(self._heap, entry)
            self._retry_at = time.monotonic() + RETRY_S
            return e
        for shard, stored in out.fenced_out.items():
            log.info(
                "shard %d: deadlines not judged here: the fence moved to %s (the new leader judges them)",
                shard,
                stored,
                extra={"shard": shard},
            )
        misses = [(shard, fence, j) for shard, j in out.value for fence in (_fence_of(batches, shard),)]
        for shard, fence, j in misses:
            key = split_key(j.job_id)
            metrics.deadline_missed.labels(key.namespace, key.id, j.kind.value).inc()
            log.warning(
                "shard %d: job %s missed its %s at slot %d (due %d ms after it)",
                shard,
                j.job_id,
                j.kind.value,
                j.scheduled_at_ms,
                j.due_ms - j.scheduled_at_ms,
                extra={"shard": shard, "job": j.job_id, "fence": fence},
            )
        if misses:
            for listener in self.listeners:
                listener(misses)
        return None

    def closed(self) -> None:
        with self._lock:
            self._heap.clear()


def _fence_of(batches: dict[tuple[int, int], list[Judgement]], shard: int) -> int:
    return next(fence for (s, fence) in batches if s == shard)


__all__ = ["DeadlineWatch"]
