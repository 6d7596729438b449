"""Every executor's wait is woken by its cancel event, not by looking at it on a timer, and keeps no callback after.

Each case starts a long attempt (a minute of work), lets it wait a second, sets
the cancel, and expects "cancelled: " back long before the work would end. The
cancel counts how often it is asked ``is_set()``: a waiter that polls asks on
every turn of its poll, one that waits on the event asks a few times in all.
Real subprocesses, a real HTTP server (the dev sink), real threads and loops.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from shardcron.dev.testing.cluster import wait_until
from shardcron.executors.aio import Cancelled, LoopThread
from shardcron.executors.http import HttpExecutor
from shardcron.executors.python import PythonExecutor
from shardcron.executors.shell import ShellExecutor
from shardcron.model import ExecutorKind, ExecutorSpec, HttpSpec, PythonSpec, ShellSpec, TickContext
from tests.support import pyjobs
from tests.support.cancels import MOST_CHECKS, WAITED_S, CountingCancel

pytestmark = pytest.mark.timeout(90)

CTX = TickContext(job_id="job-c", scheduled_at_ms=1_767_225_605_000, attempt=1, fence=7, shard=3, node_id="node-a")


@pytest.fixture
def loop():
    thread = LoopThread("test-cancel-loop")
    yield thread
    thread.close()


def _python(tmp_path, sink, loop):
    name = uuid.uuid4().hex
    spec = ExecutorSpec(
        ExecutorKind.PYTHON, python=PythonSpec(target="tests.support.pyjobs:cooperative", args=(name,), kwargs={})
    )
    return (lambda cancel: PythonExecutor(None, ("tests.support",)).run(spec, CTX, 60.0, cancel)), (
        lambda: pyjobs.entered(name).is_set()
    )


def _shell(tmp_path, sink, loop):
    started = tmp_path / "started"
    spec = ExecutorSpec(ExecutorKind.SHELL, shell=ShellSpec(f"touch {started}; sleep 60"))
    return (lambda cancel: ShellExecutor().run(spec, CTX, 60.0, cancel)), started.exists


def _http_from_a_thread(tmp_path, sink, loop):
    http = HttpExecutor(loop)
    spec = ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec(sink.url + "/slow/60000"))
    return (lambda cancel: http.run(spec, CTX, 60.0, cancel)), (lambda: len(sink.requests()) == 1)


def _http_on_the_loop(tmp_path, sink, loop):
    http = HttpExecutor(loop)
    spec = ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec(sink.url + "/slow/60000"))

    def attempt(cancel):
        # As the scheduler awaits it: the coroutine on the loop, cancelled there by the event's callback.
        return asyncio.run_coroutine_threadsafe(http.run_async(spec, CTX, 60.0, cancel), loop.loop).result(60)

    return attempt, (lambda: len(sink.requests()) == 1)


@pytest.mark.parametrize("make", [_python, _shell, _http_from_a_thread, _http_on_the_loop])
def test_a_long_attempt_is_woken_by_its_cancel_event(make, tmp_path, sink, loop):
    attempt, in_flight = make(tmp_path, sink, loop)
    cancel = CountingCancel()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(attempt, cancel)
        wait_until(in_flight, 30, what="the attempt to be under way")
        # A deliberate window, not a wait: a poller would ask its cancel more than MOST_CHECKS times in it.
        time.sleep(WAITED_S)
        cancel.set()
        result = future.result(timeout=30)  # the work itself would take a minute
    assert not result.ok and result.error.startswith("cancelled: "), result.error
    assert cancel.asked <= MOST_CHECKS, f"is_set() asked {cancel.asked} times: the wait polled its cancel"
    assert cancel.listeners == 0, "the attempt left a callback on its cancel"


def test_a_coroutine_run_from_a_thread_is_cancelled_by_the_event(loop):
    cancel = CountingCancel()
    entered = asyncio.Event()

    async def long_call():
        entered.set()
        await asyncio.sleep(60)

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(loop.run, long_call, 60.0, cancel)
        wait_until(lambda: entered.is_set(), 30, what="the coroutine to start")
        # A deliberate window, not a wait: a poller would ask its cancel more than MOST_CHECKS times in it.
        time.sleep(WAITED_S)
        cancel.set()
        with pytest.raises(Cancelled):
            future.result(timeout=30)
    assert cancel.asked <= MOST_CHECKS, f"is_set() asked {cancel.asked} times: the wait polled its cancel"
    assert cancel.listeners == 0


def test_scopes_on_the_loop_share_one_callback_per_cancel_and_keep_none_after(loop):
    """A shard's ticks share its cancel: one callback on it while any is in flight, none once they end."""
    cancel, other = CountingCancel(), CountingCancel()
    release = asyncio.Event()
    inside = []

    async def tick(c: CountingCancel) -> str:
        try:
            with loop.cancelled_by(c):
                inside.append(c)
                await release.wait()
                return "ended"
        except Cancelled:
            return "cancelled"

    async def burst(n: int, c: CountingCancel):
        return await asyncio.gather(*(tick(c) for _ in range(n)))

    ended = asyncio.run_coroutine_threadsafe(burst(50, other), loop.loop)
    cancelled = asyncio.run_coroutine_threadsafe(burst(50, cancel), loop.loop)
    wait_until(lambda: len(inside) == 100, 30, what="every tick to be inside its scope")
    assert (cancel.listeners, other.listeners) == (1, 1)
    cancel.set()
    assert cancelled.result(30) == ["cancelled"] * 50
    loop.call_soon(release.set)
    assert ended.result(30) == ["ended"] * 50
    assert (cancel.listeners, other.listeners) == (0, 0)


def test_ticks_that_end_leave_no_callback_on_their_cancel(sink, loop):
    """Per-tick registrations are taken back: after many ticks the shard's cancel holds none."""
    http = HttpExecutor(loop)
    spec = ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec(sink.url + "/hook"))
    shell = ExecutorSpec(ExecutorKind.SHELL, shell=ShellSpec("true"))
    cancel = CountingCancel()

    async def ticks():
        return await asyncio.gather(*(http.run_async(spec, CTX, 10.0, cancel) for _ in range(50)))

    assert all(r.ok for r in asyncio.run_coroutine_threadsafe(ticks(), loop.loop).result(60))
    assert all(http.run(spec, CTX, 10.0, cancel).ok for _ in range(10))
    assert all(ShellExecutor().run(shell, CTX, 10.0, cancel).ok for _ in range(5))
    assert cancel.listeners == 0
    http.close()
