"""A burst of Celery slots for one broker is one batch: one producer from the broker's pool, on one thread.

Against the real Redis and RabbitMQ brokers: the executor's ``run_async`` for
many slots started in the same loop turn, as a shard's burst is. A counting
hook on kombu's real ``ProducerPool.acquire`` counts the producers a burst
takes; the queue itself says what arrived, and ``shardcron.consumer``'s guard
(on the real Redis) what a consumer admits.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
import redis
from kombu.pools import ProducerPool

from shardcron.consumer import RedisDeduper, TickInfo, Verdict
from shardcron.executors.aio import LoopThread
from shardcron.executors.celery import CeleryExecutor
from shardcron.executors.celery_broker import MAX_BATCH, PUBLISH_THREAD_NAME, CeleryBroker
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid
from tests.integration.executors.test_celery_amqp import (
    AMQP_URL,
    REDIS_URL,
    amqp,
    amqp_get_all,
    celery_spec,
    ctx,
    forget_rabbitmq,
)
from tests.support.bursts import burst

BURST = MAX_BATCH  # the most one batch takes
AT = 1_767_225_605_000
BROKERS = {"redis": REDIS_URL, "rabbitmq": AMQP_URL}


@dataclass
class OnALoop:
    executor: CeleryExecutor
    connections: Connections
    loop: LoopThread

    def burst(self, plan) -> list:
        """Every ``(spec, tick)`` of ``plan`` started in the same loop turn, as a shard's burst is."""

        return burst(self.loop, self.executor, plan)

    def broker(self, url: str) -> CeleryBroker:
        return self.connections.get(("celery", url), lambda: pytest.fail("no broker was made"))


@pytest.fixture
def celery_exec() -> Iterator[OnALoop]:
    connections, loop = Connections(), LoopThread("test-celery-batch")
    yield OnALoop(CeleryExecutor(connections, loop), connections, loop)
    connections.close()
    loop.close()


@pytest.fixture
def producers_taken(monkeypatch) -> Counter:
    """Counts the producers taken from kombu's real ``ProducerPool``s, per pool."""
    taken: Counter = Counter()
    real = ProducerPool.acquire

    def counted(self, *args, **kwargs):
        taken[id(self)] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ProducerPool, "acquire", counted)
    return taken


@pytest.fixture(params=list(BROKERS))
def broker_queue(request) -> Iterator[tuple[str, str]]:
    """``(broker url, queue)``: a uuid-named Celery queue on one real broker, deleted after."""
    url = BROKERS[request.param]
    queue = f"sc-celery-{uuid.uuid4().hex[:12]}"
    yield url, queue
    if url == REDIS_URL:
        rds = redis.Redis.from_url(REDIS_URL)
        for key in rds.scan_iter(f"*{queue}*"):
            rds.delete(key)
        rds.close()
    else:
        forget_rabbitmq(queue, exchange=True)
        forget_rabbitmq(f"{queue}-bad", exchange=True)


def queued_headers(url: str, queue: str) -> list[dict]:
    """The headers of every task message in ``queue``, taken out of it."""
    if url == REDIS_URL:
        rds = redis.Redis.from_url(REDIS_URL)
        try:
            raw = rds.lrange(queue, 0, -1)
            rds.delete(queue)
        finally:
            rds.close()
        return [json.loads(m)["headers"] for m in raw]
    return [dict(m.headers) for m in amqp_get_all(queue)]


def publish_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == PUBLISH_THREAD_NAME}


def test_a_burst_is_one_producer_on_one_thread(celery_exec, broker_queue, producers_taken):
    url, queue = broker_queue
    spec = celery_spec(url, queue=queue)
    ticks = [ctx(job_id="job-burst", at=AT + i * 1000) for i in range(BURST)]
    threads_before = publish_threads()
    results = celery_exec.burst([(spec, t) for t in ticks])
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert celery_exec.broker(url).flushes == 1
    assert list(producers_taken.values()) == [1], producers_taken
    assert len(publish_threads() - threads_before) == 1  # one thread for the burst, none per tick
    first = queued_headers(url, queue)
    assert sorted(h["id"] for h in first) == sorted(slot_uuid(t) for t in ticks)  # each once

    # The same slots again, a successor's retry: the broker keeps both copies, the guard admits one per slot.
    retries = [ctx(job_id="job-burst", at=t.scheduled_at_ms, attempt=2, fence=8) for t in ticks]
    again = celery_exec.burst([(spec, t) for t in retries])
    assert all(r.ok for r in again), [r.error for r in again if not r.ok][:3]
    assert celery_exec.broker(url).flushes == 2
    assert list(producers_taken.values()) == [2], producers_taken
    second = queued_headers(url, queue)
    deduper = RedisDeduper(REDIS_URL, prefix=f"sc-dedupe-{uuid.uuid4().hex[:12]}:", ttl_s=600)
    verdicts = Counter(deduper.admit(TickInfo.from_mapping(h)) for h in first + second)
    assert verdicts[Verdict.FIRST] == BURST and sum(verdicts.values()) == 2 * BURST, verdicts


def test_a_burst_larger_than_a_batch_is_split_across_producers(celery_exec, broker_queue, producers_taken):
    url, queue = broker_queue
    spec = celery_spec(url, queue=queue)
    ticks = [ctx(job_id="job-big", at=AT + i * 1000) for i in range(2 * MAX_BATCH + 1)]
    results = celery_exec.burst([(spec, t) for t in ticks])
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert celery_exec.broker(url).flushes == 3
    assert list(producers_taken.values()) == [3], producers_taken
    assert sorted(h["id"] for h in queued_headers(url, queue)) == sorted(slot_uuid(t) for t in ticks)


def test_one_slots_failure_in_a_burst_fails_that_slot_only(celery_exec, broker_queue, producers_taken):
    url, queue = broker_queue
    bad_queue = f"{queue}-bad"
    if url == REDIS_URL:  # WRONGTYPE for the push onto the list
        redis.Redis.from_url(REDIS_URL).set(bad_queue, "not a list")
    else:  # PRECONDITION_FAILED for Celery's declare of a durable queue: RabbitMQ closes that channel
        amqp(lambda ch: ch.declare_queue(bad_queue, durable=False, arguments={"x-max-length": 5}))
    good = celery_spec(url, queue=queue)
    bad = replace(good, celery=replace(good.celery, queue=bad_queue))
    plan = [(bad if i == 4 else good, ctx(at=AT + i * 1000)) for i in range(20)]
    results = celery_exec.burst(plan)
    assert celery_exec.broker(url).flushes == 1
    assert list(producers_taken.values()) == [1], producers_taken
    assert [r.ok for r in results] == [i != 4 for i in range(20)], [r.error for r in results]
    assert ("WRONGTYPE" if url == REDIS_URL else "PRECONDITION_FAILED") in results[4].error, results[4].error
    assert len(queued_headers(url, queue)) == 19
