"""pytest fixture: clusters of real node processes, stopped after the test, whose logs must hold no traceback."""

from __future__ import annotations

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
