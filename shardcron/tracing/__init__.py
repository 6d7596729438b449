"""OpenTelemetry tracing, an optional extra (``pip install 'shardcron[otel]'``).

``settings`` decides from the standard ``OTEL_*`` environment whether tracing is on, without importing
OpenTelemetry; ``setup`` builds the tracer provider and its OTLP exporter (imported only when it is on);
``tick_spans`` makes the leader's span per tick attempt; ``propagation`` carries a span's W3C trace context
in a tick's identity and reads it back; ``verdicts`` puts the consumer guard's verdict on the trace a tick
carries. A node without ``OTEL_*`` tracing settings never imports ``opentelemetry``.
"""
