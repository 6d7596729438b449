"""The timer heap's waits and takes (leader/heap.py), with a clock the test moves."""

from __future__ import annotations

import time

from shardcron.leader.heap import TimerHeap
from shardcron.model import SlotRef
from shardcron.rules.takeover import Dispatch


def _d(job: str, at: int) -> Dispatch:
    return Dispatch(SlotRef(job, at), 1)


def test_wait_due_returns_nothing_once_idle_has_passed_with_nothing_due():
    heap = TimerHeap()
    heap.push_dispatch(10_000, 0, 1, _d("far", 10_000))
    began = time.monotonic()
    assert heap.wait_due(lambda: 0, 0, lambda: False, idle_s=0.05) == []
    assert time.monotonic() - began >= 0.05
    assert heap.next_due_ms() == 10_000, "the entry not due stays"


def test_wait_due_takes_what_is_due_without_waiting_for_idle():
    heap = TimerHeap()
    heap.push_dispatch(5, 0, 1, _d("due", 5))
    assert [e.dispatch.slot.job_id for e in heap.wait_due(lambda: 5, 0, lambda: False, idle_s=60)] == ["due"]
    assert heap.next_due_ms() is None


def test_take_more_due_adds_to_what_the_loop_has_in_hand():
    heap = TimerHeap()
    for job, at in (("a", 1), ("b", 1), ("c", 3), ("d", 9)):
        heap.push_dispatch(at, 0, 1, _d(job, at))
    assert len(heap.take_due(1, 0)) == 2
    assert heap.bursts()[0] == 2
    assert [e.dispatch.slot.job_id for e in heap.take_more_due(3)] == ["c"]
    assert heap.bursts()[0] == 3, "the burst taken first is still in hand"
    heap.handled()
    assert heap.bursts() == (0, 9, 1)
