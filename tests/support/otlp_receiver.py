"""A small OTLP trace receiver for tests: OTLP/gRPC and OTLP/HTTP (protobuf) on loopback, collecting spans.

It parses what exporters send with ``opentelemetry-proto``'s generated messages, as a collector would, and
keeps each span as a ``ReceivedSpan``: the node's and a worker's spans land in one list, so a test can
follow a trace across processes. ``dump(path)`` writes them as JSON (``scripts/trace_waterfall.py`` draws
that).
"""

from __future__ import annotations

import json
import threading
from concurrent import futures
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from shardcron.dev.testing.cluster import wait_until


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    kind: int  # OTLP's SpanKind number (1 internal, 2 server, 3 client, 4 producer, 5 consumer)
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # {"name", "time_ns", "attributes"}
    status_code: int = 0  # 0 unset, 1 ok, 2 error
    status_message: str = ""


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attributes(kvs) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpReceiver:
    """``with OtlpReceiver() as r``: ``r.grpc_endpoint``, ``r.http_endpoint``, ``r.spans``, ``r.wait_for``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.http_port = self._http.server_address[1]
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="otlp-http", daemon=True)

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def __enter__(self) -> OtlpReceiver:
        self._grpc.start()
        self._http_thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._grpc.stop(grace=None)
        self._http.shutdown()
        self._http.server_close()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate, what: str, timeout_s: float = 60.0) -> list[ReceivedSpan]:
        """The spans received once ``predicate(spans)`` holds."""
        return wait_until(lambda: (s := self.spans) and predicate(s) and s, timeout_s, what=what)

    def dump(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump([asdict(s) for s in self.spans], f, indent=1)

    def take(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        got = []
        for rs in request.resource_spans:
            service = str(_attributes(rs.resource.attributes).get("service.name", ""))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        ReceivedSpan(
                            service=service,
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            kind=s.kind,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes=_attributes(s.attributes),
                            events=[
                                {"name": e.name, "time_ns": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                                for e in s.events
                            ],
                            status_code=s.status.code,
                            status_message=s.status.message,
                        )
                    )
        with self._lock:
            self._spans.extend(got)


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver):
        self._receiver = receiver

    def Export(self, request, context):  # noqa: N802 - the generated service's name
        self._receiver.take(request)
        return trace_service_pb2.ExportTraceServiceResponse()


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.take(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args) -> None:
            pass

    return Handler


def descends_from(span: ReceivedSpan, ancestor: ReceivedSpan, spans: list[ReceivedSpan]) -> bool:
    """Whether ``span`` is ``ancestor``'s child, directly or through spans received."""
    by_id = {s.span_id: s for s in spans}
    parent = span.parent_span_id
    while parent is not None:
        if parent == ancestor.span_id:
            return True
        parent = by_id[parent].parent_span_id if parent in by_id else None
    return False
