"""A burst of JetStream publishes on one loop: each tick gets its own PubAck, and one refusal stays its own.

Against a real NATS server: the executor's ``run_async`` for many slots started
in the same loop turn, as a shard's burst is.
"""

from __future__ import annotations

import uuid

from tests.integration.executors import test_nats
from tests.integration.executors.test_nats import NATS_URL, ctx, nats_spec
from tests.support.bursts import burst

executor = test_nats.executor  # the fixtures: an executor on a loop of its own, and a fresh stream
stream = test_nats.stream

BURST = 200


def test_a_burst_gets_one_ack_per_slot_and_a_repeated_slot_is_dropped(executor, stream):
    spec = nats_spec(f"{stream.prefix}.burst", body="b")
    ticks = [ctx(at=1_767_225_605_000 + i * 1000) for i in range(BURST)]
    plan = [(spec, t) for t in ticks] + [(spec, ctx(at=ticks[7].scheduled_at_ms, attempt=2, fence=8))]
    results = burst(executor._loop, executor, plan)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert sum(r.output.startswith("duplicate: ") for r in results) == 1, [r.output for r in results][:3]
    seqs = {r.output.split("(seq ")[1].split(")")[0] for r in results}
    assert len(seqs) == BURST  # every slot its own stored message; the repeat got the first copy's seq
    msgs = stream.messages()
    assert sorted(int(m.headers["X-Shardcron-Scheduled-At-Ms"]) for m in msgs) == [t.scheduled_at_ms for t in ticks]


def test_a_refused_publish_in_a_burst_fails_that_tick_only(executor, stream):
    stored = nats_spec(f"{stream.prefix}.ok", body="b")
    unstored = nats_spec(f"sc.nostream.{uuid.uuid4().hex[:12]}")
    plan = [(unstored if i == 3 else stored, ctx(at=1_767_225_605_000 + i * 1000)) for i in range(20)]
    results = burst(executor._loop, executor, plan)
    assert [r.ok for r in results] == [i != 3 for i in range(20)], [r.error for r in results]
    assert results[3].error.startswith("no JetStream stream stores subject"), results[3].error
    assert NATS_URL in results[3].error
    assert len(stream.messages()) == 19
