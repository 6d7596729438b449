"""pytest fixture: clusters of real node processes, stopped after the test, whose logs must hold no traceback."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from shardcron.dev.testing.cluster import Cluster

TTL = 4  # short, so that failovers in tests take seconds


@pytest.fixture
def make_cluster(etcd_server, etcd_prefix, tmp_path):
    """``make_cluster(db, shards=16, extra_args=None)``: a Cluster over the session's etcd."""
    made: list[Cluster] = []

    def make(db: str, shards: int = 16, extra_args: list[str] | None = None) -> Cluster:
        c = Cluster(etcd_server.endpoints, db, etcd_prefix, shards, TTL, str(tmp_path), extra_args=extra_args or [])
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop_all()
    for c in made:
        assert_no_traceback(c)


def assert_no_traceback(c: Cluster) -> None:
    for n in c.nodes.values():
        text = n.log_text()
        assert "Traceback" not in text, f"{n.node_id} logged a traceback:\n{text[-4000:]}"


@contextmanager
def stopped_after(c: Cluster, *cleanup: Callable[[], None]) -> Iterator[Cluster]:
    """``c`` for the block (a module fixture's ``yield`` inside it); then stopped, ``cleanup`` run, and
    every node's log checked for tracebacks."""
    try:
        yield c
    finally:
        c.stop_all()
        for f in cleanup:
            f()
    assert_no_traceback(c)


@contextmanager
def sqlite_cluster(
    etcd_server, tmp_path_factory, name: str, shards: int, node_ids: list[str], extra_args: list[str] | None = None
) -> Iterator[tuple[Cluster, list, str]]:
    """A module's own cluster: nodes ``node_ids`` (TTL 4 s) over a fresh SQLite store and an etcd prefix of its
    own, yielded balanced as ``(cluster, nodes, db_url)``; stopped afterwards, each log checked for tracebacks."""
    d = tmp_path_factory.mktemp(name)
    url = f"sqlite:///{d}/store.db"
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", shards, TTL, str(d))
    with stopped_after(c):
        nodes = [c.add(node_id, extra_args=extra_args or []) for node_id in node_ids]
        c.wait_balanced(set(node_ids), 90)
        yield c, nodes, url
