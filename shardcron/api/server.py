"""The node's gRPC server: the Scheduler service, grpc.health.v1 and server reflection.

``start_server(backend, cfg)`` is what ``Node.start`` calls. Each handler is
wrapped so that whatever it raises becomes a proper status (``status.py``),
with the answering node's id in the trailing metadata; a request that cannot
even be parsed is INVALID_ARGUMENT, not the INTERNAL grpc would return.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from shardcron.api.security import ChannelSecurity, ServerSecurity, TokenCheck, server_credentials
from shardcron.abc import Backend
from shardcron.api.routing import MAX_MESSAGE_BYTES, Router
from shardcron.api.service import SchedulerService
from shardcron.api.status import NODE_HEADER, RETRY_HEADER, clip, log_if_bug, retry_hint, status_for
from shardcron.config import NodeConfig
from shardcron.errors import ConfigError
from shardcron.v1 import scheduler_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Scheduler"].full_name  # "shardcron.v1.Scheduler"
WORKERS = 128  # each WatchTicks holds one for its whole life
HEALTH_POLL_S = 0.25

SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Two nodes must never share a port silently (grpc sets SO_REUSEPORT by default).
    ("grpc.so_reuseport", 0),
)


class _Malformed:
    """What the request parser hands over when the bytes are not the request message."""

    def __init__(self, message_name: str, error: Exception):
        self.message_name = message_name
        self.error = error


def _parser(cls) -> Callable[[bytes], object]:
    def parse(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as e:  # noqa: BLE001 - DecodeError, invalid UTF-8, ...: the caller's bytes
            return _Malformed(cls.DESCRIPTOR.full_name, e)
    return parse


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


class _Wrap:
    """Turns a servicer method into a grpc handler that never leaks an exception as UNKNOWN."""

    def __init__(self, node_id: str):
        self._node = _ascii(node_id)

    def fail(self, context: grpc.ServicerContext, exc: BaseException, method: str):
        log_if_bug(exc, method)
        code, details = status_for(exc)
        md = [(NODE_HEADER, self._node)]
        if retry_hint(exc):
            md.append((RETRY_HEADER, "1"))
        context.set_trailing_metadata(md)
        context.abort(code, clip(details))

    def malformed(self, context: grpc.ServicerContext, request: _Malformed):
        context.set_trailing_metadata([(NODE_HEADER, self._node)])
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      clip(f"request: not a valid {request.message_name}: {request.error}"))

    def unary(self, fn, method: str):
        def handle(request, context):
            if isinstance(request, _Malformed):
                self.malformed(context, request)
            try:
                return fn(request, context)
            except Exception as e:  # noqa: BLE001 - every failure gets a status
                self.fail(context, e, method)
        return handle

    def stream(self, fn, method: str):
        def handle(request, context):
            if isinstance(request, _Malformed):
                self.malformed(context, request)
            try:
                yield from fn(request, context)
            except Exception as e:  # noqa: BLE001 - every failure gets a status
                self.fail(context, e, method)
        return handle


def scheduler_handler(service: SchedulerService, node_id: str) -> grpc.GenericRpcHandler:
    wrap = _Wrap(node_id)
    handlers = {}
    for m in pb.DESCRIPTOR.services_by_name["Scheduler"].methods:
        req, resp = getattr(pb, m.input_type.name), getattr(pb, m.output_type.name)
        fn = getattr(service, m.name)
        if m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                wrap.stream(fn, m.name), request_deserializer=_parser(req),
                response_serializer=resp.SerializeToString)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                wrap.unary(fn, m.name), request_deserializer=_parser(req),
                response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


class ApiServer:
    """A running API server; ``stop()`` ends it (Node.close calls it)."""

    def __init__(self, backend: Backend, listen: str, advertise: str, security: ServerSecurity | None = None,
                 forward: ChannelSecurity | None = None):
        self.backend = backend
        self.listen = listen
        self.stopping = threading.Event()
        self.security = security or ServerSecurity()
        self.router = Router(backend, advertise, forward)
        self.service = SchedulerService(backend, self.router, self.stopping)
        self.health = health.HealthServicer()
        interceptors = [TokenCheck(self.security.tokens)] if self.security.tokens else []
        self._server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="api"),
                                   options=SERVER_OPTIONS, interceptors=interceptors)
        self._server.add_generic_rpc_handlers((scheduler_handler(self.service, backend.node_id),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self._server)
        self.port = self._bind(listen)
        self._serving: bool | None = None
        self._health_thread = threading.Thread(target=self._watch_membership, name="api-health", daemon=True)

    def _bind(self, listen: str) -> int:
        creds = server_credentials(self.security)
        try:
            port = (self._server.add_secure_port(listen, creds) if creds else self._server.add_insecure_port(listen))
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(f"--listen: cannot listen on {listen}: the port is in use, or the address is not "
                              f"one of this host's")
        return port

    def start(self) -> ApiServer:
        self._set_health(self.backend.joined.is_set())
        self._server.start()
        self._health_thread.start()
        log.info("API listening on %s", self.listen)
        return self

    def _set_health(self, serving: bool) -> None:
        if serving == self._serving:
            return
        self._serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def _watch_membership(self) -> None:
        while not self.stopping.wait(HEALTH_POLL_S):
            self._set_health(self.backend.joined.is_set())

    def stop(self, grace: float | None = 2.0) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.health.enter_graceful_shutdown()
        done = self._server.stop(grace)
        done.wait((grace or 0) + 5)
        self.router.close()
        self.service.close()
        self._health_thread.join(2)


def start_server(backend: Backend, cfg: NodeConfig) -> ApiServer:
    """Bind ``cfg.listen`` and serve; ``ConfigError`` naming the address if it cannot be bound."""
    return ApiServer(backend, cfg.listen, cfg.advertise, cfg.api_security, cfg.forward_security).start()
