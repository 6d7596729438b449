"""The consumer guard's verdict on the tick's trace, in a consumer process that traces.

A consumer traces when it has set an OpenTelemetry tracer provider (which imports ``opentelemetry.trace``);
otherwise this does nothing and imports nothing. With one, the verdict is an event (``first``,
``duplicate``, ``stale fence``) on the current span when one is recording (a Celery task's, which
``opentelemetry-instrumentation-celery`` continues from the tick's ``traceparent``), else on a
``shardcron.dedupe`` span of its own, a child of the leader's tick span the tick's trace context names.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

SPAN_NAME = "shardcron.dedupe"
INSTRUMENTATION_NAME = "shardcron.consumer"


def record_verdict(event: str, trace_context: tuple[tuple[str, str], ...], attributes: Mapping[str, str | int]) -> None:
    """``event`` on the tick's trace, if this process traces (see the module's docstring)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:  # never imported: no tracer provider can have been set
        return
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):  # none set
        return
    current = trace.get_current_span()
    if current.is_recording():
        current.add_event(event, attributes)
        return
    from opentelemetry import propagate  # the API is installed: trace is imported

    span = provider.get_tracer(INSTRUMENTATION_NAME).start_span(
        SPAN_NAME, context=propagate.extract(dict(trace_context)), kind=trace.SpanKind.CONSUMER
    )
    span.add_event(event, attributes)
    span.end()
