"""The lifeline reports a worker's death once: a raising thread or task, or one that returns while it should
not; never one that returns because the node is stopping, or a task that was cancelled."""

from __future__ import annotations

import asyncio
import threading

import pytest

from shardcron.dev.testing.cluster import wait_until
from shardcron.runtime.lifeline import Lifeline, stack_of


class Deaths:
    def __init__(self):
        self.seen: list[tuple[str, BaseException | None]] = []
        self.lock = threading.Lock()

    def __call__(self, name: str, error: BaseException | None) -> None:
        with self.lock:
            self.seen.append((name, error))


def run_thread(lifeline: Lifeline, target, name: str, **kw) -> None:
    t = lifeline.thread(target, name, **kw)
    t.start()
    t.join(10)
    assert not t.is_alive()


def boom():
    raise ValueError("boom")


def test_a_raising_thread_is_reported_once_with_its_name_and_error():
    deaths = Deaths()
    lifeline = Lifeline(deaths)
    run_thread(lifeline, boom, "claimer")
    run_thread(lifeline, boom, "dispatcher")  # dies of the first: not reported again
    [(name, error)] = deaths.seen
    assert name == "claimer" and isinstance(error, ValueError) and str(error) == "boom"
    assert lifeline.died == "claimer"


@pytest.mark.parametrize(
    ("may_end", "stopping", "reported"),
    [
        (False, False, True),  # a loop that returned on its own: a dead worker
        (False, True, False),  # it returned because the node is stopping
        (True, False, False),  # it may end (a session's keep-alive, once the lease is lost)
    ],
)
def test_a_thread_that_returns_is_a_death_only_when_nothing_let_it(may_end, stopping, reported):
    deaths = Deaths()
    lifeline = Lifeline(deaths)
    if stopping:
        lifeline.stopping.set()
    run_thread(lifeline, lambda: None, "recorder", may_end=may_end)
    assert deaths.seen == ([("recorder", None)] if reported else [])


def test_a_thread_that_raises_while_stopping_or_allowed_to_end_is_still_reported():
    deaths = Deaths()
    lifeline = Lifeline(deaths)
    lifeline.stopping.set()
    run_thread(lifeline, boom, "n1-keepalive", may_end=True)
    assert [name for name, _ in deaths.seen] == ["n1-keepalive"]


def test_the_arguments_reach_the_target():
    got = []
    run_thread(Lifeline(Deaths()), got.append, "loop", args=(7,), may_end=True)
    assert got == [7]


@pytest.mark.parametrize(("stopping", "reported"), [(False, True), (True, False)])
def test_an_event_loop_thread_whose_loop_stops_is_a_death_unless_the_node_stops(stopping, reported):
    deaths = Deaths()
    lifeline = Lifeline(deaths)
    loop = asyncio.new_event_loop()
    t = lifeline.loop_thread(loop, "api-loop")
    t.start()
    if stopping:
        lifeline.stopping.set()
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)
    loop.close()
    assert deaths.seen == ([("api-loop", None)] if reported else [])


async def _raise():
    await asyncio.sleep(0)
    raise KeyError("gone")


async def _return():
    await asyncio.sleep(0)


async def _forever():
    await asyncio.Event().wait()


def run_task(lifeline: Lifeline, make, name: str, *, may_end: bool = False, cancel: bool = False) -> None:
    async def main():
        task = lifeline.task(asyncio.get_running_loop(), make(), name, may_end=may_end)
        if cancel:
            await asyncio.sleep(0)
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)  # the done-callback runs on the next turn of the loop

    asyncio.run(main())


def test_a_raising_task_is_reported_once():
    deaths = Deaths()
    lifeline = Lifeline(deaths)
    run_task(lifeline, _raise, "marks-commit", may_end=True)
    run_task(lifeline, _raise, "member-feeds")
    [(name, error)] = deaths.seen
    assert name == "marks-commit" and isinstance(error, KeyError)


@pytest.mark.parametrize(
    ("make", "may_end", "cancel", "reported"),
    [
        (_return, False, False, True),  # a long-lived task that returned
        (_return, True, False, False),  # one that ends when its work is done (a group commit's committer)
        (_forever, False, True, False),  # cancelled: stopped on purpose
    ],
)
def test_a_task_that_ends_without_raising(make, may_end, cancel, reported):
    deaths = Deaths()
    run_task(Lifeline(deaths), make, "committer", may_end=may_end, cancel=cancel)
    assert deaths.seen == ([("committer", None)] if reported else [])


def test_a_task_that_returns_while_the_node_stops_is_not_a_death():
    deaths = Deaths()
    lifeline = Lifeline(deaths)
    lifeline.stopping.set()
    run_task(lifeline, _return, "member-feeds")
    assert deaths.seen == []


def test_an_unwatched_lifeline_logs_a_death_and_tells_nobody(caplog):
    lifeline = Lifeline()
    run_thread(lifeline, boom, "pruner")
    run_thread(lifeline, lambda: None, "pruner")  # a component closed outside a node: not a death
    assert lifeline.died is None
    assert [r.getMessage() for r in caplog.records if r.name == "shardcron.runtime.lifeline"] == [
        "worker 'pruner' died: ValueError('boom')"
    ]


def test_stack_of_shows_where_a_thread_waits_and_says_when_it_does_not_run():
    release = threading.Event()

    def waits_here() -> None:
        release.wait()

    thread = threading.Thread(target=waits_here, name="stuck", daemon=True)
    assert stack_of(thread) == "  (not running)"  # not started yet
    thread.start()
    try:
        wait_until(lambda: "in waits_here" in stack_of(thread), 10, what="the thread to wait")
        assert "release.wait()" in stack_of(thread)
    finally:
        release.set()
        thread.join(10)
    assert stack_of(thread) == "  (not running)"
