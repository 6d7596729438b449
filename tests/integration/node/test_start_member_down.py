"""A node (re)started while one etcd member is down starts: a quorum still answers.

Found by the nemesis soak: a node restarted while its etcd client's first
member was killed made one start-up call there, failed, and exited 1, though
the other members answered.
"""

from __future__ import annotations

import pytest

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port

pytestmark = pytest.mark.cluster


def test_nodes_start_while_etcd_members_they_may_try_first_are_down(etcd_server, etcd_prefix, fresh_db_url, tmp_path):
    """Two of the three endpoints refuse connections (as killed members do). The client picks its first member
    itself, so each of three nodes starts on a dead one with odds 2/3: without trying the next member, at least
    one of them exits (odds 26/27)."""
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]  # nothing listens there
    db = fresh_db_url("postgresql")
    c = Cluster(",".join([*dead, etcd_server.endpoints]), db, etcd_prefix, 6, 4, str(tmp_path))
    try:
        nodes = [c.add(n) for n in ("n0", "n1", "n2")]
        for node in nodes:
            wait_until(
                lambda node=node: f"node {node.node_id} started" in node.log_text() or not node.alive(),
                60,
                0.2,
                f"{node.node_id} to start (or exit)",
            )
        exited = {n.node_id: n.log_text()[-1500:] for n in nodes if not n.alive()}
        assert not exited, f"nodes exited at start-up with an etcd quorum answering: {exited}"
        view = Cluster(etcd_server.endpoints, db, etcd_prefix, 6, 4, str(tmp_path))  # reads the map only
        view.wait_all_led(60, by={"n0", "n1", "n2"})
    finally:
        c.stop_all()
