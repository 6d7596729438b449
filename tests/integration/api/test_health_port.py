"""``--health-listen``: grpc.health.v1 Check on a port of its own, served by its own threads.

``HealthPort`` is driven over real gRPC on loopback (its status comes from two
events and the API loop's beat, which the tests set); a real node shows the
flag wired through, and a taken port stops a node with an error naming it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.api import health_port
from shardcron.api.health_port import HealthPort, LoopBeat
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICES = frozenset(("", "shardcron.v1.Scheduler"))


def check(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


@pytest.fixture
def port():
    joined, stopping, beat = threading.Event(), threading.Event(), LoopBeat()
    served = HealthPort(f"127.0.0.1:{free_port()}", SERVICES, joined, stopping, beat)
    try:
        yield served, joined, stopping, beat
    finally:
        served.stop()


def test_serving_only_once_joined_and_until_stopping(port):
    served, joined, stopping, _ = port
    assert check(served.listen) == NOT_SERVING  # not joined yet
    joined.set()
    assert [check(served.listen, s) for s in ("", "shardcron.v1.Scheduler")] == [SERVING, SERVING]
    stopping.set()
    assert check(served.listen) == NOT_SERVING


def test_a_wedged_api_loop_is_not_serving(port, monkeypatch):
    served, joined, _, beat = port
    joined.set()
    assert check(served.listen) == SERVING
    monkeypatch.setattr(health_port, "LOOP_STALL_S", 0.0)  # the last beat is now too old
    assert check(served.listen) == NOT_SERVING
    monkeypatch.setattr(health_port, "LOOP_STALL_S", 30.0)
    beat.beat()
    assert check(served.listen) == SERVING


def test_unknown_service_and_watch_are_refused_with_a_reason(port):
    served, joined, _, _ = port
    joined.set()
    with pytest.raises(grpc.RpcError) as e:
        check(served.listen, "nope.v1.Thing")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "'nope.v1.Thing'" in e.value.details()
    with grpc.insecure_channel(served.listen) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=10)
        with pytest.raises(grpc.RpcError) as e:
            next(watch)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED and "--listen" in e.value.details()


@pytest.mark.cluster
def test_a_node_answers_on_its_health_port_and_a_taken_one_is_named(etcd_server, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(tmp_path),
        extra_args=["--health-listen", address],
    )
    try:
        c.add("n0")
        c.wait_all_led(60)
        wait_until(lambda: check(address) == SERVING, 30, 0.5, "the health port to say SERVING")
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "shardcron",
                "node",
                "--listen",
                f"127.0.0.1:{free_port()}",
                "--health-listen",
                address,
                "--etcd",
                etcd_server.endpoints,
                "--db",
                f"sqlite:///{tmp_path}/x.db",
                "--prefix",
                f"/t{uuid.uuid4().hex[:12]}",
                "--shards",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        c.stop_all()
    assert out.returncode != 0
    assert f"shardcron: error: --health-listen: cannot listen on {address}" in out.stderr
    assert "Traceback" not in out.stderr
