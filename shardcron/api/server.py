"""The node's gRPC server: the Scheduler service, grpc.health.v1 and server reflection, on ``grpc.aio``.

``start_server(backend, cfg, loop)`` is what ``Node.start`` calls. The server
runs on the node's one event loop (``runtime.node_loop``), beside the ticks'
coroutines and the dashboard: a call costs no thread, so thousands of open
WatchTicks streams cost memory, not workers, and health checks, GetShards and
forwarded calls are answered beside them. Nothing here may block that loop:
what touches the store runs on a bounded pool (``POOL_WORKERS``), awaited by
the call, and what start-up reads from etcd is read before the loop is
entered. A server made without the node's loop (a test) starts a loop of its
own ("api-loop") and closes it when it stops.

Each handler is wrapped so that whatever it raises becomes a proper status
(``status.py``), with the answering node's id in the trailing metadata; a
request that cannot even be parsed is INVALID_ARGUMENT, not the INTERNAL grpc
would return, and one over --max-request-bytes is RESOURCE_EXHAUSTED naming
the flag. Streams take a slot of ``limits.StreamSlots`` for their lifetime.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from shardcron.abc import Backend
from shardcron.api.auth import Authorize
from shardcron.api.health_port import HealthPort, LoopBeat
from shardcron.api.in_process import InProcessApi
from shardcron.api.limits import ApiLimits, StreamSlots, peer_host
from shardcron.api.peers import Seal, cluster_seal, node_local_seal
from shardcron.api.routing import Router, is_forwarded
from shardcron.api.security import ServerSecurity, server_credentials
from shardcron.api.service import SchedulerService
from shardcron.api.status import CallFailed, clip, log_if_bug, retry_hint, status_for
from shardcron.api.token_source import NodeTokens
from shardcron.client.channel import (
    KEEPALIVE_TIME_MS,
    KEEPALIVE_TIMEOUT_MS,
    MAX_ANSWER_BYTES,
    NODE_HEADER,
    RETRY_HEADER,
    ChannelSecurity,
    channel_options,
)
from shardcron.config import NodeConfig
from shardcron.coordination.store_watch import WatchTask
from shardcron.errors import ConfigError
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import NodeLoop
from shardcron.store.tokens import list_tokens
from shardcron.v1 import scheduler_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Scheduler"].full_name  # "shardcron.v1.Scheduler"
POOL_WORKERS = 64  # store reads and writes of calls; a call waits for one, a stream never holds one
HEALTH_POLL_S = 0.25
START_WITHIN_S = 60.0  # building and starting the server on the loop: far longer than it takes, never forever
STOP_SLACK_S = 10.0


def server_options(limits: ApiLimits, keepalive_time_ms: int, keepalive_timeout_ms: int) -> list[tuple]:
    return [
        # grpc refuses what is over its own limit with a message of its own; with room above
        # --max-request-bytes, the request parser refuses first and names the flag.
        ("grpc.max_receive_message_length", min(2 * limits.max_request_bytes, 2**31 - 1)),
        ("grpc.max_send_message_length", MAX_ANSWER_BYTES),
        # Two nodes must never share a port silently (grpc sets SO_REUSEPORT by default).
        ("grpc.so_reuseport", 0),
        # A caller that froze or vanished (half-open TCP) gives its streams' slots back
        # within time + timeout, and callers may ping as often as the nodes do.
        ("grpc.keepalive_time_ms", keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        ("grpc.http2.ping_timeout_ms", keepalive_timeout_ms),  # see client.channel.channel_options
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", min(1000, keepalive_time_ms)),
        # Calls that arrived but that the loop has not taken yet. Past grpc's default (1,000)
        # a burst of new streams loses some: seen here, 2,000 watchers opened at once left
        # 20-80 of them open on the caller's side, with empty headers, never served. The
        # limits above refuse what is too much, by name, once a call is taken.
        ("grpc.server.max_pending_requests", max(limits.max_streams, 10_000)),
        ("grpc.server.max_pending_requests_hard_limit", 2 * max(limits.max_streams, 10_000)),
    ]


class _Refused:
    """What the request parser hands over when it will not make a request of the bytes."""

    def __init__(self, code: grpc.StatusCode, details: str):
        self.code = code
        self.details = details


def _parser(cls, max_bytes: int) -> Callable[[bytes], object]:
    name = cls.DESCRIPTOR.full_name

    def parse(data: bytes):
        if len(data) > max_bytes:
            return _Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"request: {len(data)} bytes; this node's --max-request-bytes is {max_bytes}",
            )
        try:
            return cls.FromString(data)
        except Exception as e:  # noqa: BLE001 - DecodeError, invalid UTF-8, ...: the caller's bytes
            return _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {name}: {e}")

    return parse


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


class _Wrap:
    """Turns a servicer method into a grpc handler that never leaks an exception as UNKNOWN."""

    def __init__(self, node_id: str, slots: StreamSlots):
        self._node = _ascii(node_id)
        self._slots = slots

    async def fail(self, context: grpc.aio.ServicerContext, exc: BaseException, method: str):
        log_if_bug(exc, method)
        code, details = status_for(exc)
        md = [(NODE_HEADER, self._node)]
        if retry_hint(exc):
            md.append((RETRY_HEADER, "1"))
        context.set_trailing_metadata(md)
        await context.abort(code, clip(details))

    async def refuse(self, context: grpc.aio.ServicerContext, request: _Refused):
        context.set_trailing_metadata([(NODE_HEADER, self._node)])
        await context.abort(request.code, clip(request.details))

    def unary(self, fn, method: str):
        async def handle(request, context):
            if isinstance(request, _Refused):
                await self.refuse(context, request)
            try:
                return await fn(request, context)
            except Exception as e:  # noqa: BLE001 - every failure gets a status
                await self.fail(context, e, method)

        return handle

    def stream(self, fn, method: str):
        async def handle(request, context):
            if isinstance(request, _Refused):
                await self.refuse(context, request)
            peer = peer_host(context.peer())
            try:
                self._slots.acquire(peer, forwarded=is_forwarded(context))
            except CallFailed as e:
                await self.fail(context, e, method)
            try:
                events = fn(request, context)  # a bad request raises here, before the stream is taken as open
                # Headers now, not with the first event: the caller knows its watch is in place.
                await context.send_initial_metadata(((NODE_HEADER, self._node),))
                async for event in events:
                    yield event
            except Exception as e:  # noqa: BLE001 - every failure gets a status
                await self.fail(context, e, method)
            finally:
                self._slots.release(peer)

        return handle


def scheduler_handler(
    service: SchedulerService, node_id: str, slots: StreamSlots, max_request_bytes: int
) -> grpc.GenericRpcHandler:
    wrap = _Wrap(node_id, slots)
    handlers = {}
    for m in pb.DESCRIPTOR.services_by_name["Scheduler"].methods:
        req, resp = getattr(pb, m.input_type.name), getattr(pb, m.output_type.name)
        fn = getattr(service, m.name)  # every RPC of the proto is served (AttributeError at start otherwise)
        if m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                wrap.stream(fn, m.name),
                request_deserializer=_parser(req, max_request_bytes),
                response_serializer=resp.SerializeToString,
            )
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                wrap.unary(fn, m.name),
                request_deserializer=_parser(req, max_request_bytes),
                response_serializer=resp.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


class ApiServer:
    """A running API server; ``stop()`` ends it (Node.close calls it)."""

    def __init__(
        self,
        backend: Backend,
        listen: str,
        advertise: str,
        security: ServerSecurity | None = None,
        forward: ChannelSecurity | None = None,
        limits: ApiLimits | None = None,
        keepalive_ms: tuple[int, int] = (KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS),
        health_listen: str | None = None,
        loop: NodeLoop | None = None,
        settings: WatchTask | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        tracer: Any = None,
    ):
        self.backend = backend
        self.interceptors = tuple(interceptors)  # after the API's own (a test counts the calls that arrive)
        self.tracer = tracer  # an OpenTelemetry tracer when tracing is on: a span per call (api/tracing.py)
        self.settings = settings  # the token watch runs on it, beside the node's other settings
        self.listen = listen
        self.stopping = threading.Event()
        self.security = security or ServerSecurity()
        self.limits = limits or ApiLimits.defaults()
        self.keepalive_ms = keepalive_ms
        self.slots = StreamSlots(self.limits.max_streams, self.limits.max_streams_per_peer)
        self.pool = ThreadPoolExecutor(max_workers=POOL_WORKERS, thread_name_prefix="api")
        # The API's workers end on purpose when the server stops (a failed start stops it too), which may come
        # before the node's own stopping; any other end is reported to the node's lifeline.
        self.lifeline = Lifeline(getattr(backend, "lifeline", UNWATCHED).report, stopping=self.stopping)
        self._owns_loop = loop is None
        self.loop = NodeLoop("api-loop", self.lifeline).start() if loop is None else loop
        self._serving: bool | None = None
        self._membership: asyncio.Task | None = None
        self.beat = LoopBeat()
        self.health_port: HealthPort | None = None
        try:
            seal = self._seal()  # an etcd read: here, not on the loop
            self.port = self._on_loop(self._build(advertise, forward, seal))
            if health_listen:
                self.health_port = HealthPort(
                    health_listen, frozenset(("", SERVICE_NAME)), backend.joined, self.stopping, self.beat
                )
        except BaseException:
            self.stopping.set()
            self._end_loop()
            raise

    def _on_loop(self, coro, timeout: float = START_WITHIN_S):
        return self.loop.run(coro, timeout)

    def _seal(self) -> Seal:
        """The cluster's forwarding seal, from etcd (created there by the first node); a node-local one for a
        stand-in backend without etcd, which has no peer to forward to."""
        etcd, layout = getattr(self.backend, "etcd", None), getattr(self.backend, "layout", None)
        if etcd is None:
            return node_local_seal()
        assert layout is not None, "a backend with etcd has its key layout"
        return cluster_seal(etcd, layout.forwarding_secret)

    async def _build(self, advertise: str, forward: ChannelSecurity | None, seal: Seal) -> int:
        self.router = Router(
            self.backend, advertise, forward, pool=self.pool, options=channel_options(*self.keepalive_ms), seal=seal
        )
        own: list[grpc.aio.ServerInterceptor] = []
        if self.tracer is not None:  # tracing on: imports OpenTelemetry, which a node without it never does
            from shardcron.api.tracing import CallSpans
            from shardcron.tracing.propagation import current_carrier

            own.append(CallSpans(self.tracer))
            self.router.trace_metadata = current_carrier
        self.service = SchedulerService(self.backend, self.router, self.stopping, self.limits, self.lifeline)
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]  # grpc_health stubs lack aio
        # Tokens are checked when the node has a token file; the store's tokens then add to the file's.
        self.tokens = None
        if self.security.tokens is not None:
            engine = self.backend.engine
            self.tokens = NodeTokens(
                self.security.tokens, lambda: [s.token for s in list_tokens(engine)], lifeline=self.lifeline
            )
            if getattr(self.backend, "etcd", None) is not None:
                self.tokens.watch(self.backend.etcd, self.backend.layout.tokens)
        self.service.node_tokens = self.tokens  # the token RPCs: file tokens, and reload after a write
        self.in_process = InProcessApi(
            self.service, self.tokens, self.slots
        )  # the dashboard's calls, without a channel
        # Always: it checks a forwarded marker's seal; with tokens, it authorizes and audits too.
        self._server = grpc.aio.server(
            options=server_options(self.limits, *self.keepalive_ms),
            interceptors=[*own, Authorize(self.tokens, seal), *self.interceptors],
        )
        self._server.add_generic_rpc_handlers(
            (scheduler_handler(self.service, self.backend.node_id, self.slots, self.limits.max_request_bytes),)
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server)
        return self._bind(self.listen)

    def _bind(self, listen: str) -> int:
        creds = server_credentials(self.security)
        try:
            port = self._server.add_secure_port(listen, creds) if creds else self._server.add_insecure_port(listen)
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(
                f"--listen: cannot listen on {listen}: the port is in use, or the address is not one of this host's"
            )
        return port

    def start(self) -> ApiServer:
        if self.tokens is not None:
            self.tokens.start(self.settings)  # the store's tokens, read before the first call
        self._on_loop(self._start())
        log.info("API listening on %s", self.listen)
        return self

    async def _start(self) -> None:
        await self._set_health(self.backend.joined.is_set())
        await self._server.start()
        self._membership = self.lifeline.task(asyncio.get_running_loop(), self._watch_membership(), "api-membership")

    async def _set_health(self, serving: bool) -> None:
        if serving == self._serving:
            return
        self._serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def _watch_membership(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(HEALTH_POLL_S)
            self.beat.beat()
            await self._set_health(self.backend.joined.is_set())

    def stop(self, grace: float | None = 2.0) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        try:
            if self.loop.running:  # else the loop died, and what ran on it with it
                self._on_loop(self._stop(grace), timeout=(grace or 0) + STOP_SLACK_S)
        except Exception:  # noqa: BLE001 - stopping goes on; what is left dies with the loop
            log.warning("the API server did not stop cleanly", exc_info=True)
        if self.tokens is not None:
            self.tokens.stop()  # joins the reload's threads: here, not on the loop
        if self.health_port is not None:
            self.health_port.stop()
        self._end_loop()

    async def _stop(self, grace: float | None) -> None:
        await self.health.enter_graceful_shutdown()
        if self._membership is not None:
            self._membership.cancel()
        self.service.watches.hub.wake_all()  # streams end now, not at the end of the grace
        await self._server.stop(grace)
        await self.router.close()
        self.service.close()

    def _end_loop(self) -> None:
        if self._owns_loop:  # the node's loop goes on: the executors use it until the node closes it
            self.loop.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def start_server(
    backend: Backend,
    cfg: NodeConfig,
    loop: NodeLoop | None = None,
    settings: WatchTask | None = None,
    tracer: Any = None,
) -> ApiServer:
    """Bind ``cfg.listen`` and serve on ``loop`` (the node's), the token watch on ``settings`` (the node's task);
    ``ConfigError`` naming the address if it cannot be bound. ``tracer``: a span per call (tracing on)."""
    return ApiServer(
        backend,
        cfg.listen,
        cfg.advertise,
        cfg.api_security,
        cfg.forward_security,
        cfg.api_limits,
        cfg.keepalive_ms,
        cfg.health_listen,
        loop,
        settings,
        tracer=tracer,
    ).start()
