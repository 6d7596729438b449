"""A ``PassTask`` waits on the loop and runs its passes on the pool: the first at once, one per wake, one when
its delay ends and a pass is owed; a raising pass is the node's death, a stop is not, and a stop waits for the
pass under way."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from shardcron.dev.testing.cluster import wait_until
from shardcron.runtime.lifeline import Lifeline
from shardcron.runtime.node_loop import NodeLoop
from shardcron.runtime.pass_task import PassTask


class Passes:
    """A pass that records the thread it ran on and returns ``delay``."""

    def __init__(self, delay: float | None):
        self.delay = delay
        self.threads: list[str] = []
        self.lock = threading.Lock()

    def __call__(self) -> float | None:
        with self.lock:
            self.threads.append(threading.current_thread().name)
        return self.delay

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.threads)


@pytest.fixture
def loop():
    node_loop = NodeLoop("test-loop").start()
    yield node_loop
    node_loop.close()


@pytest.fixture
def pool():
    workers = ThreadPoolExecutor(2, thread_name_prefix="api")
    yield workers
    workers.shutdown(wait=True)


def test_the_first_pass_runs_at_once_on_the_pool_and_each_wake_brings_one(loop, pool):
    passes = Passes(delay=None)  # no timer: only wakes
    task = PassTask("settings", loop, passes).start(pool)
    try:
        wait_until(lambda: passes.count == 1, 10, what="the first pass")
        for woken in (2, 3):
            task.wake()
            wait_until(lambda: passes.count == woken, 10, what=f"pass {woken}, after a wake")
        assert all(name.startswith("api_") for name in passes.threads), passes.threads  # never on the loop
    finally:
        task.stop()


def test_the_delay_brings_a_pass_only_when_one_is_owed(loop, pool):
    passes = Passes(delay=0.01)
    owed = threading.Event()
    asked = threading.Semaphore(0)

    def is_owed() -> bool:
        asked.release()
        return owed.is_set()

    task = PassTask("notifier", loop, passes, owed=is_owed).start(pool)
    try:
        wait_until(lambda: passes.count == 1, 10, what="the first pass")
        for _ in range(5):  # the delay ended five times, and nothing was owed
            assert asked.acquire(timeout=10)
        assert passes.count == 1
        owed.set()
        wait_until(lambda: passes.count >= 3, 10, what="passes once owed")
    finally:
        task.stop()


def test_a_raising_pass_is_a_death_reported_once_and_a_stop_is_none(loop, pool):
    deaths: list[tuple[str, BaseException | None]] = []
    lifeline = Lifeline(lambda name, error: deaths.append((name, error)))

    def boom() -> float | None:
        raise ValueError("boom")

    PassTask("notifier", loop, boom, lifeline=lifeline).start(pool)
    wait_until(lambda: deaths, 10, what="the death reported")
    [(name, error)] = deaths
    assert name == "notifier" and isinstance(error, ValueError)

    quiet = Lifeline(lambda name, error: deaths.append((name, error)))
    stopped = PassTask("settings", loop, Passes(delay=None), lifeline=quiet).start(pool)
    stopped.stop()
    stopped.stop()  # a second stop does nothing
    assert len(deaths) == 1


def test_a_stop_waits_for_the_pass_under_way(loop, pool):
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow_pass() -> float | None:
        entered.set()
        release.wait(10)
        finished.set()
        return None

    task = PassTask("settings", loop, slow_pass).start(pool)
    assert entered.wait(10)
    threading.Timer(0.2, release.set).start()
    task.stop()
    assert finished.is_set()  # stop returned only once the pass had ended
