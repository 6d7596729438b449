"""``OneAtATime`` runs what it is given in turn on the pool it borrows: never two at once, in submission
order, so callers that coincide take one worker of the pool, not one each; errors reach the caller; a pool
shut down with a turn queued cancels what waited for it."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, ThreadPoolExecutor

import pytest

from shardcron.runtime.one_at_a_time import OneAtATime


def test_callers_that_coincide_take_turns_on_one_worker_in_submission_order():
    pool = ThreadPoolExecutor(8, thread_name_prefix="lane-test")
    lane = OneAtATime(pool)
    release = threading.Event()
    lock = threading.Lock()
    running, most_at_once, order, threads = 0, 0, [], set()

    def call(i: int) -> int:
        nonlocal running, most_at_once
        with lock:
            running += 1
            most_at_once = max(most_at_once, running)
            order.append(i)
            threads.add(threading.current_thread().name)
        release.wait(10)
        with lock:
            running -= 1
        return i * i

    try:
        futures = [lane.submit(call, i) for i in range(20)]
        release.set()
        assert [f.result(10) for f in futures] == [i * i for i in range(20)]
        assert most_at_once == 1 and order == list(range(20))
        assert len(threads) == 1
        # The pool started one worker for them all.
        assert [t.name for t in threading.enumerate() if t.name.startswith("lane-test")] == ["lane-test_0"]
    finally:
        pool.shutdown(wait=True)


def test_an_error_reaches_its_caller_and_the_next_call_still_runs():
    pool = ThreadPoolExecutor(2)
    lane = OneAtATime(pool)

    def boom() -> None:
        raise ValueError("boom")

    try:
        with pytest.raises(ValueError, match="boom"):
            lane.submit(boom).result(10)
        assert lane.submit(lambda: 42).result(10) == 42
    finally:
        pool.shutdown(wait=True)


def test_a_pool_shut_down_with_a_turn_queued_cancels_what_waited_and_refuses_more():
    pool = ThreadPoolExecutor(1)
    started, release = threading.Event(), threading.Event()

    def hold() -> None:  # the pool's one worker, busy with a call of its own
        started.set()
        release.wait(10)

    pool.submit(hold)
    assert started.wait(10)
    lane = OneAtATime(pool)
    waiting = lane.submit(lambda: 1)  # its turn is queued behind hold on the pool
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    with pytest.raises(CancelledError):
        waiting.result(10)
    with pytest.raises(RuntimeError):
        lane.submit(lambda: 2)
