"""pytest fixtures: real etcd servers on free loopback ports, never mocks."""

from __future__ import annotations

import uuid

import pytest

from shardcron.dev.testing.etcd_server import EtcdCluster


@pytest.fixture(scope="session")
def etcd_server():
    """One etcd member shared by the session; tests isolate themselves with ``etcd_prefix``."""
    cluster = EtcdCluster(1).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix no other test uses."""
    return f"/t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def etcd_cluster3():
    cluster = EtcdCluster(3).start()
    yield cluster
    cluster.stop()
