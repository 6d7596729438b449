"""A namespace's settings reach a running node's scheduler and follow a live change (real etcd, real
SQLite, a real HTTP sink): with max_running 1 the namespace's slow runs on a node never overlap;
removed through the API, they do, without a restart."""

from __future__ import annotations

import itertools
import uuid

import pytest

from shardcron import Client
from shardcron.dev.testing.cluster import wait_until
from shardcron.spec.job import job_from_dict

pytestmark = pytest.mark.cluster

RUN_MS = 1500  # each run is longer than the jobs' 1 s interval: three jobs always have runs to overlap


def overlaps(ticks) -> int:
    """Pairs of runs that were running at once (one node runs them all); only runs that called the sink."""
    runs = sorted((t.started_at_ms, t.finished_at_ms) for t in ticks if t.http_status == 200)
    return sum(1 for (_, end), (start, _) in itertools.pairwise(runs) if start < end)


def test_max_running_holds_on_the_node_and_a_live_change_reaches_it(make_cluster, tmp_path, sink):
    c = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=2)
    node = c.add("solo")
    c.wait_balanced({"solo"}, 60)
    name = f"capped-{uuid.uuid4().hex[:6]}"
    ids = [f"slow-{i}" for i in range(3)]
    with Client(node.address, namespace=name) as client:
        client.create_namespace(name, quota={"max_running": 1})
        for job_id in ids:
            client.put_job(
                job_from_dict(
                    {
                        "id": job_id,
                        "every": "1s",
                        "overlap": "allow",
                        "executor": {"kind": "http", "url": f"{sink.url}/slow/{RUN_MS}"},
                    }
                )
            )

        def finished():
            return [t for j in ids for t in client.list_ticks(j, limit=100) if t.http_status == 200]

        capped = wait_until(lambda: f if len(f := finished()) >= 6 else None, 90, 0.5, what="six capped runs")
        assert overlaps(capped) == 0, sorted((t.started_at_ms, t.finished_at_ms) for t in capped)
        assert all(t.finished_at_ms - t.started_at_ms >= RUN_MS for t in capped)

        client.update_namespace(name, quota={"max_running": None})
        wait_until(lambda: overlaps(finished()) > 0, 90, 0.5, what="runs at once after the cap was removed")
        for job_id in ids:
            client.delete_job(job_id)
