"""grpc.health.v1 ``Check`` on a port of its own (``--health-listen``), answered by its own threads.

The API's health service shares the node's one event loop with every call,
stream and tick, so a loop saturated by API load delays it with the rest. A probe
(Kubernetes' gRPC probe, grpc_health_probe, a load balancer) that times out
then restarts or drains a node that is only busy. This port is served by a
separate, thread-based grpc server, so the API's load can delay an answer by
no more than the GIL's switch interval, whatever the load.

The answer is computed at each ``Check`` from the node itself, not copied from
the loop (a copy made on a starved loop would be stale):

    SERVING      the node has joined the cluster, is not stopping, and the node's
                 loop has run within ``LOOP_STALL_S`` (it beats every
                 ``server.HEALTH_POLL_S``; a loop that has not run for that long is
                 wedged, not busy);
    NOT_SERVING  otherwise.

``Watch`` is not served here: a watch would hold one of the port's few threads
for its lifetime, so a handful of watchers could starve the probes this port
exists for. It stays on the API port (``--listen``), with the same statuses.
The port speaks plain HTTP/2 without a token, as the probes of orchestrators
expect; it tells nothing but the node's status. Bind it where they reach it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.errors import ConfigError

LOOP_STALL_S = 30.0
_THREADS = 4  # Check answers at once; a probe is one call every few seconds


class LoopBeat:
    """When the node's loop last ran (the API's membership task beats it): ``beat()`` on the loop, ``age_s()`` from any thread."""

    def __init__(self) -> None:
        self._at = time.monotonic()

    def beat(self) -> None:
        self._at = time.monotonic()

    def age_s(self) -> float:
        return time.monotonic() - self._at


class _CheckOnly(health_pb2_grpc.HealthServicer):
    def __init__(self, services: frozenset[str], serving: Callable[[], bool]) -> None:
        self._services = services
        self._serving = serving

    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext):  # noqa: N802 - grpc's name
        if request.service not in self._services:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"unknown service {request.service!r}: this node serves "
                f"{', '.join(repr(s) for s in sorted(self._services))}",
            )
        status = (
            health_pb2.HealthCheckResponse.SERVING if self._serving() else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext):  # noqa: N802
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "Watch is served on the API port (--listen); this port (--health-listen) answers Check only",
        )


class HealthPort:
    """Serves ``Check`` on ``listen`` until ``stop()``; ConfigError naming the flag if it cannot bind."""

    def __init__(
        self, listen: str, services: frozenset[str], joined: threading.Event, stopping: threading.Event, beat: LoopBeat
    ) -> None:
        def serving() -> bool:
            return joined.is_set() and not stopping.is_set() and beat.age_s() < LOOP_STALL_S

        self.listen = listen
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="health"), options=[("grpc.so_reuseport", 0)]
        )
        health_pb2_grpc.add_HealthServicer_to_server(_CheckOnly(services, serving), self._server)
        try:
            self.port = self._server.add_insecure_port(listen)
        except RuntimeError:
            self.port = 0
        if not self.port:
            raise ConfigError(
                f"--health-listen: cannot listen on {listen}: the port is in use, or the address is "
                f"not one of this host's"
            )
        self._server.start()

    def stop(self, grace: float | None = 1.0) -> None:
        self._server.stop(grace).wait(grace)
