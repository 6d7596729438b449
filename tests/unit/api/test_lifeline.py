"""The API server's and the dashboard's threads end on purpose when they stop, or when their start fails (a taken
port), even while the node is not stopping: neither is reported to the node's lifeline as a death. The deaths
themselves are in tests/integration/node/test_worker_death.py.
"""

from __future__ import annotations

import socket
import threading

import pytest
from prometheus_client import CollectorRegistry

from shardcron.api.server import ApiServer
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.server import Dashboard, DashboardServer
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.errors import ConfigError
from shardcron.runtime.lifeline import Lifeline


class _Backend:
    node_id = "solo"
    shard_count = 1
    allow_shell = False
    engine = None

    def __init__(self, lifeline: Lifeline):
        self.joined = threading.Event()
        self.lifeline = lifeline

    def shard_map(self):
        return {"prefix": "/x", "shard_count": 1, "revision": 0, "shards": [], "nodes": []}

    def subscribe_ticks(self, callback):
        return lambda: None


@pytest.fixture
def deaths():
    """The node's lifeline (its ``stopping`` never set) and what it was told."""
    told: list[tuple[str, BaseException | None]] = []
    return Lifeline(lambda name, error: told.append((name, error))), told


def test_an_api_server_that_stops_reports_no_death(deaths):
    lifeline, told = deaths
    address = f"127.0.0.1:{free_port()}"
    server = ApiServer(_Backend(lifeline), address, address).start()
    server.stop(0)
    assert told == []


def test_an_api_server_whose_port_is_taken_reports_no_death(deaths):
    lifeline, told = deaths
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ConfigError):
            ApiServer(_Backend(lifeline), address, address)
    assert told == []


def _dashboard(lifeline: Lifeline, listen: str) -> DashboardServer:
    return DashboardServer(
        Dashboard(
            node_id="solo",
            api=None,
            tokens=None,
            history=MetricsHistory(CollectorRegistry()),
            lifeline=lifeline,
        ),
        listen,
    )


def test_a_dashboard_that_stops_reports_no_death(deaths):
    lifeline, told = deaths
    server = _dashboard(lifeline, f"127.0.0.1:{free_port()}").start()
    server.stop()
    assert told == []


def test_a_dashboard_whose_port_is_taken_reports_no_death(deaths):
    lifeline, told = deaths
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ConfigError):
            _dashboard(lifeline, f"127.0.0.1:{s.getsockname()[1]}").start()
    wait_until(
        lambda: not any(t.name == "dashboard" for t in threading.enumerate()), 10, what="the dashboard's thread to end"
    )
    assert told == []
