"""The leader's span per tick attempt: its start, attributes, events, status and end, on the SDK's own exporter."""

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from shardcron.jobkey import join_key, slot_idempotency_key
from shardcron.model import ExecutionResult, SlotRef
from shardcron.tracing.tick_spans import ATTRIBUTES, NS_PER_MS, SPAN_NAME, TickSpans

SLOT = SlotRef(join_key("billing", "nightly-invoices"), 1_700_000_000_000)
DEFAULT_SLOT = SlotRef("reports", 1_700_000_000_000)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TickSpans(provider.get_tracer("test"), "node-1"), exporter


class Written:
    def __init__(self, slot, attempt):
        self.slot, self.attempt = slot, attempt


async def _result(result):
    return result


def run(attempt_span, result, last_attempt):
    return asyncio.run(attempt_span.until_result(_result(result), last_attempt=last_attempt))


def test_a_first_attempt_spans_from_its_claim_to_its_row_written(spans):
    tick_spans, exporter = spans
    attempt = tick_spans.attempt(
        SLOT, 1, 41, 3, "http", claimed_at_ms=SLOT.scheduled_at_ms - 900, start_ms=SLOT.scheduled_at_ms + 2
    )
    carrier = dict(attempt.started())
    run(attempt, ExecutionResult(True, SLOT.scheduled_at_ms + 2, SLOT.scheduled_at_ms + 30, http_status=204), 3)
    assert exporter.get_finished_spans() == ()  # the last attempt's span waits for its row
    tick_spans.written([Written(SLOT, 1)])
    (span,) = exporter.get_finished_spans()
    assert span.name == SPAN_NAME and span.kind is SpanKind.CLIENT
    assert span.start_time == (SLOT.scheduled_at_ms - 900) * NS_PER_MS
    assert [e.name for e in span.events] == ["claim", "start", "result", "result written"]
    assert span.events[0].timestamp == span.start_time
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes) == {
        "shardcron.job": "nightly-invoices",
        "shardcron.namespace": "billing",
        "shardcron.slot.scheduled_at_ms": SLOT.scheduled_at_ms,
        "shardcron.slot.scheduled_at": "2023-11-14T22:13:20.000Z",
        "shardcron.attempt": 1,
        "shardcron.fence": 41,
        "shardcron.shard": 3,
        "shardcron.node": "node-1",
        "shardcron.executor.kind": "http",
        "shardcron.idempotency_key": slot_idempotency_key(SLOT.job_id, SLOT.scheduled_at_ms),
        "shardcron.http_status": 204,
    }
    assert set(span.attributes) <= set(ATTRIBUTES)  # every attribute set is documented
    assert carrier["traceparent"].split("-")[1:3] == [f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"]


def test_a_failed_attempt_with_attempts_left_ends_at_its_result_as_an_error(spans):
    tick_spans, exporter = spans
    attempt = tick_spans.attempt(
        DEFAULT_SLOT, 1, 41, 3, "celery", claimed_at_ms=0, start_ms=DEFAULT_SLOT.scheduled_at_ms
    )
    attempt.started()
    run(attempt, ExecutionResult(False, 1, DEFAULT_SLOT.scheduled_at_ms + 5, error="broker refused"), 3)
    (span,) = exporter.get_finished_spans()
    assert span.kind is SpanKind.PRODUCER
    assert span.start_time == DEFAULT_SLOT.scheduled_at_ms * NS_PER_MS  # no claim known: from the attempt's start
    assert [e.name for e in span.events] == ["start", "result"]
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, "broker refused")
    assert span.end_time == (DEFAULT_SLOT.scheduled_at_ms + 5) * NS_PER_MS
    assert span.attributes["shardcron.namespace"] == "default"


@pytest.mark.parametrize(
    "end, event, error",
    [
        (lambda s: s.rejected([Written(DEFAULT_SLOT, 3)]), "result rejected by the fence", True),
        (lambda s: s.close(), "result not written: the node stopped", False),
    ],
)
def test_a_last_attempt_whose_row_is_not_written_ends_saying_why(spans, end, event, error):
    tick_spans, exporter = spans
    attempt = tick_spans.attempt(DEFAULT_SLOT, 3, 41, 3, "nats", claimed_at_ms=0, start_ms=1)
    attempt.started()
    run(attempt, ExecutionResult(True, 1, 2), 3)
    end(tick_spans)
    (span,) = exporter.get_finished_spans()
    assert span.events[-1].name == event
    assert (span.status.status_code is StatusCode.ERROR) is error


def test_an_attempt_stopped_before_its_executor_ends_as_not_started(spans):
    tick_spans, exporter = spans
    tick_spans.attempt(DEFAULT_SLOT, 1, 41, 3, "shell", claimed_at_ms=0, start_ms=1).not_started("fenced out")
    (span,) = exporter.get_finished_spans()
    assert span.kind is SpanKind.INTERNAL
    assert [e.name for e in span.events] == ["not started"]
    assert span.status.description == "not started: fenced out"


def test_an_interrupted_execution_ends_its_span_and_raises_on(spans):
    tick_spans, exporter = spans
    attempt = tick_spans.attempt(DEFAULT_SLOT, 1, 41, 3, "http", claimed_at_ms=0, start_ms=1)

    async def cancelled():
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(attempt.until_result(cancelled(), last_attempt=1))
    (span,) = exporter.get_finished_spans()
    assert span.events[-1].name == "interrupted"


def test_a_noop_completed_inline_spans_from_claim_to_row(spans):
    tick_spans, exporter = spans
    tick_spans.completed_inline(DEFAULT_SLOT, 1, 41, 3, claimed_at_ms=10, at_ms=20)
    tick_spans.written([Written(DEFAULT_SLOT, 1)])
    (span,) = exporter.get_finished_spans()
    assert [(e.name, e.timestamp) for e in span.events[:3]] == [
        ("claim", 10 * NS_PER_MS),
        ("start", 20 * NS_PER_MS),
        ("result", 20 * NS_PER_MS),
    ]
    assert span.attributes["shardcron.executor.kind"] == "noop"
