"""A burst of slots for one Redis goes out in one pipelined round trip, and each slot keeps its own outcome.

Against a real Redis: the executors' ``run_async`` on one loop, many ticks
started in the same loop turn, as a shard's burst is. The batcher counts its
round trips (``RedisBatcher.flushes``); Redis itself counts the guarded
commands it ran (INFO commandstats).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shardcron.executors.aio import LoopThread
from shardcron.executors.arq import ArqExecutor
from shardcron.executors.connections import Connections
from shardcron.executors.redis_async import batcher_key
from shardcron.executors.redis_stream import RedisStreamExecutor
from shardcron.executors.rq import RqExecutor
from tests.integration.executors import test_redis
from tests.integration.executors.test_redis import REDIS_URL, queued
from tests.support.bursts import burst

BURST = 200
rds = test_redis.rds  # the fixtures: a client, and one test's names cleaned up after it
names = test_redis.names
EXECUTORS = {"rq": RqExecutor, "arq": ArqExecutor, "redis-stream": RedisStreamExecutor}
BATCHED = tuple(EXECUTORS)


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    lt = LoopThread("test-redis-batch")
    yield lt
    lt.close()


def evals(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_eval", {}).get("calls", 0))


@pytest.mark.parametrize("kind", BATCHED)
def test_a_burst_of_slots_is_one_round_trip(kind, rds, names, loop):
    connections = Connections()
    try:
        executor = EXECUTORS[kind](connections, loop)
        spec = names.spec(kind)
        ticks = [names.tick(kind, 1_700_000_000_000 + i * 1000) for i in range(BURST)]
        before = evals(rds)
        results = burst(loop, executor, [(spec, t) for t in ticks])
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
        assert len(queued(rds, names, kind)) == BURST
        assert evals(rds) - before >= BURST  # each slot ran its own guard (other tests may add to the count)
        batcher = connections.get(batcher_key(REDIS_URL, 20), lambda: pytest.fail("no batcher was made"))
        assert batcher.items_sent == BURST
        assert batcher.flushes == 1, f"{BURST} slots took {batcher.flushes} round trips"

        # The same burst again, a retry by another leader: every slot is a duplicate, still one round trip.
        again = burst(loop, executor, [(spec, t) for t in ticks])
        assert all(r.ok and r.output.startswith("duplicate: already ") for r in again), again[:1]
        assert batcher.flushes == 2
        assert len(queued(rds, names, kind)) == BURST
    finally:
        connections.close()


@pytest.mark.parametrize("kind", BATCHED)
def test_one_slots_failure_in_a_burst_fails_that_slot_only(kind, rds, names, loop):
    connections = Connections()
    try:
        executor = EXECUTORS[kind](connections, loop)
        good = names.spec(kind)
        broken_queue = names.queue(kind) + "-broken"
        for key in (broken_queue, f"rq:queue:{broken_queue}"):  # WRONGTYPE for XADD, ZADD and RPUSH
            rds.set(key, "neither a stream, a sorted set nor a list")
        bad = names.spec(kind)
        bad = _with_queue(bad, kind, broken_queue)
        ticks = [names.tick(kind, 1_700_000_000_000 + i * 1000) for i in range(10)]
        plan = [(bad if i == 4 else good, t) for i, t in enumerate(ticks)]
        results = burst(loop, executor, plan)
        batcher = connections.get(batcher_key(REDIS_URL, 20), lambda: pytest.fail("no batcher was made"))
        assert batcher.flushes == 1
        assert [r.ok for r in results] == [i != 4 for i in range(10)], [r.error for r in results]
        assert "WRONGTYPE" in results[4].error, results[4].error
        assert len(queued(rds, names, kind)) == 9
    finally:
        rds.srem("rq:queues", f"rq:queue:{broken_queue}")
        connections.close()


def _with_queue(spec, kind: str, queue: str):
    from dataclasses import replace

    if kind == "rq":
        return replace(spec, rq=replace(spec.rq, queue=queue))
    if kind == "arq":
        return replace(spec, arq=replace(spec.arq, queue=queue))
    return replace(spec, redis_stream=replace(spec.redis_stream, stream=queue))
