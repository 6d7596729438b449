"""Every dispatch kind's message, as its executor builds it, carries the attempt's trace context where the
consumer's side looks for it: HTTP, NATS and AMQP headers, Celery's task headers, a Redis stream entry's
fields, RQ's job meta, arq's tick argument."""

import pickle

import pytest

from shardcron.consumer import TickInfo
from shardcron.executors import amqp, arq, celery, http_request, nats, redis_stream, rq
from shardcron.model import AmqpSpec, ArqSpec, CelerySpec, HttpSpec, NatsSpec, RedisStreamSpec, RqSpec, TickContext

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE = (("traceparent", TRACEPARENT), ("tracestate", "vendor=v1"))
CTX = TickContext("reports", 1_700_000_000_000, 1, 41, 3, "n1", TRACE)


def _rq_meta(ctx):
    for write in rq.recorded_writes(RqSpec("redis://127.0.0.1:6379/0", "app.tasks.report"), ctx):
        if write[0] == "HSET" and "meta" in write:
            return pickle.loads(write[write.index("meta") + 1])
    raise AssertionError("RQ's job hash has no meta")


def _arq_tick(ctx):
    job = arq.enqueue_command(ArqSpec("redis://127.0.0.1:6379/0", "report", tick_kwarg="tick"), ctx)[-3]
    return pickle.loads(job)["k"]["tick"]


CARRIERS = {
    "http": lambda ctx: http_request.request_headers(HttpSpec("http://127.0.0.1/x"), ctx),
    "nats": lambda ctx: nats.message_headers(NatsSpec("nats://127.0.0.1:4222", "ticks"), ctx),
    "amqp": lambda ctx: amqp.message_headers(AmqpSpec("amqp://127.0.0.1", "ticks"), ctx),
    "celery": lambda ctx: celery.task_send(CelerySpec("redis://127.0.0.1", "app.report"), ctx, deadline=0).headers,
    "redis-stream": lambda ctx: redis_stream.entry_fields(RedisStreamSpec("redis://127.0.0.1", "ticks"), ctx),
    "rq": _rq_meta,
    "arq": _arq_tick,
}


@pytest.mark.parametrize("kind", sorted(CARRIERS))
def test_each_kind_s_message_carries_the_trace_context_and_the_guard_reads_it(kind):
    carrier = CARRIERS[kind](CTX)
    assert TickInfo.from_mapping(carrier).trace == TRACE
    untraced = CARRIERS[kind](TickContext("reports", 1_700_000_000_000, 1, 41, 3, "n1"))
    assert TickInfo.from_mapping(untraced).trace == ()


def test_celery_s_instrumentation_finds_traceparent_among_the_task_s_headers():
    # opentelemetry-instrumentation-celery reads it as an attribute of the worker's request, which is where a
    # worker puts each header sent with send_task(headers=...) (the real worker: tests/integration/tracing).
    headers = celery.task_send(CelerySpec("redis://127.0.0.1", "app.report"), CTX, deadline=0).headers
    assert headers["traceparent"] == TRACEPARENT
