"""A tick span's W3C trace context in every carrier the executors build, and read back by the consumer."""

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from shardcron.consumer import TickInfo
from shardcron.executors.identity import tick_environment, tick_fields, tick_headers, with_tick_fields
from shardcron.model import TickContext
from shardcron.tracing.propagation import carrier_of, context_from

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def remote_span(state: TraceState | None = None) -> NonRecordingSpan:
    return NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, True, TraceFlags(1), state or TraceState()))


def test_the_propagator_writes_traceparent_and_only_a_tracestate_that_has_entries():
    assert carrier_of(remote_span()) == (("traceparent", TRACEPARENT),)
    assert carrier_of(remote_span(TraceState([("vendor", "v1")]))) == (
        ("traceparent", TRACEPARENT),
        ("tracestate", "vendor=v1"),
    )


def test_a_recording_span_s_carrier_names_its_own_ids():
    span = TracerProvider().get_tracer("t").start_span("s")
    (name, value), *_ = carrier_of(span)
    ctx = span.get_span_context()
    assert name == "traceparent"
    assert value.startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")


TRACE = (("traceparent", TRACEPARENT), ("tracestate", "vendor=v1"))
TRACED = TickContext("reports", 1_700_000_000_000, 2, 41, 3, "n1", TRACE)
UNTRACED = TickContext("reports", 1_700_000_000_000, 2, 41, 3, "n1")


@pytest.mark.parametrize(
    "build, traceparent_name, tracestate_name",
    [
        (tick_headers, "traceparent", "tracestate"),  # HTTP, NATS, AMQP
        (tick_fields, "traceparent", "tracestate"),  # Celery headers, Redis stream fields, RQ meta, arq's tick
        (tick_environment, "TRACEPARENT", "TRACESTATE"),  # a shell command
    ],
)
def test_every_carrier_holds_the_trace_context_under_its_standard_names(build, traceparent_name, tracestate_name):
    traced, untraced = build(TRACED), build(UNTRACED)
    assert traced[traceparent_name] == TRACEPARENT
    assert traced[tracestate_name] == "vendor=v1"
    assert {k: v for k, v in traced.items() if k not in (traceparent_name, tracestate_name)} == untraced
    assert traceparent_name not in untraced and tracestate_name not in untraced


@pytest.mark.parametrize(
    "carrier",
    [
        tick_headers(TRACED),
        tick_fields(TRACED),
        {"shardcron": tick_fields(TRACED)},  # RQ's meta
        {k.encode(): v.encode() for k, v in tick_fields(TRACED).items()},  # a Redis stream entry
        {k.upper(): v for k, v in tick_headers(TRACED).items()},  # header names in any case
    ],
)
def test_the_consumer_reads_the_trace_context_back(carrier):
    tick = TickInfo.from_mapping(carrier)
    assert tick.trace == TRACE
    extracted = context_from(dict(tick.trace))
    assert trace.get_current_span(extracted).get_span_context().trace_id == TRACE_ID


def test_a_job_s_own_traceparent_field_gives_way_to_the_tick_s():
    assert with_tick_fields((("traceparent", "its own"),), TRACED)["traceparent"] == TRACEPARENT
    assert with_tick_fields((("traceparent", "its own"),), UNTRACED)["traceparent"] == "its own"


def test_a_tick_without_a_trace_context_reads_as_one_without():
    assert TickInfo.from_mapping(tick_fields(UNTRACED)).trace == ()
