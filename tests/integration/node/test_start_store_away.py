"""A node (re)started while its store does not answer waits for it (``--store-wait``), as it waits for etcd.

Found by a 1800 s soak (seed 2118487802): a node restarted into a store cut exited 1 at start-up
("store ... unavailable: ... Connection timed out"), with no fault left on it by then.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.store.engine import make_engine
from shardcron.store.migrate import ensure_schema
from tests.support.databases import SERVER_URLS

pytestmark = pytest.mark.cluster


@contextmanager
def refusing_connections(url: str) -> Iterator[Callable[[bool], None]]:
    """PostgreSQL refusing new connections to ``url``'s database (as a store restarting does) until told."""
    engine = make_engine(url)
    ensure_schema(engine, auto_upgrade=True)
    engine.dispose()
    database = make_engine(url).url.database
    admin = make_engine(SERVER_URLS["postgresql"]).execution_options(isolation_level="AUTOCOMMIT")

    def accept(allowed: bool) -> None:
        with admin.connect() as c:
            c.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allowed).lower()}')
            if not allowed:
                c.exec_driver_sql(
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
                )

    accept(False)
    try:
        yield accept
    finally:
        accept(True)
        admin.dispose()


def _waiting(node) -> bool:
    return "a starting node waits up to --store-wait" in node.log_text()


def test_a_node_started_while_its_store_refuses_waits_and_then_leads(etcd_server, etcd_prefix, fresh_db_url, tmp_path):
    db = fresh_db_url("postgresql")
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 4, 4, str(tmp_path))
    try:
        with refusing_connections(db) as accept:
            node = c.add("n0")
            wait_until(lambda: _waiting(node) or not node.alive(), 60, 0.2, "n0 to say it waits for its store")
            assert node.alive(), f"n0 exited while its store refused connections:\n{node.log_text()[-2000:]}"
            accept(True)
            c.wait_all_led(90, by={"n0"})
        assert node.alive() and "store ready at" in node.log_text()
    finally:
        c.stop_all()


def test_a_node_stopped_while_it_waits_for_its_store_exits_cleanly(etcd_server, etcd_prefix, fresh_db_url, tmp_path):
    db = fresh_db_url("postgresql")
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 4, 4, str(tmp_path))
    try:
        with refusing_connections(db):
            node = c.add("n0")
            wait_until(lambda: _waiting(node) or not node.alive(), 60, 0.2, "n0 to say it waits for its store")
            assert node.alive(), f"n0 exited while its store refused connections:\n{node.log_text()[-2000:]}"
            node.signal(signal.SIGTERM)
            assert node.proc is not None and node.proc.wait(30) == 0, node.log_text()[-2000:]
            assert "the node did not start" in node.log_text()
    finally:
        c.stop_all()


def test_a_store_that_never_answers_ends_the_wait_with_its_error(etcd_server, etcd_prefix, fresh_db_url, tmp_path):
    db = fresh_db_url("postgresql")
    c = Cluster(etcd_server.endpoints, db, etcd_prefix, 4, 4, str(tmp_path))
    try:
        with refusing_connections(db):
            node = c.add("n0", extra_args=["--store-wait", "3"])
            assert node.proc is not None and node.proc.wait(60) == 1
            log = node.log_text()
            assert _waiting(node) and "unavailable" in log and "Traceback" not in log, log[-2000:]
    finally:
        c.stop_all()
