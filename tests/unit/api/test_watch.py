"""A watcher's queue: it drops the oldest events when full, counts them, and wants its job or all."""

from __future__ import annotations

import asyncio

import pytest

from shardcron.api.watch import WatcherQueue
from shardcron.v1 import scheduler_pb2 as pb


def test_the_watch_queue_drops_the_oldest_and_counts():
    def event(at_ms: int) -> pb.TickEvent:
        return pb.TickEvent(tick=pb.Tick(job_id="j", scheduled_at_ms=at_ms))

    async def scenario():
        q = WatcherQueue(limit=3)
        for i in range(5):
            q.put(event(i))
        got = [await q.get(0) for _ in range(3)]
        return [(e.tick.scheduled_at_ms, e.dropped) for e in got], await q.get(0.01)

    events, after = asyncio.run(scenario())
    assert events == [(2, 2), (3, 0), (4, 0)]  # the first event after a drop says how many went
    assert after is None


@pytest.mark.parametrize("watching, job_id, wanted", [("", "a", True), ("a", "a", True), ("a", "b", False)])
def test_a_watcher_queue_wants_its_job_or_all(watching, job_id, wanted):
    async def scenario():
        return WatcherQueue(watching).wants(job_id)

    assert asyncio.run(scenario()) is wanted
