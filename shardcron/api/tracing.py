"""The API's spans, when tracing is on: a server span per call, continued from the caller's trace context.

``CallSpans`` is the outermost interceptor: a call's span covers its authorization too. A call that
carries a W3C ``traceparent`` in its metadata (a node forwarding a caller's call to the shard's leader puts
its own span's there, ``Router.forward_metadata``) continues that trace, so the leader's span is the
forwarding node's span's child. A unary call's span is the current one while it is served (the forward
is made within it); a stream's span lasts as long as the stream and is not made current, since a stream's
events are produced across many resumptions of its generator.

Imported only when tracing is on (``ApiServer`` is given a tracer): a node without it installs no
interceptor and imports no OpenTelemetry.
"""

from __future__ import annotations

from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shardcron.tracing.propagation import context_from


class CallSpans(grpc.aio.ServerInterceptor):
    def __init__(self, tracer: trace.Tracer):
        self._tracer = tracer

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None:
            return None
        parent = context_from({k: v for k, v in details.invocation_metadata or () if isinstance(v, str)})
        service, _, method = details.method.lstrip("/").rpartition("/")
        name = details.method.lstrip("/")
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, name, parent, attributes),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, name, parent, attributes),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client and bidirectional streams: the API serves none of its own

    def _unary(self, inner, name: str, parent: Any, attributes: dict[str, str]):
        async def traced(request, context):
            with self._tracer.start_as_current_span(
                name, context=parent, kind=SpanKind.SERVER, attributes=attributes, record_exception=False
            ) as span:
                try:
                    return await inner(request, context)
                finally:
                    _set_status(span, context)

        return traced

    def _stream(self, inner, name: str, parent: Any, attributes: dict[str, str]):
        async def traced(request, context):
            span = self._tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)
            try:
                async for event in inner(request, context):
                    yield event
            finally:
                _set_status(span, context)
                span.end()

        return traced


def _set_status(span: trace.Span, context: grpc.aio.ServicerContext) -> None:
    """The call's gRPC status on its span: an error for any code but OK (None, before a handler sets one)."""
    code: Any = context.code()
    value = code.value[0] if isinstance(code, grpc.StatusCode) else int(code or 0)
    span.set_attribute("rpc.grpc.status_code", value)
    if value:
        span.set_status(Status(StatusCode.ERROR, f"{_CODE_NAMES.get(value, value)}: {context.details() or ''}"))


_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
