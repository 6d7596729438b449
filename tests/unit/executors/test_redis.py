"""The Redis executors' pure parts: what they send and how they refuse, without a Redis (the real one: integration)."""

from __future__ import annotations

import pytest
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError, TimeoutError

from shardcron.executors import redis_clients
from shardcron.executors.arq import ArqExecutor
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid
from shardcron.executors.redis_stream import RedisStreamExecutor, entry_fields
from shardcron.executors.rq import RqExecutor
from shardcron.model import ExecutorKind, ExecutorSpec, RedisStreamSpec, RqSpec, TickContext
from shardcron.runtime.latch import Latch

TICK = TickContext("report", 1_700_000_000_000, 2, 41, 3, "n0")


@pytest.mark.parametrize("timeout_s, expected", [(60, 5.0), (5, 5.0), (2.5, 2.5), (0, 0.1)])
def test_socket_timeouts_are_the_job_timeout_capped_at_five_seconds(timeout_s, expected):
    assert redis_clients.socket_timeout_s(timeout_s) == expected


def test_the_marker_is_named_by_the_slot_and_outlives_a_day():
    assert redis_clients.marker_key(TICK) == f"shardcron:enqueued:{slot_uuid(TICK)}"
    assert redis_clients.DEDUPE_TTL_MS >= 24 * 3_600_000 + 3_600_000  # arq's 24 h job expiry + 1 h


def test_stream_fields_carry_the_tick_and_cannot_forge_it():
    spec = RedisStreamSpec("redis://h", "s", fields=(("report", "daily"), ("shardcron_fence", "999999")))
    fields = entry_fields(spec, TICK)
    assert fields["report"] == "daily"
    assert fields["shardcron_fence"] == "41"
    assert fields["shardcron_attempt"] == "2"
    assert fields["shardcron_idempotency_key"] == "report:1700000000000"


@pytest.mark.parametrize(
    "error, start",
    [
        (ConnectionError("Error 111 connecting to h:1. Connection refused."), "cannot reach redis: Error 111"),
        (TimeoutError("Timeout reading from socket"), "timed out: "),
        (AuthenticationError("invalid username-password pair"), "authentication failed: "),
        (
            ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
            "redis refused the command",
        ),
        (ValueError("bad"), "invalid job: bad"),
    ],
)
def test_errors_read_as_one_line(error, start):
    assert redis_clients.explain(error).startswith(start)


@pytest.mark.parametrize("make", [RqExecutor, ArqExecutor, RedisStreamExecutor])
def test_a_spec_without_its_settings_is_refused(make):
    result = make(Connections(), None).run(ExecutorSpec(ExecutorKind.NOOP), TICK, 5, Latch())
    assert not result.ok and result.error.startswith("invalid job: ")


def test_cancelled_before_sending_touches_no_redis_and_masks_the_url():
    cancel = Latch()
    cancel.set()
    spec = ExecutorSpec(ExecutorKind.RQ, rq=RqSpec("redis://:pw@nowhere.invalid:6379/0", "app.tasks.f"))
    result = RqExecutor(Connections(), None).run(spec, TICK, 5, cancel)
    assert not result.ok and result.error.startswith("cancelled: ")
    assert "redis://:***@nowhere.invalid" in result.error and ":pw@" not in result.error


def test_an_unparsable_url_is_a_failed_tick_not_an_exception():
    spec = ExecutorSpec(ExecutorKind.REDIS_STREAM, redis_stream=RedisStreamSpec("http://:pw@h/0", "s"))
    result = RedisStreamExecutor(Connections(), None).run(spec, TICK, 5, Latch())
    assert not result.ok and result.error.startswith("invalid redis URL http://:***@h/0"), result.error
