"""A burst of AMQP slots for one broker is one batch: one channel, every confirm awaited together.

Against the real RabbitMQ: the executor's ``run_async`` for many slots started
in the same loop turn, as a shard's burst is. A counting hook on aiormq's real
``Channel.basic_publish`` sees which channels the publishes went to and how
many were awaiting their confirms at once; the queue itself says what arrived,
and ``shardcron.consumer``'s guard (on the real Redis) what a consumer admits.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

import aiormq.channel
import pytest

from shardcron.consumer import RedisDeduper, TickInfo, Verdict
from shardcron.executors.aio import LoopThread
from shardcron.executors.amqp import AmqpExecutor
from shardcron.executors.amqp_publisher import AmqpPublisher
from shardcron.executors.connections import Connections
from tests.integration.executors import test_celery_amqp
from tests.integration.executors.test_celery_amqp import (
    AMQP_URL,
    REDIS_URL,
    amqp,
    amqp_get_all,
    amqp_spec,
    ctx,
)
from tests.support.bursts import burst

amqp_queue = test_celery_amqp.amqp_queue  # the fixture: a fresh queue, deleted after

BURST = 200
AT = 1_767_225_605_000


@dataclass
class OnALoop:
    executor: AmqpExecutor
    connections: Connections
    loop: LoopThread

    def burst(self, plan) -> list:
        """Every ``(spec, tick)`` of ``plan`` started in the same loop turn, as a shard's burst is."""

        return burst(self.loop, self.executor, plan)

    def publisher(self) -> AmqpPublisher:
        return self.connections.get(("amqp", AMQP_URL), lambda: pytest.fail("no publisher was made"))


@pytest.fixture
def amqp_exec() -> Iterator[OnALoop]:
    connections, loop = Connections(), LoopThread("test-amqp-batch")
    yield OnALoop(AmqpExecutor(connections, loop), connections, loop)
    connections.close()
    loop.close()


@pytest.fixture
def publishes(monkeypatch) -> Counter:
    """Counts on aiormq's real channel: ``channels`` used, and the ``most`` publishes awaiting confirms at once."""
    seen: Counter = Counter()
    waiting: Counter = Counter()
    real = aiormq.channel.Channel.basic_publish

    async def counted(self, *args, **kwargs):
        seen[("channel", id(self))] += 1
        waiting[id(self)] += 1
        seen["most"] = max(seen["most"], waiting[id(self)])
        try:
            return await real(self, *args, **kwargs)
        finally:
            waiting[id(self)] -= 1

    monkeypatch.setattr(aiormq.channel.Channel, "basic_publish", counted)
    return seen


def channels(seen: Counter) -> int:
    return sum(1 for key in seen if isinstance(key, tuple) and key[0] == "channel")


def test_a_burst_is_one_batch_on_one_channel_with_its_confirms_awaited_together(amqp_exec, amqp_queue, publishes):
    spec = amqp_spec(amqp_queue, body="b")
    ticks = [ctx(job_id="job-burst", at=AT + i * 1000) for i in range(BURST)]
    results = amqp_exec.burst([(spec, t) for t in ticks])
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert amqp_exec.publisher().flushes == 1
    assert channels(publishes) == 1
    assert publishes["most"] == BURST, f"at most {publishes['most']} of {BURST} confirms were awaited together"
    first = amqp_get_all(amqp_queue)
    assert sorted(m.message_id for m in first) == sorted(t.idempotency_key for t in ticks)  # each once

    # The same slots again, a successor's retry: AMQP keeps both copies, and the guard admits one per slot.
    retries = [ctx(job_id="job-burst", at=t.scheduled_at_ms, attempt=2, fence=8) for t in ticks]
    again = amqp_exec.burst([(spec, t) for t in retries])
    assert all(r.ok for r in again), [r.error for r in again if not r.ok][:3]
    assert amqp_exec.publisher().flushes == 2
    assert channels(publishes) == 1  # the channel is kept for the next burst
    second = amqp_get_all(amqp_queue)
    deduper = RedisDeduper(REDIS_URL, prefix=f"sc-dedupe-{uuid.uuid4().hex[:12]}:", ttl_s=600)
    verdicts = Counter(deduper.admit(TickInfo.from_mapping(_text(m.headers))) for m in first + second)
    assert verdicts[Verdict.FIRST] == BURST and sum(verdicts.values()) == 2 * BURST, verdicts


def test_an_unroutable_message_in_a_burst_fails_that_slot_only(amqp_exec, amqp_queue, publishes):
    good = amqp_spec(amqp_queue)
    nobody = amqp_spec(f"sc-nobody-{uuid.uuid4().hex[:12]}")
    plan = [(nobody if i == 4 else good, ctx(at=AT + i * 1000)) for i in range(20)]
    results = amqp_exec.burst(plan)
    assert amqp_exec.publisher().flushes == 1 and channels(publishes) == 1
    assert [r.ok for r in results] == [i != 4 for i in range(20)], [r.error for r in results]
    assert results[4].error.endswith("returned the message as unroutable (312 NO_ROUTE): no queue is bound for it")
    assert len(amqp_get_all(amqp_queue)) == 19


def test_a_missing_exchange_in_a_burst_fails_its_slots_only(amqp_exec, amqp_queue, publishes):
    good = amqp_spec(amqp_queue)
    exchange = f"sc-noexchange-{uuid.uuid4().hex[:12]}"
    missing = replace(good, amqp=replace(good.amqp, exchange=exchange))
    plan = [(missing if i in (3, 11) else good, ctx(at=AT + i * 1000)) for i in range(20)]
    results = amqp_exec.burst(plan)
    assert amqp_exec.publisher().flushes == 1
    assert [r.ok for r in results] == [i not in (3, 11) for i in range(20)], [r.error for r in results]
    for i in (3, 11):
        assert f"NOT_FOUND - no exchange '{exchange}'" in results[i].error, results[i].error
    assert len(amqp_get_all(amqp_queue)) == 18

    # Once the exchange exists, the next burst's slots for it get a channel of their own again.
    amqp(lambda ch: ch.declare_exchange(exchange, auto_delete=True))
    try:

        async def bind(channel):
            queue = await channel.declare_queue(amqp_queue, passive=True)
            await queue.bind(exchange, routing_key=amqp_queue)

        amqp(bind)
        later = amqp_exec.burst([(missing, ctx(at=AT + 60_000 + i * 1000)) for i in range(5)])
        assert all(r.ok for r in later), [r.error for r in later]
        assert len(amqp_get_all(amqp_queue)) == 5
    finally:
        amqp(lambda ch: ch.exchange_delete(exchange))


def _text(headers) -> dict[str, str]:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (headers or {}).items()}
