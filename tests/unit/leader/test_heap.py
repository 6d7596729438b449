"""The timer heap's waits and takes (leader/heap.py), with a clock the test moves."""

from __future__ import annotations

import threading
import time

from shardcron.clock import wall_ms_exact
from shardcron.leader.heap import TimerHeap
from shardcron.model import SlotRef
from shardcron.rules.takeover import Dispatch


def _d(job: str, at: int) -> Dispatch:
    return Dispatch(SlotRef(job, at), 1)


def test_wait_due_takes_what_is_due_at_once():
    heap = TimerHeap()
    heap.push_dispatch(5, 0, 1, _d("due", 5))
    heap.push_dispatch(9, 0, 1, _d("later", 9))
    assert [e.dispatch.slot.job_id for e in heap.wait_due(lambda: 5, 0, lambda: False)] == ["due"]
    assert heap.top().dispatch.slot.job_id == "later", "the entry not due stays"


def test_wait_due_wakes_at_the_due_instant_not_a_millisecond_after():
    heap = TimerHeap()
    due = int(wall_ms_exact()) + 60
    heap.push_dispatch(due, 0, 1, _d("soon", due))
    got = heap.wait_due(wall_ms_exact, 0, lambda: False)
    woke = wall_ms_exact()
    assert [e.dispatch.slot.job_id for e in got] == ["soon"]
    assert due <= woke < due + 50, "one timed wait to the instant (generous bound: a loaded machine)"


def test_a_push_of_an_earlier_top_wakes_the_waiter():
    heap = TimerHeap()
    now = int(wall_ms_exact())
    heap.push_dispatch(now + 60_000, 0, 1, _d("far", now + 60_000))
    threading.Timer(0.05, lambda: heap.push_dispatch(now, 0, 1, _d("now", now))).start()
    began = time.monotonic()
    assert [e.dispatch.slot.job_id for e in heap.wait_due(wall_ms_exact, 0, lambda: False)] == ["now"]
    assert time.monotonic() - began < 5


def test_wait_due_returns_nothing_when_closing():
    heap = TimerHeap()
    closing = threading.Event()
    threading.Timer(0.05, lambda: (closing.set(), heap.wake())).start()
    assert heap.wait_due(wall_ms_exact, 0, closing.is_set) == []


def test_take_due_takes_in_order_up_to_now():
    heap = TimerHeap()
    for job, at in (("a", 1), ("b", 1), ("c", 3), ("d", 9)):
        heap.push_dispatch(at, 0, 1, _d(job, at))
    assert [e.dispatch.slot.job_id for e in heap.take_due(1, 0)] == ["a", "b"]
    assert [e.dispatch.slot.job_id for e in heap.take_due(3, 0)] == ["c"]
    assert [e.dispatch.slot.job_id for e in heap.take_due(3, 6)] == ["d"], "within the slack"
    assert heap.top() is None
