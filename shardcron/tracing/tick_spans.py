"""The leader's span per tick attempt: from the claim (or the attempt's start) to its result.

A span is named ``shardcron.tick`` and carries the tick's identity as ``shardcron.*`` attributes
(``ATTRIBUTES`` lists them; ``docs/how-to/tracing.md`` documents them). Its events:

* ``claim``: when the slot was claimed (the span's start, for a first attempt the claimer claimed);
* ``start``: the running mark is written and the executor is about to run;
* ``result``: the executor's result (a failure sets the span's status to error, with the tick's error);
* ``result written``: the result's row is committed (only the slot's last attempt has a row to write).

A retried attempt's span ends at its result; the last attempt's span ends when its row is written (or
rejected by the fence, or left unwritten when the node stops), so its length is the slot's whole time on
this leader. Spans waiting for their row are kept by ``(slot, attempt)``, which ``ResultWrite`` holds too.

Imported only when tracing is on: the leader refers to this module under ``TYPE_CHECKING`` alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Protocol

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shardcron.clock import rfc3339_ms
from shardcron.jobkey import slot_idempotency_key, split_key
from shardcron.model import ExecutionResult, SlotRef
from shardcron.tracing.propagation import TraceCarrier, carrier_of

SPAN_NAME = "shardcron.tick"
NS_PER_MS = 1_000_000

# attribute -> what it holds (docs/how-to/tracing.md shows this table).
ATTRIBUTES = {
    "shardcron.job": "the job's id, within its namespace",
    "shardcron.namespace": "the job's namespace",
    "shardcron.slot.scheduled_at_ms": "the slot, in milliseconds since the epoch",
    "shardcron.slot.scheduled_at": "the slot, RFC 3339 in UTC",
    "shardcron.attempt": "the attempt (1 for a first run)",
    "shardcron.fence": "the fence the leader held",
    "shardcron.shard": "the job's shard",
    "shardcron.node": "the leading node's id",
    "shardcron.executor.kind": "the job's executor kind (http, celery, nats, ...)",
    "shardcron.idempotency_key": "the slot's idempotency key, as the executor sent it",
    "shardcron.http_status": "an http tick's response status",
    "shardcron.exit_code": "a shell tick's exit code",
}

# What the tick's span is to the work it hands on (OpenTelemetry's span kinds).
_KINDS = {
    "http": SpanKind.CLIENT,
    "celery": SpanKind.PRODUCER,
    "rq": SpanKind.PRODUCER,
    "arq": SpanKind.PRODUCER,
    "nats": SpanKind.PRODUCER,
    "amqp": SpanKind.PRODUCER,
    "redis-stream": SpanKind.PRODUCER,
}


class WrittenResult(Protocol):
    """What the result's writer reports (``leader.recorder.ResultWrite``)."""

    @property
    def slot(self) -> SlotRef: ...

    @property
    def attempt(self) -> int: ...


class AttemptSpan:
    """One attempt's span, as the runner moves it on."""

    __slots__ = ("_span", "_spans", "_key")

    def __init__(self, span: trace.Span, spans: TickSpans, key: tuple[SlotRef, int]):
        self._span = span
        self._spans = spans
        self._key = key

    def started(self) -> TraceCarrier:
        """The running mark is written: the executor runs now. The trace context the tick carries on."""
        self._span.add_event("start")
        return carrier_of(self._span)

    async def until_result(self, execution: Awaitable[ExecutionResult], *, last_attempt: int) -> ExecutionResult:
        """Await the executor's result and put it on the span. The slot's last attempt (it succeeded, or
        none is left) has its row written next: its span ends then (``TickSpans.written``)."""
        try:
            result = await execution
        except BaseException as e:  # cancelled as the node stops, or a bug: the span must end all the same
            self._stopped("interrupted", repr(e))
            raise
        _set_result(self._span, result)
        if result.ok or self._key[1] >= last_attempt:
            self._spans.wait_for_write(self._key, self._span)
        else:
            self._span.end(end_time=result.finished_at_ms * NS_PER_MS)
        return result

    def not_started(self, reason: str) -> None:
        """The guard or the running mark stopped the attempt before its executor ran."""
        self._stopped("not started", reason)

    def _stopped(self, event: str, reason: str) -> None:
        self._span.add_event(event, {"shardcron.reason": reason})
        self._span.set_status(Status(StatusCode.ERROR, f"{event}: {reason}"))
        self._span.end()


class TickSpans:
    """Makes the attempts' spans and ends each last attempt's when its row is written (``written``)."""

    def __init__(self, tracer: trace.Tracer, node_id: str):
        self._tracer = tracer
        self._node_id = node_id
        self._awaiting: dict[tuple[SlotRef, int], trace.Span] = {}  # (slot, attempt) -> span; dict ops are atomic

    def attempt(
        self, slot: SlotRef, attempt: int, fence: int, shard: int, kind: str, *, claimed_at_ms: int, start_ms: int
    ) -> AttemptSpan:
        """A span for an attempt starting now (``start_ms``); from the claim when ``claimed_at_ms`` is known (not 0)."""
        span = self._open(slot, attempt, fence, shard, kind, claimed_at_ms, start_ms)
        return AttemptSpan(span, self, (slot, attempt))

    def completed_inline(self, slot: SlotRef, attempt: int, fence: int, shard: int, *, claimed_at_ms: int, at_ms: int):
        """A noop tick, which completes as it starts (at ``at_ms``): its span ends when its row is written."""
        span = self._open(slot, attempt, fence, shard, "noop", claimed_at_ms, at_ms)
        span.add_event("start", timestamp=at_ms * NS_PER_MS)
        _set_result(span, ExecutionResult(True, at_ms, at_ms))
        self.wait_for_write((slot, attempt), span)

    def wait_for_write(self, key: tuple[SlotRef, int], span: trace.Span) -> None:
        self._awaiting[key] = span

    def written(self, writes: Iterable[WrittenResult]) -> None:
        """The writer committed these results (``Recorder.listeners``)."""
        self._end(writes, "result written", None)

    def rejected(self, writes: Iterable[WrittenResult]) -> None:
        """The fence refused these results: a newer leader owns their rows (``Recorder.rejected_listeners``)."""
        self._end(writes, "result rejected by the fence", "the result's write was rejected by the fence")

    def close(self) -> None:
        """The node stops: what still waits for its row ends as unwritten."""
        for key in list(self._awaiting):
            if (span := self._awaiting.pop(key, None)) is not None:
                span.add_event("result not written: the node stopped")
                span.end()

    def _open(
        self, slot: SlotRef, attempt: int, fence: int, shard: int, kind: str, claimed_at_ms: int, start_ms: int
    ) -> trace.Span:
        key = split_key(slot.job_id)
        span = self._tracer.start_span(
            SPAN_NAME,
            kind=_KINDS.get(kind, SpanKind.INTERNAL),
            start_time=(claimed_at_ms or start_ms) * NS_PER_MS,
            attributes={
                "shardcron.job": key.id,
                "shardcron.namespace": key.namespace,
                "shardcron.slot.scheduled_at_ms": slot.scheduled_at_ms,
                "shardcron.slot.scheduled_at": rfc3339_ms(slot.scheduled_at_ms),
                "shardcron.attempt": attempt,
                "shardcron.fence": fence,
                "shardcron.shard": shard,
                "shardcron.node": self._node_id,
                "shardcron.executor.kind": kind,
                "shardcron.idempotency_key": slot_idempotency_key(slot.job_id, slot.scheduled_at_ms),
            },
        )
        if claimed_at_ms:
            span.add_event("claim", timestamp=claimed_at_ms * NS_PER_MS)
        return span

    def _end(self, writes: Iterable[WrittenResult], event: str, error: str | None) -> None:
        for w in writes:
            if (span := self._awaiting.pop((w.slot, w.attempt), None)) is not None:
                span.add_event(event)
                if error is not None:
                    span.set_status(Status(StatusCode.ERROR, error))
                span.end()


def _set_result(span: trace.Span, result: ExecutionResult) -> None:
    """The result as the span's status (left unset on success, as OpenTelemetry's instrumentations do)."""
    if result.http_status is not None:
        span.set_attribute("shardcron.http_status", result.http_status)
    if result.exit_code is not None:
        span.set_attribute("shardcron.exit_code", result.exit_code)
    span.add_event("result", {"shardcron.ok": result.ok}, timestamp=result.finished_at_ms * NS_PER_MS)
    if not result.ok:
        span.set_status(Status(StatusCode.ERROR, result.error or "failed"))


__all__ = ["ATTRIBUTES", "SPAN_NAME", "AttemptSpan", "TickSpans"]
