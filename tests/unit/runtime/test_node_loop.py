"""The node's one event loop: waited on from threads, bounded waits, one close that stops it for good; and the
parts a node hands it to (executors, API server, dashboard) stop without stopping it."""

from __future__ import annotations

import asyncio
import threading

import pytest
from prometheus_client import CollectorRegistry

from shardcron.api.server import ApiServer
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.server import Dashboard, DashboardServer
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.executors import Executors
from shardcron.runtime.lifeline import Lifeline
from shardcron.runtime.node_loop import NodeLoop


@pytest.fixture
def node_loop():
    told: list[tuple[str, BaseException | None]] = []
    stopping = threading.Event()
    loop = NodeLoop("test-node-loop", Lifeline(lambda name, error: told.append((name, error)), stopping=stopping))
    yield loop, told
    stopping.set()
    loop.close()


def test_run_awaits_on_the_loop_thread_and_a_wait_past_its_timeout_cancels_it(node_loop):
    loop, _ = node_loop

    async def where() -> str:
        return threading.current_thread().name

    assert loop.run(where(), 10) == "test-node-loop"

    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    with pytest.raises(TimeoutError):
        loop.run(forever(), 0.05)
    assert cancelled.wait(10), "the coroutine is cancelled on the loop"


def test_run_on_the_loop_itself_is_refused_rather_than_waiting_forever(node_loop):
    loop, _ = node_loop

    async def nested() -> None:
        loop.run(asyncio.sleep(0), 1)

    with pytest.raises(RuntimeError, match="wait for itself"):
        loop.run(nested(), 10)


def test_close_stops_the_loop_for_good_and_a_second_close_does_nothing():
    stopping = threading.Event()
    told: list = []
    loop = NodeLoop("test-closed-loop", Lifeline(lambda name, error: told.append(name), stopping=stopping)).start()
    stopping.set()  # the node stops: the loop's end is no death
    loop.close()
    loop.close()
    assert not loop.running
    assert not any(t.name == "test-closed-loop" for t in threading.enumerate())
    with pytest.raises(RuntimeError):
        loop.run(asyncio.sleep(0), 1)
    with pytest.raises(RuntimeError):
        loop.call_soon(print)
    assert told == []


def test_a_loop_stopped_while_the_node_is_not_stopping_is_its_death(node_loop):
    loop, told = node_loop
    loop.start().call_soon(loop.loop.stop)
    wait_until(lambda: told, 10, what="the loop's end to be told")
    assert told == [("test-node-loop", None)]


class _Backend:
    node_id = "solo"
    shard_count = 1
    allow_shell = False
    engine = None

    def __init__(self, lifeline: Lifeline):
        self.joined = threading.Event()
        self.lifeline = lifeline

    def shard_map(self):
        return {"prefix": "/x", "shard_count": 1, "revision": 0, "shards": [], "nodes": []}

    def subscribe_ticks(self, callback):
        return lambda: None


def test_the_parts_that_share_the_loop_stop_without_stopping_it(node_loop):
    loop, told = node_loop
    lifeline = Lifeline(lambda name, error: told.append((name, error)))
    before = {t.name for t in threading.enumerate()}

    executors = Executors(loop=loop.start())
    assert executors.loop.loop is loop.loop
    address = f"127.0.0.1:{free_port()}"
    api = ApiServer(_Backend(lifeline), address, address, loop=loop).start()
    dashboard = DashboardServer(
        Dashboard(
            node_id="solo",
            api=api.in_process,
            tokens=None,
            history=MetricsHistory(CollectorRegistry(), every_s=0.05, lifeline=lifeline),
            lifeline=lifeline,
        ),
        f"127.0.0.1:{free_port()}",
        loop,
    ).start()
    started = {t.name for t in threading.enumerate()} - before
    assert not started & {"api-loop", "dashboard", "dashboard-metrics", "shardcron-loop"}, started

    dashboard.stop()
    api.stop(0)
    executors.close()
    assert loop.running, "the node's loop is the node's to close"

    async def alive() -> bool:
        return True

    assert loop.run(alive(), 10)
    assert told == []
