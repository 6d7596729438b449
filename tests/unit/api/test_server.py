"""The API server on its own: health follows membership, and a taken port is a clear ConfigError.

The backend here is a bare stand-in (no store, no etcd): these tests only
exercise the server's own plumbing. Everything else runs against real nodes
in tests/integration/test_api*.py.
"""

from __future__ import annotations

import socket
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.api.server import SERVICE_NAME, ApiServer
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.errors import ConfigError


class _Unjoined:
    node_id = "solo"
    shard_count = 1
    allow_shell = False
    engine = None

    def __init__(self):
        self.joined = threading.Event()

    def shard_map(self):
        return {"prefix": "/x", "shard_count": 1, "revision": 0, "shards": [], "nodes": []}

    def subscribe_ticks(self, callback):
        return lambda: None


def _health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_health_is_serving_only_while_the_node_is_a_member():
    backend = _Unjoined()
    address = f"127.0.0.1:{free_port()}"
    server = ApiServer(backend, address, address).start()
    try:
        assert _health(address) == health_pb2.HealthCheckResponse.NOT_SERVING
        backend.joined.set()
        wait_until(lambda: _health(address) == health_pb2.HealthCheckResponse.SERVING, 5, what="SERVING")
        assert _health(address, SERVICE_NAME) == health_pb2.HealthCheckResponse.SERVING
        backend.joined.clear()
        wait_until(lambda: _health(address) == health_pb2.HealthCheckResponse.NOT_SERVING, 5, what="NOT_SERVING")
    finally:
        server.stop(0)


def test_a_port_in_use_is_a_config_error_naming_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ConfigError) as e:
            ApiServer(_Unjoined(), address, address)
    assert address in str(e.value) and "--listen" in str(e.value)
