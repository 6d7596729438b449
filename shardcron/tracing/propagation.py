"""A span's W3C trace context as a tick carries it, and back: through OpenTelemetry's propagator API.

The configured propagator (``OTEL_PROPAGATORS``; W3C trace context and baggage by default) writes
``traceparent`` (and ``tracestate`` when the trace has one) into a plain mapping; the executors send those
entries under the same names in every carrier (``executors.identity``), so any OpenTelemetry-instrumented
receiver, Celery's included, finds them where it looks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate, trace

TraceCarrier = tuple[tuple[str, str], ...]  # what TickContext.trace holds: hashable, like the context itself


def carrier_of(span: trace.Span) -> TraceCarrier:
    """``span``'s trace context as name/value pairs (``traceparent``, ``tracestate``)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return tuple(carrier.items())


def current_carrier() -> TraceCarrier:
    """The current span's trace context (a forwarded gRPC call's), or ``()`` without a current span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())


def context_from(carrier: Mapping[str, Any]) -> Any:
    """The ``opentelemetry.context.Context`` a carrier's trace context continues (an empty one without)."""
    return propagate.extract(carrier)
