"""A node (re)started while its store does not answer waits for it (``--store-wait``), as it waits for etcd.

Found by a 1800 s soak (seed 2118487802): a node restarted into a store cut exited 1 at start-up
("store ... unavailable: ... Connection timed out"), with no fault left on it by then.
"""

from __future__ import annotations

import signal

import pytest

from shardcron.dev.testing.cluster import Cluster, NodeProcess, wait_until
from shardcron.store.engine import make_engine
from shardcron.store.migrate import ensure_schema
from tests.support.databases import postgresql_refusing_connections

pytestmark = pytest.mark.cluster


@pytest.fixture
def store_and_cluster(etcd_server, etcd_prefix, fresh_db_url, tmp_path):
    db = fresh_db_url("postgresql")
    engine = make_engine(db)
    ensure_schema(engine, auto_upgrade=True)
    engine.dispose()
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 4, 4, str(tmp_path))
    try:
        yield db, c
    finally:
        c.stop_all()


def _started_waiting(c: Cluster) -> NodeProcess:
    """n0, started, once it says it waits for its store; failing if it exited instead."""
    node = c.add("n0")
    wait_until(
        lambda: "a starting node waits up to --store-wait" in node.log_text() or not node.alive(),
        60,
        0.2,
        "n0 to say it waits for its store",
    )
    assert node.alive(), f"n0 exited while its store refused connections:\n{node.log_text()[-2000:]}"
    return node


def test_a_node_started_while_its_store_refuses_waits_and_then_leads(store_and_cluster):
    db, c = store_and_cluster
    with postgresql_refusing_connections(db) as accept:
        node = _started_waiting(c)
        accept(True)
        c.wait_all_led(90, by={"n0"})
    assert node.alive() and "store ready at" in node.log_text()


def test_a_node_stopped_while_it_waits_for_its_store_exits_cleanly(store_and_cluster):
    db, c = store_and_cluster
    with postgresql_refusing_connections(db):
        node = _started_waiting(c)
        node.signal(signal.SIGTERM)
        assert node.proc is not None and node.proc.wait(30) == 0, node.log_text()[-2000:]
        assert "the node did not start" in node.log_text()


def test_a_store_that_never_answers_ends_the_wait_with_its_error(store_and_cluster):
    db, c = store_and_cluster
    with postgresql_refusing_connections(db):
        node = c.add("n0", extra_args=["--store-wait", "3"])
        assert node.proc is not None and node.proc.wait(60) == 1
        log = node.log_text()
        assert "a starting node waits up to --store-wait" in log, log[-2000:]
        assert "unavailable" in log and "Traceback" not in log, log[-2000:]
